"""Grouped bar chart as inline SVG (the line charts come from `quotaguard.charts.svg`).

Every text that reaches the SVG is escaped here; callers pass plain strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from quotaguard.charts.svg import axis_fractions, title_text, whole_top

WIDTH, HEIGHT = 520, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 120, 28, 34


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    color: str


def _number(value: float) -> str:
    return f"{value:.0f}" if value == int(value) or value >= 10 else f"{value:.1f}"


def grouped_bars(
    title: str,
    groups: Sequence[tuple[str, Sequence[float]]],
    series: Sequence[Series],
    *,
    markers: Sequence[float | None] = (),
) -> str:
    """One cluster of bars per group (e.g. a GPU class), one bar per series in each.

    `markers[i]`, when given, draws a dashed tick over group i (e.g. the tenant's max).
    """
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    highest = max(
        [v for _, values in groups for v in values] + [m for m in markers if m is not None] + [0.0]
    )
    top = whole_top(highest)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{escape(title)}">',
        title_text(title, LEFT, WIDTH),
    ]
    for fraction in axis_fractions(top, whole=True):
        y = TOP + plot_h * (1 - fraction)
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
        )
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="axis" text-anchor="end">'
            f"{escape(_number(top * fraction))}</text>"
        )
    slot = plot_w / max(len(groups), 1)
    bar = slot * 0.8 / max(len(series), 1)
    for index, (label, values) in enumerate(groups):
        x0 = LEFT + slot * index + slot * 0.1
        for position, (entry, value) in enumerate(zip(series, values, strict=False)):
            height = plot_h * max(value, 0.0) / top
            x = x0 + bar * position
            parts.append(
                f'<rect x="{x:.1f}" y="{TOP + plot_h - height:.1f}" width="{bar * 0.9:.1f}" '
                f'height="{height:.1f}" fill="{escape(entry.color)}">'
                f"<title>{escape(f'{label} {entry.label}: {_number(value)}')}</title></rect>"
            )
        marker = markers[index] if index < len(markers) else None
        if marker is not None:
            y = TOP + plot_h * (1 - marker / top)
            parts.append(
                f'<line x1="{x0:.1f}" x2="{x0 + slot * 0.8:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                f'stroke="#1d232a" stroke-dasharray="4 3"><title>'
                f"{escape(f'{label} max: {_number(marker)}')}</title></line>"
            )
        parts.append(
            f'<text x="{x0 + slot * 0.4:.1f}" y="{HEIGHT - 12}" class="axis" '
            f'text-anchor="middle">{escape(label)}</text>'
        )
    for position, entry in enumerate(series):
        y = TOP + 14 * position
        x = WIDTH - RIGHT + 12
        parts.append(
            f'<rect x="{x}" y="{y - 8}" width="12" height="10" fill="{escape(entry.color)}"/>'
        )
        parts.append(f'<text x="{x + 18}" y="{y + 1}" class="legend">{escape(entry.label)}</text>')
    if any(m is not None for m in markers):
        y = TOP + 14 * len(series)
        x = WIDTH - RIGHT + 12
        parts.append(
            f'<line x1="{x}" x2="{x + 12}" y1="{y - 3}" y2="{y - 3}" stroke="#1d232a" '
            'stroke-dasharray="4 3"/>'
        )
        parts.append(f'<text x="{x + 18}" y="{y + 1}" class="legend">max</text>')
    parts.append("</svg>")
    return "".join(parts)
