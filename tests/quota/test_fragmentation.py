"""Live fragmentation: per class, the GPUs free against the largest request one node holds,
in the plan's JSON, table and CSV and in the controller's metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaguard.cli import main
from quotaguard.metrics.controller_metrics import class_facts, quota_families
from quotaguard.quota.cluster import Node, Pod
from quotaguard.quota.fragmentation import class_fragmentation
from quotaguard.quota.quota_report import csv_rows
from tests import policies
from tests.quota.test_cluster import FIXTURE, SAMPLE

POLICY = str(Path(__file__).parents[2] / "config" / "policy.yaml")
ONE_CLASS = policies.policy([{"name": "research", "namespaces": ["research"]}])


def node(name: str, gpus: int, *, ready: bool = True, cordoned: bool = False) -> Node:
    return Node(
        name=name,
        ready=ready,
        unschedulable=cordoned,
        taints=(),
        labels={},
        allocatable={"nvidia.com/gpu": gpus},
    )


def pod(name: str, gpus: int, node_name: str | None, phase: str = "Running") -> Pod:
    return Pod(
        namespace="research",
        name=name,
        phase=phase,
        node_name=node_name,
        queue_name=None,
        pod_group=None,
        owner=None,
        node_selector={},
        gpus={"nvidia.com/gpu": gpus},
    )


def test_one_gpu_pods_spread_two_per_node_leave_no_whole_node() -> None:
    nodes = [node(f"n{i}", 8) for i in range(3)]
    pods = [pod(f"p{i}", 1, f"n{i % 3}") for i in range(6)]
    found = class_fragmentation(ONE_CLASS, nodes, pods)["h100"]
    assert (found.free, found.largest_fit, found.node_size) == (18, 6, 8)
    assert (found.whole_nodes_free, found.fragmented) == (0, 18)


def test_the_same_pods_packed_leave_two_whole_nodes() -> None:
    nodes = [node(f"n{i}", 8) for i in range(3)]
    pods = [pod(f"p{i}", 1, "n0") for i in range(6)]
    found = class_fragmentation(ONE_CLASS, nodes, pods)["h100"]
    assert (found.free, found.largest_fit, found.whole_nodes_free, found.fragmented) == (
        18,
        8,
        2,
        2,
    )


def test_nodes_that_do_not_count_and_pods_that_hold_nothing_are_left_out() -> None:
    nodes = [node("up", 8), node("down", 8, ready=False), node("cordoned", 8, cordoned=True)]
    pods = [
        pod("done", 4, "up", phase="Succeeded"),
        pod("waiting", 4, None, phase="Pending"),
        pod("elsewhere", 8, "down"),
    ]
    found = class_fragmentation(ONE_CLASS, nodes, pods)["h100"]
    assert (found.free, found.largest_fit, found.whole_nodes_free) == (8, 8, 1)


def test_no_nodes_is_all_zeros_not_an_error() -> None:
    found = class_fragmentation(ONE_CLASS, [], [])["h100"]
    assert (found.free, found.largest_fit, found.node_size, found.whole_nodes_free) == (0, 0, 0, 0)


@given(
    sizes=st.lists(st.sampled_from([4, 8]), min_size=1, max_size=6),
    asks=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 8)), max_size=20),
)
def test_what_fits_on_one_node_never_exceeds_what_is_free(
    sizes: list[int], asks: list[tuple[int, int]]
) -> None:
    nodes = [node(f"n{i}", size) for i, size in enumerate(sizes)]
    pods = [pod(f"p{j}", gpus, f"n{i % len(sizes)}") for j, (i, gpus) in enumerate(asks)]
    found = class_fragmentation(ONE_CLASS, nodes, pods)["h100"]
    assert 0 <= found.largest_fit <= min(found.free, found.node_size)
    assert 0 <= found.fragmented <= found.free
    assert found.whole_nodes_free * found.node_size <= found.free - found.fragmented
    assert found.free <= sum(sizes)
    if not asks:  # an empty cluster: every node whole, nothing fragmented
        assert (found.largest_fit, found.fragmented) == (max(sizes), 0)
        assert found.whole_nodes_free == sizes.count(max(sizes))


@pytest.fixture
def report(capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["plan", "--policy", POLICY, "--snapshot", str(FIXTURE), "-o", "json"]) == 0
    found: dict = json.loads(capsys.readouterr().out)
    return found


def test_the_plan_reports_fragmentation_per_class(report: dict) -> None:
    h100 = next(row for row in report["fragmentation"] if row["name"] == "h100")
    assert h100 == {
        "name": "h100",
        "resource": "nvidia.com/gpu",
        "free": 25,
        "largestFit": 8,
        "nodeSize": 8,
        "wholeNodesFree": 2,
        "fragmented": 9,
    }
    assert [row["name"] for row in report["fragmentation"]] == [
        c["name"] for c in report["classes"]
    ]


def test_the_table_and_csv_show_free_and_what_fits(
    report: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--policy", POLICY, "--snapshot", str(FIXTURE)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("CLASS"))
    assert header.split()[-2:] == ["FREE", "FITS"]
    assert next(line for line in lines if line.startswith("h100 ")).split()[-2:] == ["25", "8"]
    rows = csv_rows(report)
    cells = dict(zip(rows[0], next(r for r in rows[1:] if r[4] == "h100"), strict=True))
    assert (cells["free"], cells["largestFit"]) == ("25", "8")


def test_a_class_whose_free_gpus_hold_no_whole_node_is_called_fragmented(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(FIXTURE.read_text())
    whole = [
        item
        for item in document["items"]
        if item["kind"] == "Node" and item["metadata"]["name"].startswith("h100-")
    ]
    # one one-GPU pod on every whole-GPU node: 8-GPU nodes, none free whole
    for index, item in enumerate(whole):
        document["items"].append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"filler-{index}", "namespace": "training"},
                "spec": {
                    "nodeName": item["metadata"]["name"],
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                },
                "status": {"phase": "Running"},
            }
        )
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps(document))
    assert main(["plan", "--policy", POLICY, "--snapshot", str(snapshot)]) == 0
    out = capsys.readouterr().out
    assert "  h100: " in out and "no whole node (8) free" in out


def test_metrics_carry_free_and_largest_fit_in_units_and_gpus(report: dict) -> None:
    samples = {
        (s.name, s.labels.get("class")): s.value
        for family in quota_families(report, class_facts(SAMPLE))
        for s in family.samples
    }
    assert samples[("quotaguard_class_free_gpus", "h100")] == 25
    assert samples[("quotaguard_class_largest_fit_gpus", "h100")] == 8
    assert samples[("quotaguard_class_largest_fit", "h100-1g.10gb")] == 14
    assert samples[("quotaguard_class_largest_fit_gpus", "h100-1g.10gb")] == pytest.approx(2)


def test_the_reports_page_shows_free_and_the_largest_fit_per_class(report: dict) -> None:
    from quotaguard.reports.report_page import render_report_page

    page = render_report_page(report, [], now=0)
    card = page[page.index("<h3>h100<") :]
    card = card[: card.index("</div>")]
    assert "<dt>free</dt><dd>25</dd>" in card
    assert "<dt>largest fit on one node</dt><dd>8</dd>" in card
    without = {**report, "fragmentation": []}
    assert "largest fit on one node" not in render_report_page(without, [], now=0)
