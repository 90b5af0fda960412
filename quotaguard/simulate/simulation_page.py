"""The simulation as one self-contained HTML page that leads with the answer: one sentence
and one chart (utilisation before and after quotaguard against the bound), the findings as a
short list, then the detail tables and the charts over time."""

from __future__ import annotations

from html import escape

from quotaguard.charts.svg import Line, color, line_chart, stacked_chart
from quotaguard.reports.showback_html import showback_section
from quotaguard.simulate.arm_replay import Series
from quotaguard.simulate.findings import findings, lead
from quotaguard.simulate.page_lead import arm_dash, arm_lines, lead_chart
from quotaguard.simulate.simulation import Simulation
from quotaguard.simulate.simulation_report import (
    headline,
    idle_rows,
    summary_rows,
    tenant_rows,
)

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1560px;
color:#1d232a;padding:0 1em}
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.1em;margin:1.6em 0 .4em}
p.meta{color:#4b5661;margin:.1em 0}
table{border-collapse:collapse;margin:.6em 0}
td,th{padding:.25em .8em;border-bottom:1px solid #e3e7eb;text-align:right;white-space:nowrap}
td:first-child,th:first-child{text-align:left}
th{font-weight:600;background:#f5f7f9}
.verdict{background:#f3f7fb;border-left:4px solid #2f6fb5;padding:.6em 1em .6em 2em;
max-width:1100px}
.verdict li{margin:.3em 0}
.scroll{overflow-x:auto;max-width:100%}
p.meta{overflow-wrap:anywhere}
p.lead{font-size:1.15em;font-weight:600;max-width:1100px;margin:.4em 0 .6em}
svg.lead{width:760px;max-width:100%;height:auto;border:1px solid #e3e7eb;border-radius:4px}
.charts{display:flex;flex-wrap:wrap;gap:12px}
.charts svg{width:760px;max-width:100%;height:auto;border:1px solid #e3e7eb;border-radius:4px}
svg .title{font:600 13px system-ui,sans-serif;fill:#1d232a}
svg .axis{font:11px system-ui,sans-serif;fill:#5f6b73}
svg .legend{font:11px system-ui,sans-serif;fill:#1d232a}
svg .grid{stroke:#e9edf0;stroke-width:1}
"""


def _table(rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(cell)}</th>" for cell in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows[1:]
    )
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="scroll">{table}</div>'  # a wide table scrolls in its own box


def _utilisation(series: Series) -> list[float]:
    totals = [sum(column) for column in zip(*series.allocated.values(), strict=True)]
    return [
        used / capacity if capacity else 0.0
        for used, capacity in zip(totals, series.capacity, strict=True)
    ] or [0.0] * len(series.times)


def _useful(series: Series) -> list[float]:
    return [
        busy / capacity if capacity else 0.0
        for busy, capacity in zip(series.useful, series.capacity, strict=True)
    ] or [0.0] * len(series.times)


def _waiting(series: Series) -> list[float]:
    return [float(sum(column)) for column in zip(*series.pending.values(), strict=True)] or [
        0.0
    ] * len(series.times)


def _quota_charts(simulation: Simulation, colors: dict[str, str]) -> list[str]:
    """Per class, each tenant's nominal quota in the arms whose quotas move beside the static
    arm's hand-set ones, each arm in its own dash."""
    moving = [arm for arm in simulation.arms if simulation.metrics[arm].plans]
    shown = [arm for arm in ("static", *moving) if arm in simulation.runs]
    times = simulation.runs[simulation.arms[-1]].series.times
    found = []
    for gpu_class in simulation.policy.spec.gpu_classes:
        lines = []
        for tenant in colors:
            for arm in shown:
                row = simulation.runs[arm].series.nominal.get(tenant, {}).get(gpu_class.name)
                if row is not None:
                    dash = arm_dash(simulation, arm)
                    lines.append(Line(f"{tenant} {arm}", row, colors[tenant], dash=dash))
        if lines:
            found.append(
                line_chart(
                    f"Nominal quota of {gpu_class.name} ({gpu_class.resource})",
                    times,
                    lines,
                    y_label="units",
                )
            )
    return found


def charts(simulation: Simulation) -> list[tuple[str, list[str]]]:
    """(section title, SVG charts) in the order the page shows them; every arm in each."""
    last = simulation.runs[simulation.arms[-1]].series
    tenants = sorted(last.allocated)
    colors = {name: color(index) for index, name in enumerate(tenants)}
    times = last.times
    over_time = [
        line_chart(
            "GPU utilisation (share of capacity allocated)",
            times,
            arm_lines(simulation, _utilisation),
            percent=True,
            top=1.0,
        ),
        line_chart(
            "Useful utilisation (share of capacity kept busy)",
            times,
            arm_lines(simulation, _useful),
            percent=True,
            top=1.0,
        ),
    ]
    allocation = [
        stacked_chart(
            f"GPUs allocated per tenant: {arm}",
            series.times,
            [
                Line(t, series.allocated.get(t, [0.0] * len(series.times)), colors[t])
                for t in tenants
            ],
            ceiling=Line("capacity", series.capacity, "#1d232a"),
            y_label="GPU equivalents",
        )
        for arm, series in ((arm, simulation.runs[arm].series) for arm in simulation.arms)
    ]
    waiting = line_chart(
        "Workloads waiting, all tenants", times, arm_lines(simulation, _waiting),
        y_label="workloads",
    )  # fmt: skip
    return [
        ("Utilisation over time", over_time),
        ("Allocation per tenant", allocation),
        ("Queue lengths", [waiting]),
        ("Quotas over time", _quota_charts(simulation, colors)),
    ]


def render_html(simulation: Simulation) -> str:
    lines = headline(simulation)
    title = f"quotaguard simulate: {simulation.policy.name}"
    items = "".join(f"<li>{escape(said)}</li>" for said in findings(simulation))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="lead">{escape(lead(simulation))}</p>',
        lead_chart(simulation),
        "<h2>Findings</h2>",
        f'<ul class="verdict">{items}</ul>',
        "<h2>What was simulated</h2>",
        *(f'<p class="meta">{escape(line)}</p>' for line in lines[1:]),
        "<h2>Every arm side by side, and the bound</h2>",
        _table(summary_rows(simulation)),
        "<h2>Where the idle GPU-hours went</h2>",
        _table(idle_rows(simulation)),
        "<h2>Per tenant</h2>",
        _table(tenant_rows(simulation)),
        showback_section(simulation.showback()),
    ]
    for section, svgs in charts(simulation):
        parts.append(f"<h2>{escape(section)}</h2>")
        parts.append('<div class="charts">' + "".join(svgs) + "</div>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
