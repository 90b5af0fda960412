"""Inline SVG charts over simulated time: lines and stacked areas, no external assets.

Every text that reaches the SVG is escaped here; callers pass plain strings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 760, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 150, 40, 30  # RIGHT: the narrowest legend column
LEGEND_CHAR_WIDTH = 6.6  # a generous average advance of the 11px legend font
TITLE_CHAR_WIDTH = 9.5  # the widest common advance of the 13px bold title font
LEGEND_KEY_WIDTH = 36  # left padding, the line sample, and the gap before the label
MAX_RIGHT = WIDTH // 2
MAX_POINTS = 480
PALETTE = ("#2f6fb5", "#d9822b", "#3b9c5a", "#b5404a", "#7a5cb3", "#8c6d46", "#c457a1", "#5f6b73")
TICK_STEPS = (600, 1800, 3600, 7200, 10800, 14400, 21600, 43200, 86400, 172800, 604800)


@dataclass(frozen=True, slots=True)
class Line:
    """`band`: a wide pale stroke that a thin line of the same colour stays visible on;
    `area`: the region under the line filled pale, visible even where another line covers
    its edge. Bands and areas are drawn first, whatever their place in the legend."""

    label: str
    values: Sequence[float]
    color: str
    dashed: bool = False
    band: bool = False
    area: bool = False
    # an explicit stroke-dasharray (overrides `dashed`), and where along it the line starts:
    # lines that coincide, each dashed with gaps the others' dashes fill, stay all visible
    dash: str = ""
    dash_offset: float = 0.0


def color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def title_text(title: str, x: float, width: float) -> str:
    """The chart's title as an SVG text at `x`, cut with an ellipsis where it would run past
    `width` (the whole title stays its tooltip and the chart's aria-label)."""
    room = max(8, int((width - x - 8) / TITLE_CHAR_WIDTH))
    shown = title if len(title) <= room else title[: room - 1] + "…"
    return (
        f'<text x="{x}" y="16" class="title">{escape(shown)}<title>{escape(title)}</title></text>'
    )


def _buckets(count: int) -> list[tuple[int, int]]:
    """Index ranges that average `count` samples down to at most MAX_POINTS points."""
    if count <= MAX_POINTS:
        return [(i, i + 1) for i in range(count)]
    size = -(-count // MAX_POINTS)
    return [(start, min(count, start + size)) for start in range(0, count, size)]


def _reduce(values: Sequence[float], buckets: list[tuple[int, int]]) -> list[float]:
    return [sum(values[a:b]) / (b - a) for a, b in buckets]


def nice_top(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k at or above `value` (1 for nothing)."""
    if value <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    return next(step * scale for step in (1.0, 2.0, 2.5, 5.0, 10.0) if step * scale >= value)


def whole_top(value: float) -> int:
    """The smallest of 1, 2, 5 x 10^k (k >= 0) at or above `value`: an axis of whole units."""
    top = 1
    while top < value:
        top = top * 5 // 2 if str(top)[0] == "2" else top * 2
    return top


def axis_fractions(top: float, *, whole: bool = False) -> tuple[float, ...]:
    """Where the y-axis ticks go, as fractions of `top`: quarters, or for whole units the
    finest split of at most five steps whose ticks are all whole numbers."""
    if not whole:
        return (0.0, 0.25, 0.5, 0.75, 1.0)
    steps = next((n for n in (4, 5, 2) if top % n == 0), 1)
    return tuple(i / steps for i in range(steps + 1))


def _time_label(seconds: float) -> str:
    if seconds % 86400 == 0 and seconds:
        return f"{seconds / 86400:g}d"
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    return f"{seconds / 60:g}m"


def _number(value: float, percent: bool) -> str:
    if percent:
        return f"{100 * value:.0f}%"
    return f"{value:.0f}" if value == int(value) or value >= 100 else f"{value:.1f}"


def _legend_column(lines: Sequence[Line]) -> int:
    """Width of the legend column: wide enough for the longest label, the plot takes the rest."""
    longest = max((len(line.label) for line in lines), default=0)
    needed = math.ceil(LEGEND_KEY_WIDTH + LEGEND_CHAR_WIDTH * longest) + 8
    return min(max(RIGHT, needed), MAX_RIGHT)


def _frame(
    title: str,
    times: Sequence[float],
    top: float,
    *,
    percent: bool,
    y_label: str,
    right: int,
    whole: bool = False,
) -> tuple[list[str], float, float]:
    plot_w, plot_h = WIDTH - LEFT - right, HEIGHT - TOP - BOTTOM
    start, end = (times[0], times[-1]) if times else (0.0, 1.0)
    span = max(end - start, 1.0)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{escape(title)}">',
        title_text(title, LEFT, WIDTH),
        f'<text x="{LEFT}" y="{TOP - 10}" class="axis">{escape(y_label)}</text>',
    ]
    for fraction in axis_fractions(top, whole=whole):
        y = TOP + plot_h * (1 - fraction)
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
        )
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="axis" text-anchor="end">'
            f"{escape(_number(top * fraction, percent))}</text>"
        )
    step = next((s for s in TICK_STEPS if span / s <= 8), TICK_STEPS[-1])
    tick = (start // step) * step
    while tick <= end:
        if tick >= start:
            x = LEFT + plot_w * (tick - start) / span
            parts.append(
                f'<text x="{x:.1f}" y="{HEIGHT - 10}" class="axis" text-anchor="middle">'
                f"{escape(_time_label(tick))}</text>"
            )
        tick += step
    return parts, span, start


def _x(time: float, start: float, span: float, right: int) -> float:
    return LEFT + (WIDTH - LEFT - right) * (time - start) / span


def _y(value: float, top: float) -> float:
    plot_h = HEIGHT - TOP - BOTTOM
    return TOP + plot_h * (1 - (value / top if top > 0 else 0))


BAND_WIDTH, BAND_OPACITY, AREA_OPACITY = 7, 0.3, 0.16


def _stroke(line: Line) -> str:
    """The stroke attributes of a line, the same in the plot and in its legend key."""
    if line.band:
        return f'stroke-width="{BAND_WIDTH}" stroke-opacity="{BAND_OPACITY}"'
    pattern = line.dash or ("5 3" if line.dashed else "")
    dash = f' stroke-dasharray="{escape(pattern)}"' if pattern else ""
    if pattern and line.dash_offset:
        dash += f' stroke-dashoffset="{line.dash_offset:g}"'
    return f'stroke-width="1.6"{dash}'


def _legend(lines: Sequence[Line], right: int) -> list[str]:
    parts = []
    for index, line in enumerate(lines):
        y = TOP + 14 * index
        x = WIDTH - right + 12
        hue = escape(line.color)
        if line.area:
            parts.append(
                f'<rect x="{x}" y="{y - 5}" width="18" height="9" fill="{hue}" '
                f'fill-opacity="{AREA_OPACITY * 2}"/>'
            )
        parts.append(
            f'<line x1="{x}" x2="{x + 18}" y1="{y}" y2="{y}" stroke="{hue}" {_stroke(line)}/>'
        )
        parts.append(f'<text x="{x + 24}" y="{y + 4}" class="legend">{escape(line.label)}</text>')
    return parts


def _drawing_order(lines: Sequence[Line]) -> list[int]:
    """Areas, then bands, then plain lines: nothing pale is drawn over a thin line."""
    return sorted(range(len(lines)), key=lambda i: (not lines[i].area, not lines[i].band))


def line_chart(
    title: str,
    times: Sequence[float],
    lines: Sequence[Line],
    *,
    y_label: str = "",
    percent: bool = False,
    top: float | None = None,
    whole: bool = False,
) -> str:
    """`whole`: the values are counts of whole units, and so are the axis ticks."""
    buckets = _buckets(len(times))
    xs = _reduce(times, buckets)
    reduced = [_reduce(line.values, buckets) for line in lines]
    highest = max((max(values, default=0.0) for values in reduced), default=0.0)
    if top is None:
        top = whole_top(highest) if whole else nice_top(highest)
    right = _legend_column(lines)
    parts, span, start = _frame(
        title, xs, top, percent=percent, y_label=y_label, right=right, whole=whole
    )
    for index in _drawing_order(lines):
        line, values = lines[index], reduced[index]
        path = [
            f"{_x(t, start, span, right):.1f},{_y(v, top):.1f}"
            for t, v in zip(xs, values, strict=True)
        ]
        hue = escape(line.color)
        if line.area and path:
            floor = [f"{_x(xs[-1], start, span, right):.1f},{_y(0, top):.1f}"]
            floor.append(f"{_x(xs[0], start, span, right):.1f},{_y(0, top):.1f}")
            parts.append(
                f'<polygon points="{" ".join(path + floor)}" fill="{hue}" '
                f'fill-opacity="{AREA_OPACITY}" stroke="none"/>'
            )
        parts.append(
            f'<polyline points="{" ".join(path)}" fill="none" stroke="{hue}" {_stroke(line)}/>'
        )
    parts.extend(_legend(lines, right))
    parts.append("</svg>")
    return "".join(parts)


def stacked_chart(
    title: str,
    times: Sequence[float],
    layers: Sequence[Line],
    *,
    ceiling: Line | None = None,
    y_label: str = "",
) -> str:
    """Layers stacked bottom up; `ceiling` (e.g. capacity) drawn as a line above them."""
    buckets = _buckets(len(times))
    xs = _reduce(times, buckets)
    reduced = [_reduce(layer.values, buckets) for layer in layers]
    totals = [sum(column) for column in zip(*reduced, strict=True)] if reduced else [0.0] * len(xs)
    cap = _reduce(ceiling.values, buckets) if ceiling is not None else []
    top = nice_top(max([*totals, *cap, 0.0]))
    dashed_ceiling = (
        [Line(ceiling.label, (), ceiling.color, dashed=True)] if ceiling is not None else []
    )
    legend = [*layers, *dashed_ceiling]
    right = _legend_column(legend)
    parts, span, start = _frame(title, xs, top, percent=False, y_label=y_label, right=right)
    base = [0.0] * len(xs)
    for layer, values in zip(layers, reduced, strict=True):
        upper = [b + v for b, v in zip(base, values, strict=True)]
        forward = [
            f"{_x(t, start, span, right):.1f},{_y(u, top):.1f}"
            for t, u in zip(xs, upper, strict=True)
        ]
        back = [
            f"{_x(t, start, span, right):.1f},{_y(b, top):.1f}"
            for t, b in reversed(list(zip(xs, base, strict=True)))
        ]
        parts.append(
            f'<polygon points="{" ".join(forward + back)}" fill="{escape(layer.color)}" '
            f'fill-opacity="0.75" stroke="none"/>'
        )
        base = upper
    if ceiling is not None:
        points = " ".join(
            f"{_x(t, start, span, right):.1f},{_y(v, top):.1f}"
            for t, v in zip(xs, cap, strict=True)
        )
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{escape(ceiling.color)}" '
            'stroke-width="1.4" stroke-dasharray="5 3"/>'
        )
    parts.extend(_legend(legend, right))
    parts.append("</svg>")
    return "".join(parts)
