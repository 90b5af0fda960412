"""The simulation page leads with the answer: one sentence and one chart, then the findings,
then the detail tables; each arm keeps its style in every chart, and arms that coincide are
drawn and named so that a reader sees it. Checked in headless Chromium too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from quotaguard.policy.loader import load_policy_file
from quotaguard.simulate.findings import findings, lead
from quotaguard.simulate.simulation import Simulation, simulate
from quotaguard.simulate.simulation_page import render_html
from quotaguard.simulate.simulation_report import render_text
from quotaguard.simulate.trace import load_trace
from quotaguard.simulate.words import IDLE_LABELS
from tests.reports.browser import chromium_or_skip, layout_facts

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def day() -> Simulation:
    """The sample day: pool, dynamic and geometry reach the same utilisation."""
    policy = load_policy_file(ROOT / "config" / "policy.yaml")
    return simulate(policy, load_trace(ROOT / "tests" / "simulate" / "small.yaml"))


def test_the_page_opens_with_one_sentence_one_chart_then_findings_then_tables(day):
    page = render_html(day)
    body = page[page.index("<body>") :]
    sentence = body.index('<p class="lead">')
    chart = body.index('<svg xmlns="http://www.w3.org/2000/svg"')
    listed = body.index('<ul class="verdict">')
    table = body.index("<table>")
    assert sentence < chart < listed < table
    assert 'class="lead"' in body[chart : chart + 300]
    said = lead(day)
    assert said.count(". ") == 0 and said.endswith(".")  # one sentence
    none, bound = day.metrics["none"].overall.utilization, day.bound
    assert f"against {100 * none:.1f}% without it" in said
    assert f"the {100 * bound:.1f}% no arm could pass" in said
    assert "the biggest idle reason left is" in said
    assert body.count("<li>") == len(findings(day)) <= 12


def test_the_terminal_leads_with_the_same_sentence(day):
    text = render_text(day)
    first = " ".join(text.split("\n\n")[0].split())
    assert first == lead(day)
    assert text.split("\n\n")[-1].startswith("Findings:\n- ")


def _svgs(page: str) -> list[str]:
    return re.findall(r"<svg .*?</svg>", page, re.DOTALL)


def test_arms_that_coincide_are_drawn_and_named_together(day):
    groups = [arm for arm in day.arms if day.metrics[arm].overall == day.metrics["pool"].overall]
    assert len(groups) > 1, "the sample's pool and quotaguard arms coincide"
    page = render_html(day)
    lead_chart = _svgs(page)[0]
    assert ">" + " = ".join(groups) + "</text>" in lead_chart  # one bar, named for all
    utilisation = next(svg for svg in _svgs(page) if "GPU utilisation (share" in svg)
    # each arm of the group on alternating dashes, named with the others in the legend
    assert f"{groups[0]} (= {' = '.join(groups[1:])})" in utilisation


def test_each_arm_keeps_its_colour_and_dash_in_every_chart(day):
    page = render_html(day)
    styles: dict[str, set[str]] = {}
    for svg in _svgs(page)[1:]:
        for key in re.findall(r'<line x1[^>]*?stroke="([^"]+)"([^>]*)/><text[^>]*>([^<]+)<', svg):
            hue, attributes, label = key
            arm = label.split(" ")[0]
            if arm in day.arms and label.split(" (=")[0] == arm:
                dash = re.search(r'stroke-dasharray="([^"]+)"', attributes)
                coinciding = "(=" in label
                styles.setdefault(arm, set()).add(hue + ("" if coinciding or not dash else dash[1]))
    assert set(styles) == set(day.arms)
    assert all(len(found) == 1 for found in styles.values()), styles
    assert len({next(iter(found)) for found in styles.values()}) == len(day.arms)


@pytest.mark.parametrize("width", [700, 1400])
def test_in_a_browser_the_answer_is_on_the_first_screen(day, tmp_path, width):
    chromium = chromium_or_skip()
    facts = layout_facts(chromium, render_html(day), tmp_path / "page", width=width, height=900)
    view = facts["clientWidth"]
    assert facts["scrollWidth"] <= view, "the page scrolls sideways"
    first = facts["charts"][0]
    assert first["kind"] == "lead" and first["shown"] and first["titleFits"]
    assert first["box"]["bottom"] <= 900, "the lead chart is below the first screen"
    assert first["box"]["right"] <= view
    assert first["box"]["bottom"] <= facts["tables"][0]["box"]["top"]
    for chart in facts["charts"]:
        assert chart["box"]["right"] <= view and chart["titleFits"], chart


def test_the_idle_finding_names_the_reasons_biggest_first(day):
    [said] = [item for item in findings(day) if item.startswith("GPU-hours not kept busy")]
    idle = day.metrics["geometry"].idle
    ranked = [label for kind, label in sorted(
        ((k, v) for k, v in IDLE_LABELS.items() if idle.get(k)), key=lambda kv: -idle[kv[0]]
    )]  # fmt: skip
    arm_part = said.split(";")[0]
    assert [arm_part.index(label) for label in ranked] == sorted(
        arm_part.index(label) for label in ranked
    )
