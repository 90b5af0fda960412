"""/reports: JSON (the plan report shape), CSV, an HTML page with escaped names and SVG charts,
503 without a controller (the Prometheus series: test_metrics.py)."""

from __future__ import annotations

import asyncio
import csv
import io
from html.parser import HTMLParser
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from quotaguard.metrics.controller_metrics import quota_families
from quotaguard.policy.loader import load_policy_text
from quotaguard.quota.class_capacity import capacities_from_totals
from quotaguard.quota.demand import ClassDemand
from quotaguard.quota.quota_planner import plan
from quotaguard.quota.quota_report import CSV_COLUMNS, build_report
from quotaguard.reports.history import QuotaHistory, points_for_span
from quotaguard.reports.report_page import render_report_page
from quotaguard.reports.report_routes import report_routes

POLICY = load_policy_text(
    """
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {name: screen}
spec:
  gpuClasses:
    - {name: h100, resource: nvidia.com/gpu, memory: 80Gi}
    - {name: mig, resource: nvidia.com/mig-1g.10gb, memory: 10Gi, slices: 1}
  tenants:
    - {name: research, namespaces: [research], quota: {h100: {guaranteed: 4, max: 16}}}
    - {name: serving, namespaces: [serving], weight: 2,
       quota: {mig: {guaranteed: 7}, h100: {guaranteed: 2, max: 8}}}
""",
    "screen.yaml",
)


def a_report(**demand: int) -> dict[str, Any]:
    capacity = capacities_from_totals(POLICY, {"h100": 16, "mig": 14}, {})
    wanted = {"research": {"h100": ClassDemand(usage=demand.get("research", 6), pending=3)}}
    return build_report(plan(POLICY, capacity, wanted))


class Source:
    def __init__(self, report: dict[str, Any] | None) -> None:
        self.report = report
        self.history = QuotaHistory(10)

    def latest_report(self) -> dict[str, Any] | None:
        return self.report

    def not_ready_reason(self) -> str:
        return "no plan yet: watch not synced: pods"

    def interval(self) -> float:
        return 30.0


def get(source: Source | None, path: str) -> tuple[int, str, str]:
    async def main() -> tuple[int, str, str]:
        app = web.Application()
        app.router.add_routes(report_routes(source, clock=lambda: 2000.0))
        async with TestClient(TestServer(app)) as client:
            response = await client.get(path)
            return response.status, response.headers["Content-Type"], await response.text()

    return asyncio.run(main())


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.starts: list[str] = []
        self.ends: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.starts.append(tag)

    def handle_endtag(self, tag: str) -> None:
        self.ends.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_json_is_the_plan_report_shape():
    import json

    report = a_report()
    status, content_type, body = get(Source(report), "/reports/quota")
    assert status == 200 and content_type.startswith("application/json")
    assert json.loads(body) == report


def test_without_a_controller_quota_answers_503_with_a_reason():
    import json

    status, _, body = get(None, "/reports/quota")
    assert status == 503
    assert "does not run in this process" in json.loads(body)["reason"]
    status, _, body = get(Source(None), "/reports/quota")
    assert status == 503 and "watch not synced" in json.loads(body)["reason"]
    status, _, page = get(None, "/reports")
    assert status == 503 and "does not run in this process" in page


def test_csv_has_a_header_and_a_row_per_tenant_and_class():
    status, content_type, body = get(Source(a_report()), "/reports/quota.csv")
    assert status == 200 and content_type.startswith("text/csv")
    rows = list(csv.reader(io.StringIO(body)))
    assert rows[0] == list(CSV_COLUMNS)
    pairs = sorted((row["tenant"], row["class"]) for row in csv.DictReader(io.StringIO(body)))
    # research allows every class: a row for mig too, with no guarantee
    assert pairs == [
        ("research", "h100"),
        ("research", "mig"),
        ("serving", "h100"),
        ("serving", "mig"),
    ]


def test_csv_has_the_last_change_with_its_reason_like_the_json():
    report = a_report()
    row = report["tenants"][0]["classes"][0]
    row["lastChange"] = {
        "at": "2026-01-01T00:00:00Z",
        "from": 3,
        "to": row["nominal"],
        "reason": "demand",
        "applied": False,
    }
    _, _, body = get(Source(report), "/reports/quota.csv")
    rows = {(r["tenant"], r["class"]): r for r in csv.DictReader(io.StringIO(body))}
    changed = rows[(report["tenants"][0]["name"], row["class"])]
    assert changed["lastChangeAt"] == "2026-01-01T00:00:00Z"
    assert (changed["lastChangeFrom"], changed["lastChangeTo"]) == ("3", str(row["nominal"]))
    assert (changed["lastChangeReason"], changed["lastChangeApplied"]) == ("demand", "false")
    assert changed["baseWeight"] == str(report["tenants"][0]["baseWeight"])
    others = [r for key, r in rows.items() if key != (changed["tenant"], changed["class"])]
    assert all(r["lastChangeAt"] == "" for r in others)


