"""The simulation as one self-contained HTML page: tables, the verdict and inline SVG charts."""

from __future__ import annotations

from html import escape

from quotaguard.charts.svg import Line, color, line_chart, stacked_chart
from quotaguard.simulate.engine import Series
from quotaguard.simulate.report import headline, summary_rows, tenant_rows, verdict
from quotaguard.simulate.simulation import Simulation

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1560px;
color:#1d232a;padding:0 1em}
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.1em;margin:1.6em 0 .4em}
p.meta{color:#4b5661;margin:.1em 0}
table{border-collapse:collapse;margin:.6em 0}
td,th{padding:.25em .8em;border-bottom:1px solid #e3e7eb;text-align:right;white-space:nowrap}
td:first-child,th:first-child{text-align:left}
th{font-weight:600;background:#f5f7f9}
.verdict{background:#f3f7fb;border-left:4px solid #2f6fb5;padding:.8em 1em;max-width:1100px}
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
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _utilisation(series: Series) -> list[float]:
    totals = [sum(column) for column in zip(*series.allocated.values(), strict=True)]
    return [
        used / capacity if capacity else 0.0
        for used, capacity in zip(totals, series.capacity, strict=True)
    ] or [0.0] * len(series.times)


def charts(simulation: Simulation) -> list[tuple[str, list[str]]]:
    """(section title, SVG charts) in the order the page shows them."""
    static = simulation.runs["static"].series
    dynamic = simulation.runs["dynamic"].series
    tenants = sorted(static.allocated)
    colors = {name: color(index) for index, name in enumerate(tenants)}
    times = dynamic.times
    sections = []
    sections.append(
        (
            "Utilisation over time",
            [
                line_chart(
                    "GPU utilisation (share of capacity allocated)",
                    times,
                    [
                        Line("static", _utilisation(static), color(5), dashed=True),
                        Line("dynamic", _utilisation(dynamic), color(0)),
                    ],
                    percent=True,
                    top=1.0,
                )
            ],
        )
    )
    allocation = []
    for name, series in (("static", static), ("dynamic", dynamic)):
        allocation.append(
            stacked_chart(
                f"GPUs allocated per tenant: {name}",
                series.times,
                [Line(t, series.allocated[t], colors[t]) for t in tenants],
                ceiling=Line("capacity", series.capacity, "#1d232a"),
                y_label="GPU equivalents",
            )
        )
    sections.append(("Allocation per tenant", allocation))
    sections.append(
        (
            "Queue lengths",
            [
                line_chart(
                    "Workloads waiting per tenant (static dashed, dynamic solid)",
                    times,
                    [
                        *(Line(f"{t} static", static.pending[t], colors[t], True) for t in tenants),
                        *(Line(f"{t} dynamic", dynamic.pending[t], colors[t]) for t in tenants),
                    ],
                    y_label="workloads",
                )
            ],
        )
    )
    quota_charts = []
    for gpu_class in simulation.policy.spec.gpu_classes:
        lines = []
        for tenant in tenants:
            dynamic_row = dynamic.nominal.get(tenant, {}).get(gpu_class.name)
            static_row = static.nominal.get(tenant, {}).get(gpu_class.name)
            if dynamic_row is None and static_row is None:
                continue
            if static_row is not None:
                lines.append(Line(f"{tenant} static", static_row, colors[tenant], True))
            if dynamic_row is not None:
                lines.append(Line(f"{tenant} dynamic", dynamic_row, colors[tenant]))
        if lines:
            quota_charts.append(
                line_chart(
                    f"Nominal quota of {gpu_class.name} ({gpu_class.resource})",
                    times,
                    lines,
                    y_label="units",
                )
            )
    sections.append(("Quotas over time", quota_charts))
    return sections


def render_html(simulation: Simulation) -> str:
    lines = headline(simulation)
    title = f"quotaguard simulate: {simulation.policy.name}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        *(f'<p class="meta">{escape(line)}</p>' for line in lines[1:]),
        "<h2>Static against dynamic quotas</h2>",
        _table(summary_rows(simulation.static, simulation.dynamic)),
        _table(tenant_rows(simulation.static, simulation.dynamic)),
        f'<p class="verdict">{escape(verdict(simulation))}</p>',
    ]
    for section, svgs in charts(simulation):
        parts.append(f"<h2>{escape(section)}</h2>")
        parts.append('<div class="charts">' + "".join(svgs) + "</div>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
