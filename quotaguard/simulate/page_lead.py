"""The page's first chart, and the one style per arm every chart of the page draws it in.

Every arm keeps its colour (its place in the simulation's arms) and its dash pattern in every
chart. Arms whose figures coincide are drawn so that a reader sees it: in the lead chart one
bar split into a stripe per arm, labelled "pool = dynamic"; in the line charts each of them
dashed with gaps the others' dashes fill, so both colours show along one line, and each
legend entry names the others ("pool (= dynamic)").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from quotaguard.charts.svg import Line, color, title_text
from quotaguard.simulate.arm_replay import Series
from quotaguard.simulate.findings import coinciding
from quotaguard.simulate.simulation import Simulation
from quotaguard.simulate.words import percent

# by the arm's place: none, static, pool, dynamic, geometry, then any further arm solid
DASHES = ("7 3", "2 3", "9 3 2 3", "", "")
SAME_SERIES = 1e-6  # samples closer than this count as the same
WIDTH, ROW, LEFT, RIGHT, TOP = 760, 30, 170, 70, 40


def arm_dash(simulation: Simulation, arm: str) -> str:
    index = simulation.arms.index(arm)
    return DASHES[index] if index < len(DASHES) else ""


def arm_color(simulation: Simulation, arm: str) -> str:
    return color(simulation.arms.index(arm))


def _same(left: Sequence[float], right: Sequence[float]) -> bool:
    return len(left) == len(right) and all(
        abs(a - b) <= SAME_SERIES for a, b in zip(left, right, strict=True)
    )


def arm_lines(simulation: Simulation, values: Callable[[Series], list[float]]) -> list[Line]:
    """One line per arm in its own style; arms whose lines coincide share the line, each
    drawn in its colour on alternate dashes and named with the others in the legend."""
    rows = {arm: values(simulation.runs[arm].series) for arm in simulation.arms}
    lines = []
    for arm in simulation.arms:
        group = [other for other in simulation.arms if _same(rows[arm], rows[other])]
        hue = arm_color(simulation, arm)
        if len(group) == 1:
            lines.append(Line(arm, rows[arm], hue, dash=arm_dash(simulation, arm)))
            continue
        others = " = ".join(other for other in group if other != arm)
        place, size = group.index(arm), 6
        lines.append(
            Line(
                f"{arm} (= {others})",
                rows[arm],
                hue,
                dash=f"{size} {size * (len(group) - 1)}",
                dash_offset=size * place,
            )
        )
    return lines


def lead_chart(simulation: Simulation) -> str:
    """GPU utilisation per arm (arms that coincide on one bar, a stripe each) against the
    bound; the useful share of each as a thinner bar inside."""
    groups = coinciding(simulation)
    shown = [arm for arm in simulation.arms if groups[arm][0] == arm]
    height = TOP + ROW * len(shown) + 34
    plot = WIDTH - LEFT - RIGHT
    title = "GPU utilisation per arm against the bound (inner bar: kept busy)"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}" class="lead">',
        title_text(title, 8, WIDTH),
    ]
    for fraction in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = LEFT + plot * fraction
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP - 6}" y2="{height - 28}" class="grid"/>'
            f'<text x="{x:.1f}" y="{height - 14}" class="axis" text-anchor="middle">'
            f"{fraction:.0%}</text>"
        )
    for row, arm in enumerate(shown):
        parts.extend(_bar(simulation, groups[arm], TOP + ROW * row, plot))
    bound_x = LEFT + plot * min(1.0, simulation.bound)
    parts.append(
        f'<line x1="{bound_x:.1f}" x2="{bound_x:.1f}" y1="{TOP - 8}" y2="{height - 28}" '
        'stroke="#1d232a" stroke-width="1.6" stroke-dasharray="4 3"/>'
        f'<text x="{bound_x + 4:.1f}" y="{TOP - 10}" class="legend">'
        f"bound {escape(percent(simulation.bound))}</text>"
    )
    parts.append("</svg>")
    return "".join(parts)


def _bar(simulation: Simulation, group: Sequence[str], top: float, plot: float) -> list[str]:
    outcome = simulation.metrics[group[0]].overall
    label = " = ".join(group)
    width = plot * min(1.0, outcome.utilization)
    busy = plot * min(1.0, outcome.useful_utilization)
    stripe = (ROW - 8) / len(group)
    parts = [
        f'<text x="{LEFT - 8}" y="{top + ROW / 2:.1f}" class="legend" text-anchor="end">'
        f"{escape(label)}</text>"
    ]
    for index, arm in enumerate(group):
        y = top + 1 + stripe * index
        parts.append(
            f'<rect x="{LEFT}" y="{y:.1f}" width="{width:.1f}" height="{stripe:.1f}" '
            f'fill="{escape(arm_color(simulation, arm))}" fill-opacity="0.45" '
            f'stroke="{escape(arm_color(simulation, arm))}" '
            f'stroke-dasharray="{escape(arm_dash(simulation, arm))}"><title>{escape(arm)} '
            f"{escape(percent(outcome.utilization))}</title></rect>"
        )
    parts.append(
        f'<rect x="{LEFT}" y="{top + ROW / 2 - 5:.1f}" width="{busy:.1f}" height="4" '
        f'fill="#1d232a" fill-opacity="0.55"/>'
        f'<text x="{LEFT + width + 6:.1f}" y="{top + ROW / 2:.1f}" class="legend">'
        f"{escape(percent(outcome.utilization))}</text>"
    )
    return parts
