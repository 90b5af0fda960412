"""What the reports page says, read back as a person reads it (the browser's view of its layout:
test_page_layout.py): the queue's value now beside the recommendation, usage in sight where it
equals nominal, the cluster summary above the tenants."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaguard.cli import main
from quotaguard.reports.bars import Series, grouped_bars
from quotaguard.reports.history import QuotaHistory
from quotaguard.reports.report_page import class_colors, render_report_page
from quotaguard.reports.summary import cluster_summary
from tests.quota.test_cluster import FIXTURE
from tests.reports.page import cards, cells_of, class_row, polylines, rects, sections, tenant

POLICY = str(Path(__file__).parents[2] / "config" / "policy.yaml")
SCRAPE = Path(__file__).parents[1] / "fixtures" / "telemetry" / "dcgm-scrape.txt"


def plan(capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    argv = ["plan", "--policy", POLICY, "--snapshot", str(FIXTURE), *extra]
    assert main(argv) == 0
    return capsys.readouterr().out


@pytest.fixture
def report(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(plan(capsys, "--gpu-metrics", str(SCRAPE), "-o", "json"))
    return found


def row_of(report: dict[str, Any], name: str, gpu_class: str) -> dict[str, Any]:
    tenant_ = next(t for t in report["tenants"] if t["name"] == name)
    row: dict[str, Any] = next(r for r in tenant_["classes"] if r["class"] == gpu_class)
    return row


def with_history(report: dict[str, Any], points: int = 4) -> QuotaHistory:
    history = QuotaHistory()
    for i in range(points):
        history.record(report, 1000.0 + 60 * i)
    return history


def test_recommend_mode_puts_the_queue_now_beside_the_recommendation_in_the_table(report):
    assert report["mode"] == "recommend"
    page = render_report_page(report, [], now=0)
    inference = tenant(page, "inference")
    heads = [c.text for row in inference.rows for c in row if c.header]
    assert "queue now" in heads and "recommended" in heads
    row = class_row(inference, "h100-1g.10gb")
    source = row_of(report, "inference", "h100-1g.10gb")
    now = [str(source["current"][k]) for k in ("nominal", "borrowingLimit", "lendingLimit")]
    recommended = [str(source[k]) for k in ("nominal", "borrowingLimit", "lendingLimit")]
    assert now == ["14", "14", "0"] and recommended == ["17", "11", "3"]
    assert cells_of(row, "now") == now
    assert cells_of(row, "rec") == recommended
    # what is recommended to change stands out; what stays does not
    assert [c.text for c in row if "moved" in c.classes] == recommended
    kept = class_row(inference, "h100-3g.40gb")
    assert not [c for c in kept if "moved" in c.classes]
    assert "weight: queue now 2, recommended 4 (base 2)" in "".join(inference.text)


def test_recommend_mode_draws_a_bar_for_the_queue_now_and_one_for_the_recommendation(report):
    page = render_report_page(report, [], now=0)
    bars = rects(tenant(page, "inference").svgs[0])
    assert bars["h100-1g.10gb queue now: 14"]["height"] > 0
    assert (
        bars["h100-1g.10gb recommended: 17"]["height"]
        > bars["h100-1g.10gb queue now: 14"]["height"]
    )


def test_recommend_mode_history_shows_the_queue_now_as_a_band_beside_the_recommended_line(report):
    page = render_report_page(report, with_history(report).points(), now=1200)
    history = tenant(page, "inference").svgs[1]
    assert "h100-1g.10gb recommended<" in history and "h100-1g.10gb queue now<" in history
    hue = class_colors(report)["h100-1g.10gb"]
    lines = [line for line in polylines(history) if line["color"] == hue]
    band = next(line for line in lines if line["band"])
    recommended = next(line for line in lines if not line["band"] and not line["dashed"])
    usage = next(line for line in lines if line["dashed"])
    # 14 now, 17 recommended, 6 used: three heights, the higher value the higher on the chart
    assert usage["points"][0][1] > band["points"][0][1] > recommended["points"][0][1]
    assert sum(1 for line in polylines(history) if line["band"]) == 2  # one per class held


def test_apply_mode_shows_one_nominal_moving_from_the_queue_to_the_target(report):
    report["mode"] = "apply"
    page = render_report_page(report, with_history(report).points(), now=1200)
    inference = tenant(page, "inference")
    heads = [c.text for row in inference.rows for c in row if c.header]
    assert "queue now" not in heads and "nominal" in heads
    row = class_row(inference, "h100-1g.10gb")
    assert [c.text for c in row if "moved" in c.classes] == ["14 → 17", "14 → 11", "0 → 3"]
    assert "queue now" not in inference.svgs[0] + inference.svgs[1]
    assert "h100-1g.10gb nominal<" in inference.svgs[1]


def test_usage_equal_to_nominal_keeps_its_own_bar_and_area(report):
    row = row_of(report, "training", "h100")
    assert row["usage"] == row["nominal"] == 20  # the fixture's training queue is full
    page = render_report_page(report, with_history(report).points(), now=1200)
    training = tenant(page, "training")
    bars = rects(training.svgs[0])
    usage, nominal = bars["h100 usage: 20"], bars["h100 recommended: 20"]
    assert usage["height"] == nominal["height"] > 0
    assert usage["x"] >= nominal["x"] + nominal["width"]  # beside it, not under it
    # the history: usage is a shaded area reaching the nominal line, drawn under it
    history = training.svgs[1]
    area = history.index('fill-opacity="0.16"')
    assert area < history.index('stroke="#2f6fb5" stroke-width="1.6"/>')


def test_the_cluster_summary_comes_first_with_each_class_and_what_needs_a_look(report):
    page = render_report_page(report, [], now=0)
    found = sections(page)
    assert [s.kind for s in found][:2] == ["summary", "tenant"]
    summary = "".join(found[0].text)
    assert "Mode recommend: nothing is written to the queues" in summary
    h100 = cards(page)["h100"]
    assert h100 == {
        "capacity": "46",
        "outside tenants": "3",
        "faulty GPUs": "2",
        "distributable": "40",
        "guaranteed": "16",
        "usage": "20",
        "used": "7.48",
        "idle": "4",
        "pending": "24",
        "free": "25",
        "largest fit on one node": "8",
    }
    assert list(cards(page)) == [c["name"] for c in report["classes"]]
    assert "h100-01 GPU 3: XID 79" in summary
    assert "0 over quota" in summary and "0 conflicts" in summary and "3 tenants" in summary


def test_the_summary_names_tenants_over_quota_and_conflicts(report):
    over = row_of(report, "notebooks", "shared")
    over["usage"], over["overQuota"] = 14, True
    report["tenants"][0]["conflicts"] = [{"field": ".spec.cohort", "manager": "argocd"}]
    page = render_report_page(report, [], now=0)
    summary = "".join(sections(page)[0].text)
    assert '<li class="bad"><b>1</b> over quota</li>' in page
    assert '<li class="bad"><b>1</b> conflict</li>' in page
    assert "notebooks shared: usage 14 above nominal 10" in summary
    assert "inference: .spec.cohort owned by argocd" in summary


def test_summary_sums_each_class_over_the_tenants(report):
    summary = {c.name: c for c in cluster_summary(report).classes}
    rows = [r for t in report["tenants"] for r in t["classes"] if r["class"] == "h100-1g.10gb"]
    assert summary["h100-1g.10gb"].usage == sum(r["usage"] for r in rows) == 6
    assert summary["h100-1g.10gb"].pending == sum(r["pending"] for r in rows)
    assert summary["h100-1g.10gb"].guaranteed == 14
    assert cluster_summary(report).changes == 15
    without = copy.deepcopy(report)
    for r in (r for t in without["tenants"] for r in t["classes"]):
        r["used"] = r["idle"] = None
    assert not cluster_summary(without).telemetry
    page = render_report_page(without, [], now=0)
    assert "<dt>used</dt>" not in page and ">idle</th>" not in page


def test_the_plan_html_from_a_snapshot_is_the_page(capsys):
    page = plan(capsys, "-o", "html")
    kinds = ["summary", "tenant", "tenant", "tenant", "showback"]
    assert [s.kind for s in sections(page)] == kinds
    assert 'http-equiv="refresh"' not in page  # a file, not a wall screen
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    # one table per tenant, then the showback's per tenant and per class and model
    assert page.count('<div class="scroll"><table') == page.count("<table") == 5


@given(st.lists(st.lists(st.integers(0, 500), min_size=5, max_size=5), min_size=1, max_size=6))
def test_no_bar_hides_another_and_every_nonzero_value_has_a_bar(groups):
    series = [Series(f"s{i}", "#000") for i in range(5)]
    labelled = [(f"g{g}", [float(v) for v in values]) for g, values in enumerate(groups)]
    bars = rects(grouped_bars("t", labelled, series))
    assert len(bars) == 5 * len(groups)
    spans = sorted((b["x"], b["x"] + b["width"]) for b in bars.values())
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))
    for label, values in labelled:
        for entry, value in zip(series, values, strict=True):
            bar = bars[f"{label} {entry.label}: {value:.0f}"]
            assert (bar["height"] > 0) == (value > 0)


def test_a_queue_not_found_shows_no_value_now_and_no_band(report):
    row = row_of(report, "notebooks", "shared")
    row["current"] = None  # the ClusterQueue does not exist (yet)
    page = render_report_page(report, with_history(report).points(), now=1200)
    notebooks = tenant(page, "notebooks")
    assert cells_of(class_row(notebooks, "shared"), "now") == ["-", "-", "-"]
    assert cells_of(class_row(notebooks, "shared"), "rec") == ["10", "22", "2"]
    history = notebooks.svgs[1]
    assert "shared queue now<" not in history and "h100-1g.10gb queue now<" in history
    assert with_history(report).points()[0].tenants["notebooks"]["shared"].current is None
    assert with_history(report).points()[0].tenants["notebooks"]["h100-1g.10gb"].current == 0
