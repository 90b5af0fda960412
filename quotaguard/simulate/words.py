"""How the simulation's numbers are spelled for people: spans, percentages, counts, tables."""

from __future__ import annotations

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0


def format_span(seconds: float) -> str:
    """A waiting time people read: 45s, 22m, 3h10m, 1d4h."""
    seconds = max(0.0, seconds)
    if seconds < MINUTE:
        return f"{seconds:.0f}s"
    minutes = round(seconds / MINUTE)
    if minutes < 60:
        return f"{minutes}m"
    if seconds < DAY:
        hours, rest = divmod(minutes, 60)
        return f"{hours}h{rest:02d}m"
    days, rest = divmod(round(seconds / HOUR), 24)
    return f"{days}d{rest}h"


def hours(seconds: float) -> str:
    return f"{seconds / HOUR:g}h" if seconds % HOUR == 0 else format_span(seconds)


def signed_span(seconds: float, zero: str = "±0") -> str:
    if abs(seconds) < 1:
        return zero
    return ("+" if seconds > 0 else "-") + format_span(abs(seconds))


def percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def points(before: float, after: float, zero: str = "±0") -> str:
    change = 100 * (after - before)
    return zero if abs(change) < 0.05 else f"{change:+.1f} pts"


def count(value: int) -> str:
    return f"{value:,}"


def gpu_hours(seconds: float) -> str:
    value = seconds / HOUR
    if value < 0.005:  # float dust of sums that should cancel
        return "0"
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def table(rows: list[list[str]], *, left: int = 1) -> list[str]:
    """Rows as aligned text: the first `left` columns flush left, the others flush right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.ljust(widths[i]) if i < left else cell.rjust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def wrap(text: str, width: int = 96) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


# engine.IDLE_KINDS in the order the report tells them, and what each is called there
IDLE_LABELS = {
    "fragmented": "fragmentation",
    "wrongSize": "wrong slice size",
    "heldIdle": "held but idle",
    "noDemand": "no demand",
    "waiting": "queued work over quota or too big",
}
