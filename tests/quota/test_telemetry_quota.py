"""GPU telemetry in the quota plan: faulty GPUs out of capacity, idle demand discounted."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.cli import main
from quotaguard.quota.class_capacity import class_capacity, without_faulty_gpus
from quotaguard.quota.cluster import parse_objects
from quotaguard.quota.demand import activity_of, demand_of
from quotaguard.quota.quota_planner import plan
from quotaguard.telemetry.metrics_sources import read_metrics_file
from tests.quota import helpers
from tests.quota.test_cluster import FIXTURE, SAMPLE

POLICY = str(Path(__file__).parents[2] / "config" / "policy.yaml")
SCRAPE = Path(__file__).parents[1] / "fixtures" / "telemetry" / "dcgm-scrape.txt"


@dataclass(frozen=True)
class Faulty:
    node: str
    gpu: str
    reason: str = "XID 79"
    mig_instances: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Seen:
    idle: bool
    mean_percent: float = 1.0
    idle_seconds: float = 3600.0


def node(name: str, resources: dict[str, str], **labels: str) -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", **labels},
        },
        "status": {"allocatable": resources, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def capacity_of(
    nodes: list[dict[str, Any]], faulty: list[Faulty]
) -> dict[str, tuple[int, list[str]]]:
    snapshot = parse_objects(nodes, gpu_resources=SAMPLE.gpu_resources)
    rows = class_capacity(SAMPLE, snapshot.nodes, snapshot.pods, faulty_gpus=faulty)
    return {
        name: (row.capacity, [f"{o.node}/{o.gpu}" for o in row.faulty])
        for name, row in rows.items()
        if row.capacity or row.faulty
    }


def test_one_faulty_gpu_is_one_unit_whole_its_mig_instances_or_its_shared_replicas() -> None:
    nodes = [
        node("h", {"nvidia.com/gpu": "8"}),
        node("m", {"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4"}),
        node("s", {"nvidia.com/gpu.shared": "8"}, **{"nvidia.com/gpu.replicas": "4"}),
    ]
    nodes[2]["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3-SHARED"
    assert capacity_of(nodes, []) == {
        "h100": (8, []),
        "h100-1g.10gb": (14, []),
        "h100-3g.40gb": (4, []),
        "shared": (8, []),
    }
    faulty = [
        Faulty("h", "3"),
        Faulty("m", "0", mig_instances={"1g.10gb": 4, "3g.40gb": 1}),
        Faulty("s", "1"),
        Faulty("elsewhere", "0"),
    ]
    assert capacity_of(nodes, faulty) == {
        "h100": (7, ["h/3"]),
        "h100-1g.10gb": (10, ["m/0"]),
        "h100-3g.40gb": (3, ["m/0"]),
        "shared": (4, ["s/1"]),
    }


def test_nodes_without_their_faulty_gpus_offer_what_the_capacity_counts() -> None:
    nodes = [
        node("h", {"nvidia.com/gpu": "8"}),
        node("m", {"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4"}),
        node("spare", {"nvidia.com/gpu": "8"}),
    ]
    faulty = [Faulty("h", "3"), Faulty("h", "3"), Faulty("m", "0", mig_instances={"1g.10gb": 7})]
    snapshot = parse_objects(nodes, gpu_resources=SAMPLE.gpu_resources)
    offered = without_faulty_gpus(SAMPLE, snapshot.nodes, faulty)
    assert {n.name: dict(n.allocatable) for n in offered} == {
        "h": {"nvidia.com/gpu": 7},  # one GPU named twice is one GPU
        "m": {"nvidia.com/mig-1g.10gb": 7, "nvidia.com/mig-3g.40gb": 4},
        "spare": {"nvidia.com/gpu": 8},
    }
    assert offered[2] is snapshot.nodes[2]
    healthy = class_capacity(SAMPLE, offered, snapshot.pods)
    counted = class_capacity(SAMPLE, snapshot.nodes, snapshot.pods, faulty_gpus=faulty)
    assert {k: r.capacity for k, r in healthy.items()} == {
        k: r.capacity for k, r in counted.items()
    }


def test_a_mig_gpu_without_instance_telemetry_costs_its_share_of_the_node() -> None:
    nodes = [node("m", {"nvidia.com/mig-1g.10gb": "14"}, **{"nvidia.com/gpu.count": "2"})]
    assert capacity_of(nodes, [Faulty("m", "1")]) == {"h100-1g.10gb": (7, ["m/1"])}


def test_a_gpu_health_node_condition_takes_the_whole_node_out_and_says_so() -> None:
    sick = node("h", {"nvidia.com/gpu": "8"})
    sick["status"]["conditions"].append({"type": "SysLogsXIDError", "status": "True"})
    well = node("h2", {"nvidia.com/gpu": "8"})
    well["status"]["conditions"].append({"type": "GpuMemWatch", "status": "False"})
    assert capacity_of([sick, well], []) == {"h100": (8, ["h/all"])}


def test_a_node_condition_that_cleared_keeps_the_node_out_for_the_quiet_period() -> None:
    cleared = node("h", {"nvidia.com/gpu": "8"})
    cleared["status"]["conditions"].append(
        {"type": "SysLogsXIDError", "status": "False", "lastTransitionTime": "2026-12-03T18:00:00Z"}
    )
    snapshot = parse_objects([cleared], gpu_resources=SAMPLE.gpu_resources)
    at = 1796320800.0  # 2026-12-03T18:00:00Z

    def h100(now: float | None) -> tuple[int, list[str]]:
        row = class_capacity(SAMPLE, snapshot.nodes, snapshot.pods, now=now)["h100"]
        return row.capacity, [o.reason for o in row.faulty]

    # The sample policy's quiet period is the default 10 minutes.
    assert h100(at + 120) == (0, ["node condition SysLogsXIDError, 480s of quiet period left"])
    assert h100(at + 600) == (8, [])
    assert h100(None) == (8, [])  # no moment given: only a condition that holds counts


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 16),
    st.lists(st.tuples(st.sampled_from(["h", "m"]), st.integers(0, 9)), max_size=30),
)
def test_capacity_never_goes_below_zero_and_only_falls_with_faults(
    gpus: int, raw: list[tuple[str, int]]
) -> None:
    nodes = [
        node("h", {"nvidia.com/gpu": str(gpus)}),
        node("m", {"nvidia.com/mig-1g.10gb": str(gpus)}, **{"nvidia.com/gpu.count": "2"}),
    ]
    faulty = [Faulty(n, str(g)) for n, g in raw]
    healthy = {k: v[0] for k, v in capacity_of(nodes, []).items()}
    with_faults = {k: v[0] for k, v in capacity_of(nodes, faulty).items()}
    for name, amount in with_faults.items():
        assert 0 <= amount <= healthy.get(name, 0)
    distinct_h = len({g for n, g in raw if n == "h"})
    assert with_faults.get("h100", 0) == max(0, gpus - distinct_h) or distinct_h > gpus


def pod(namespace: str, name: str, gpus: int, node_name: str = "h") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {
            "nodeName": node_name,
            "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
        "status": {"phase": "Running"},
    }


def borrowing(activity: Mapping[tuple[str, str], Seen], idle_demand: str) -> dict[str, Any]:
    """Notebooks (guarantee 2) holds 6 GPUs in three pods; research (guarantee 2) wants 6."""
    policy = helpers.policy(
        [
            {"name": "notebooks", "quota": {"h100": {"guaranteed": 2, "max": 8}}},
            {"name": "research", "quota": {"h100": {"guaranteed": 2, "max": 8}}},
        ],
        idleDemand=idle_demand,
        maxStepPercent=100,
    )
    objects = [
        node("h", {"nvidia.com/gpu": "8"}),
        pod("notebooks", "nb-0", 2),
        pod("notebooks", "nb-1", 2),
        pod("notebooks", "nb-2", 2),
        pod("research", "train-0", 2),
        {
            **pod("research", "train-1", 4),
            "spec": {**pod("research", "train-1", 4)["spec"], "nodeName": None},
            "status": {"phase": "Pending"},
        },
    ]
    snapshot = parse_objects(objects, gpu_resources=policy.gpu_resources)
    demand = demand_of(policy, snapshot, activity=activity)
    result = plan(policy, class_capacity(policy, snapshot.nodes, snapshot.pods), demand)
    rows = {t.name: t.for_class("h100") for t in result.tenants}
    return {
        name: (row.nominal, row.borrowing_limit, row.reason) for name, row in rows.items() if row
    }


def test_discount_stops_counting_idle_gpus_above_the_guarantee_so_borrowing_shrinks() -> None:
    idle = {("notebooks", "nb-0"): Seen(True), ("notebooks", "nb-1"): Seen(True)}
    counted = borrowing(idle, "count")
    # Both demand 6 of 8 at equal weights: 4 each.
    assert counted["notebooks"][:2] == (4, 4) and counted["research"][:2] == (4, 4)
    discounted = borrowing(idle, "discount")
    # 4 of notebooks' 6 units are idle, all above its guarantee of 2: its demand is 2, so its
    # quota falls to the guarantee and research gets the rest as those pods end (no eviction).
    assert discounted["notebooks"][:2] == (2, 6)
    assert discounted["research"][:2] == (6, 2)
    assert "idle 4 above guarantee not counted" in discounted["notebooks"][2]
    busy = borrowing({k: Seen(False) for k in idle}, "discount")
    assert busy == counted


def test_activity_rows_count_allocated_used_and_idle_units_per_tenant_and_class() -> None:
    document = json.loads(FIXTURE.read_text())
    snapshot = parse_objects(document["items"], gpu_resources=SAMPLE.gpu_resources)
    rows = activity_of(
        SAMPLE,
        snapshot,
        {
            ("training", "finetune-0"): Seen(True, 2.0, 7200),
            ("research-llm", "pretrain-0"): Seen(False, 90.0),
        },
    )
    h100 = rows["training"]["h100"]
    assert (h100.allocated, h100.observed, h100.idle, h100.idle_pods) == (
        20,
        12,
        4,
        ("training/finetune-0",),
    )
    assert h100.used == pytest.approx(8 * 0.9 + 4 * 0.02)
    assert h100.idle_gpu_hours == 8.0  # 4 whole GPUs idle for 2 hours


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", "--policy", POLICY, "--snapshot", str(FIXTURE), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_plan_with_a_scrape_reports_faulty_gpus_idle_units_and_what_it_skipped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "--gpu-metrics", str(SCRAPE), "--output", "json")
    report = json.loads(out)
    assert code == 0
    h100 = next(c for c in report["classes"] if c["name"] == "h100")
    assert h100["capacity"] == 46  # 48 healthy, less two faulty GPUs
    assert h100["faultyGpus"] == [
        {"node": "h100-01", "gpu": "3", "reason": "XID 79"},
        {"node": "h100-03", "gpu": "7", "reason": "row remapping failed"},
    ]
    training = next(t for t in report["tenants"] if t["name"] == "training")
    row = next(r for r in training["classes"] if r["class"] == "h100")
    assert (row["allocated"], row["idle"], row["idlePods"]) == (20, 4, ["training/finetune-0"])
    assert report["telemetry"]["note"].startswith("idleness judged on a single sample")
    assert "1 series skipped: unknown node" in err


def test_plan_with_a_saved_range_query_judges_idleness_over_idle_for(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The fixture's scrape as Prometheus would hold it: the same values every minute for 40
    # minutes up to now, saved as the JSON of a query_range.
    now = time.time()
    scraped = read_metrics_file(SCRAPE, now=now)
    result = [
        {
            "metric": {"__name__": s.metric, **s.labels},
            "values": [[now - 60 * i, str(s.points[-1][1])] for i in range(40, -1, -1)],
        }
        for s in scraped.series
    ]
    saved = tmp_path / "range.json"
    document = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    saved.write_text(json.dumps(document))
    code, out, _ = run(capsys, "--gpu-metrics", str(saved), "--output", "json")
    report = json.loads(out)
    assert code == 0 and report["telemetry"]["note"] is None  # judged over the window
    training = next(t for t in report["tenants"] if t["name"] == "training")
    row = next(r for r in training["classes"] if r["class"] == "h100")
    assert (row["idle"], row["idlePods"]) == (4, ["training/finetune-0"])
    # 4 GPUs idle for the 40 minutes seen: 2.67 GPU-hours
    assert row["idleGpuHours"] == pytest.approx(4 * 40 / 60, abs=0.02)


def test_plan_without_telemetry_or_with_prometheus_down_plans_as_today(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, baseline, _ = run(capsys, "--output", "json")
    code, out, err = run(
        capsys,
        "--prometheus-url",
        "http://127.0.0.1:9",
        "--prometheus-timeout",
        "2",
        "--output",
        "json",
    )
    assert code == 0
    assert "planning without GPU telemetry" in err
    report, before = json.loads(out), json.loads(baseline)
    assert report["telemetry"]["available"] is False
    assert report["telemetry"]["note"].startswith(
        "no GPU telemetry: http://127.0.0.1:9: unreachable"
    )
    assert before["telemetry"]["note"].startswith("no GPU telemetry: none given")
    for key in ("classes", "tenants"):
        assert report[key] == before[key]


def test_plan_with_an_unreadable_metrics_file_warns_and_plans(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "metrics.json"
    bad.write_text('{"status": "error", "error": "bad_data"}')
    code, out, err = run(capsys, "--gpu-metrics", str(bad))
    assert code == 0 and "Prometheus answered an error: bad_data" in err
    assert "telemetry: " in out and "no GPU telemetry" in out


def test_idle_gpu_hours_of_many_small_slices_add_up_before_rounding() -> None:
    # 14 notebooks on 1g.10gb slices (1/7 GPU each), idle for 3 minutes: 0.1 GPU-hours, where
    # each pod's own share (0.007) rounded to 3 places on the way would lose 2 %.
    objects = [node("m", {"nvidia.com/mig-1g.10gb": "14"}, **{"nvidia.com/mig.strategy": "mixed"})]
    for i in range(14):
        notebook = pod("notebooks", f"nb-{i}", 0, node_name="m")
        notebook["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
        objects.append(notebook)
    snapshot = parse_objects(objects, gpu_resources=SAMPLE.gpu_resources)
    idle = {("notebooks", f"nb-{i}"): Seen(True, 1.0, 180.0) for i in range(14)}
    rows = activity_of(SAMPLE, snapshot, idle)
    row = rows["notebooks"]["h100-1g.10gb"]
    assert row.idle == 14
    assert row.idle_gpu_hours == pytest.approx(0.1)
    assert row.used == pytest.approx(14 * 0.01)
