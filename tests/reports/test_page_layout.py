"""The reports page in a real browser (headless Chromium): it reads at 700 px, with no sideways
scrolling of the page, every chart in view and scaled, wide tables scrolling in their own box,
the cluster summary above the tenants, and no bar hidden under another.

Skips locally when no Chromium is found; under CI=true a missing Chromium fails (browser.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from quotaguard.cli import main
from quotaguard.reports.history import QuotaHistory
from quotaguard.reports.report_page import render_report_page
from tests.quota.test_cluster import FIXTURE
from tests.reports.browser import chromium_or_skip, layout_facts

POLICY = str(Path(__file__).parents[2] / "config" / "policy.yaml")
SCRAPE = Path(__file__).parents[1] / "fixtures" / "telemetry" / "dcgm-scrape.txt"
LONG_NAME = "tenant-" + "x" * 140  # one unbroken word, far wider than the screen


@pytest.fixture(scope="module")
def chromium() -> str:
    return chromium_or_skip()


def plan(capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    argv = ["plan", "--policy", POLICY, "--snapshot", str(FIXTURE), "--gpu-metrics", str(SCRAPE)]
    assert main([*argv, *extra]) == 0
    return capsys.readouterr().out


def served_page(report: dict[str, Any]) -> str:
    """The page as /reports serves it: with quota history, here of a queue filling up."""
    history = QuotaHistory()
    for step in range(5):
        for row in (r for t in report["tenants"] for r in t["classes"]):
            row["usage"] = min(row["nominal"], row["usage"] + step)
        history.record(report, 1000.0 + 600 * step)
    return render_report_page(report, history.points(), now=4000.0)


def assert_reads_at(facts: dict[str, Any], width: int, tenants: int) -> None:
    assert facts["innerWidth"] == width
    view = facts["clientWidth"]  # the window less a vertical scrollbar
    assert facts["scrollWidth"] <= view, "the page scrolls sideways"
    assert facts["bodyScrollWidth"] <= view
    assert len(facts["tenants"]) == tenants
    assert facts["summary"]["bottom"] <= facts["tenants"][0]["box"]["top"]
    assert facts["summary"]["right"] <= view
    for chart in facts["charts"]:
        box = chart["box"]
        assert chart["shown"] and box["width"] > 100 and box["height"] > 100, chart
        assert box["left"] >= 0 and box["right"] <= view, chart
        assert chart["titleFits"], chart
    assert facts["reasons"], "no reason lines measured"
    for reason in facts["reasons"]:  # wrapped inside the table's box, not cut off at its edge
        assert reason["right"] <= reason["boxRight"] and not reason["overflows"], reason
    for table in facts["tables"]:
        assert table["box"]["right"] <= view, table
        if table["tableWidth"] > table["boxWidth"]:
            assert table["overflowX"] in ("auto", "scroll"), table
    assert facts["bars"], "no bars measured"
    covered = [bar["title"] for bar in facts["bars"] if bar["covered"]]
    assert covered == [], f"bars hidden under something else: {covered}"


def test_the_plan_page_from_a_snapshot_reads_at_700px(chromium, capsys, tmp_path):
    facts = layout_facts(chromium, plan(capsys, "-o", "html"), tmp_path / "plan", width=700)
    assert_reads_at(facts, 700, tenants=3)
    assert {chart["kind"] for chart in facts["charts"]} == {"bars"}  # no history from a file
    titles = {bar["title"] for bar in facts["bars"]}
    # recommend mode: the queue now and the recommendation side by side; training's h100 usage
    # equals its recommended nominal (20) and is measured visible above
    assert {"h100-1g.10gb queue now: 14", "h100-1g.10gb recommended: 17"} <= titles
    assert {"h100 usage: 20", "h100 recommended: 20"} <= titles
    # the tenant tables are wider than 700 px: they scroll in their box, the page does not
    assert any(t["tableWidth"] > t["boxWidth"] for t in facts["tables"])


def test_the_served_page_with_history_and_a_long_name_reads_at_700px(chromium, capsys, tmp_path):
    report = json.loads(plan(capsys, "-o", "json"))
    report["tenants"][0]["name"] = LONG_NAME
    report["tenants"][0]["classes"][0]["reason"] = "because-" * 40
    facts = layout_facts(chromium, served_page(report), tmp_path / "served", width=700)
    assert_reads_at(facts, 700, tenants=3)
    lines = [chart for chart in facts["charts"] if chart["kind"] == "lines"]
    assert len(lines) == 3
    # a 760-unit-wide chart scaled down to the screen, its proportions kept
    for chart in lines:
        assert chart["box"]["width"] < 760
        assert chart["box"]["height"] == pytest.approx(chart["box"]["width"] * 240 / 760, abs=3)


def test_on_a_wide_screen_each_tenants_charts_share_a_row(chromium, capsys, tmp_path):
    report = json.loads(plan(capsys, "-o", "json"))
    facts = layout_facts(chromium, served_page(report), tmp_path / "wide", width=1600)
    assert_reads_at(facts, 1600, tenants=3)
    charts = facts["charts"]
    for bars, lines in zip(charts[::2], charts[1::2], strict=True):
        assert (bars["kind"], lines["kind"]) == ("bars", "lines")
        assert (
            bars["box"]["top"] == lines["box"]["top"]
            and bars["box"]["right"] < lines["box"]["left"]
        )
    assert all(t["tableWidth"] <= t["boxWidth"] for t in facts["tables"])  # nothing to scroll