def test_html_page_parses_escapes_names_and_has_svg_charts():
    report = a_report()
    hostile = "<script>alert('x')</script>"
    report["tenants"][0]["name"] = hostile
    report["tenants"][0]["classes"][0]["reason"] = "a & b <b>bold</b>"
    source = Source(report)
    for offset in (0, 30, 60):
        source.history.record(report, 1900.0 + offset)
    status, content_type, page = get(source, "/reports")
    assert status == 200 and content_type.startswith("text/html")
    assert "<script" not in page and "&lt;script&gt;" in page
    assert "<b>bold</b>" not in page and "a &amp; b &lt;b&gt;bold&lt;/b&gt;" in page
    tags = Tags()
    tags.feed(page)
    assert "script" not in tags.starts
    assert tags.starts.count("svg") == tags.ends.count("svg") >= 4  # bars + history per tenant
    assert tags.starts.count("table") == tags.ends.count("table") == 2  # one per tenant
    assert "polyline" in tags.starts and "rect" in tags.starts
    assert hostile in "".join(tags.text)  # shown as text, not markup
    assert 'http-equiv="refresh" content="30"' in page


def test_page_shows_moves_and_over_quota():
    report = a_report()
    row = report["tenants"][0]["classes"][0]
    row["current"] = {"nominal": 3, "borrowingLimit": 13, "lendingLimit": 0}
    row["lastChange"] = {
        "at": "2026-01-01T00:00:00Z",
        "from": 3,
        "to": row["nominal"],
        "reason": "x",
        "applied": True,
    }
    page = render_report_page(report, [], now=0)
    assert f"3 → {row['nominal']}" in page
    assert f"2026-01-01T00:00:00Z: set 3 → {row['nominal']}" in page


def test_history_is_a_bounded_ring_buffer():
    history = QuotaHistory(points_for_span(interval=3600, span=4 * 3600))
    for hour in range(10):
        history.record(a_report(), hour * 3600.0)
    points = history.points()
    assert len(points) == 5 and points[0].at == 5 * 3600
    assert points[-1].tenants["research"]["h100"].usage == 6
    assert points_for_span(interval=0.001) == 5000  # bounded however short the interval


def test_layout_plan_on_the_page_and_in_the_gauges():
    report = a_report()
    report["nodes"] = [
        {
            "name": "gpu-a",
            "pool": "a100",
            "current": "all-balanced",
            "target": "all-1g.10gb",
            "action": "start",
            "reason": "all-1g.10gb serves 5.7 GPU more <of> the demand",
        },
        {
            "name": "gpu-b",
            "pool": "a100",
            "current": "all-balanced",
            "target": "all-balanced",
            "action": "keep",
            "reason": "no other layout",
        },
        {
            "name": "gpu-c",
            "pool": "a100",
            "current": "all-balanced",
            "target": "all-balanced",
            "action": "keep",
            "reason": "no other layout",
        },
    ]
    page = render_report_page(report, [], now=0)
    assert "<h2>Layouts</h2>" in page and "all-1g.10gb serves 5.7 GPU more &lt;of&gt;" in page
    samples = {
        (m.labels["pool"], m.labels["action"]): m.value
        for family in quota_families(report, {})
        if family.name == "quotaguard_layout_nodes"
        for m in family.samples
    }
    assert samples == {("a100", "keep"): 2, ("a100", "start"): 1}
    assert not [f for f in quota_families(a_report(), {}) if f.name == "quotaguard_layout_nodes"]
    assert "<h2>Layouts</h2>" not in render_report_page(a_report(), [], now=0)


def test_a_class_keeps_one_colour_in_every_tenants_history():
    import re

    report = a_report()
    serving = next(t for t in report["tenants"] if t["name"] == "serving")
    research = next(t for t in report["tenants"] if t["name"] == "research")
    # research holds only mig: the first of its classes, the second of the policy's
    research["classes"] = [dict(r) for r in serving["classes"] if r["class"] == "mig"]
    history = QuotaHistory()
    for offset in (0, 30, 60):
        history.record(report, 1900.0 + offset)
    page = render_report_page(report, history.points(), now=2000)
    colours: dict[str, set[str]] = {}
    for svg in re.findall(r'<svg class="lines".*?</svg>', page):
        for hue, label in re.findall(
            r'stroke="(#[0-9a-f]{6})"[^>]*/><text[^>]*>([^<]*) (?:nominal|recommended)<', svg
        ):
            colours.setdefault(label, set()).add(hue)
    assert len(colours) >= 2
    assert all(len(hues) == 1 for hues in colours.values()), colours
    assert len({next(iter(h)) for h in colours.values()}) == len(colours)


def test_a_queue_field_another_manager_applied_shows_on_the_page():
    report = a_report()
    report["tenants"][0]["conflicts"] = [
        {"field": ".spec.resourceGroups", "manager": "argocd-controller"}
    ]
    page = render_report_page(report, [], now=0)
    assert "Not written: .spec.resourceGroups is owned by argocd-controller" in page
