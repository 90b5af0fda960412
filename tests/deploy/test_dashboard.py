"""The Grafana dashboard: valid JSON Grafana's sidecar can load, a datasource variable instead
of a fixed one, no overlapping panels, and only series quotaguard really exports (e2e runs every
query against a real Prometheus scraping a real quotaguard)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import quotaguard.webhook.server  # noqa: F401  (registers the admission series)
from quotaguard.metrics.controller_metrics import publish_report
from quotaguard.metrics.registry import REGISTRY
from quotaguard.policy.loader import load_policy_file
from quotaguard.quota.class_capacity import capacities_from_totals
from quotaguard.quota.quota_planner import plan
from quotaguard.quota.quota_report import build_report
from tests.deploy.manifests import CONFIG

DASHBOARD = CONFIG / "components" / "prometheus" / "dashboards" / "quotaguard.json"


def dashboard() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return found


def queries() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


# Published with the showback reports (GPU-hours allocated, busy and idle, and their cost, per
# tenant, class and GPU model); the dashboard draws them by these names and labels.
SHOWBACK_SERIES = {"quotaguard_showback_gpu_hours", "quotaguard_showback_cost"}
SHOWBACK_LABELS = {"tenant", "class", "model"}


def with_telemetry_faults_and_layouts(report: dict[str, Any]) -> None:
    """What a controller with GPU telemetry, a faulty GPU and a geometry pool reports: the
    series that exist only then are exported too."""
    warnings = {"unknown node": 2}
    report["telemetry"] = {"source": "prometheus", "available": True, "warnings": warnings}
    for tenant in report["tenants"]:
        for row in tenant["classes"]:
            row.update(allocated=1, used=0.5, idle=1)
    row = report["classes"][0]
    row["faultyGpuCount"] = 1
    row["faultyGpus"] = [{"node": "gpu-1", "gpu": "0", "reason": "XID 79"}]
    report["nodes"] = [{"name": "gpu-1", "pool": "h100", "action": "keep"}]
    # the planning cycle's fragmentation rows (quota/fragmentation.py)
    report["fragmentation"] = [
        {"name": c["name"], "resource": c["resource"], "free": 8, "largestFit": 8}
        for c in report["classes"]
    ]


def exported_names() -> set[str]:
    policy = load_policy_file(CONFIG / "policy.yaml")
    totals = {c.name: 8 for c in policy.spec.gpu_classes}
    report = build_report(plan(policy, capacities_from_totals(policy, totals, {}), {}))
    for tenant in report["tenants"]:  # queues that exist, as the controller reads them
        for row in tenant["classes"]:
            row["current"] = {"nominal": 1, "borrowingLimit": 1, "lendingLimit": 0}
        tenant["currentWeight"] = 1.0
    with_telemetry_faults_and_layouts(report)
    publish_report(report, policy, leader=True, at=0.0, interval=60.0)
    text = generate_latest(REGISTRY).decode()
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    # A counter with labels and no child yet has no sample: its family still names it.
    families = list(text_string_to_metric_families(text))
    names |= {f"{f.name}_total" for f in families if f.type == "counter"}
    return names


def test_every_query_reads_series_quotaguard_exports() -> None:
    exported = exported_names() | SHOWBACK_SERIES
    used = {name for q in queries() for name in re.findall(r"quotaguard_[a-z_]+", q)}
    assert used, "the dashboard queries nothing"
    assert used <= exported, sorted(used - exported)


def test_every_metric_of_telemetry_faults_layouts_and_showback_is_drawn() -> None:
    used = {name for q in queries() for name in re.findall(r"quotaguard_[a-z_]+", q)}
    not_drawn = {
        "quotaguard_quota_idle_gpus",
        "quotaguard_quota_used_gpus",
        "quotaguard_quota_allocated_gpus",
        "quotaguard_class_faulty_gpus",
        "quotaguard_class_faulty_gpu",
        "quotaguard_telemetry_available",
        "quotaguard_telemetry_skipped_series",
        "quotaguard_layout_nodes",
        "quotaguard_layout_changes_total",
        *SHOWBACK_SERIES,
    } - used
    assert not not_drawn, sorted(not_drawn)


def test_showback_panels_read_each_kind_by_tenant_class_and_model() -> None:
    showback = [q for q in queries() if "quotaguard_showback_" in q]
    kinds = set(re.findall(r'kind="([a-z]+)"', " ".join(showback)))
    assert kinds == {"allocated", "busy", "idle"}
    grouped = [set(re.findall(r"sum by \(([^)]*)\)", q)[0].split(", ")) for q in showback]
    assert all(labels <= SHOWBACK_LABELS | {"kind"} for labels in grouped)
    assert SHOWBACK_LABELS in grouped  # the table, per tenant, class and model


def test_panels_use_the_datasource_variable_and_do_not_overlap() -> None:
    board = dashboard()
    assert board["uid"] == "quotaguard"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        area = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area


def test_file_is_what_the_sidecar_loads(tmp_path: Path) -> None:
    text = DASHBOARD.read_text()
    assert json.loads(text)["title"] == "quotaguard"
    assert text.endswith("\n")
