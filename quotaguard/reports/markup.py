"""Escaped table markup shared by the sections of the reports page.

Every value goes through `html.escape` here; callers pass plain values.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape


def text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def cell(value: object, css: str = "", *, colspan: int = 1) -> str:
    attributes = f' class="{css}"' if css else ""
    if colspan > 1:
        attributes += f' colspan="{colspan}"'
    return f"<td{attributes}>{escape(text(value))}</td>"


def header_row(labels: Sequence[str], text_columns: Sequence[int] = ()) -> str:
    return (
        "<tr>"
        + "".join(
            f'<th class="text">{escape(h)}</th>' if i in text_columns else f"<th>{escape(h)}</th>"
            for i, h in enumerate(labels)
        )
        + "</tr>"
    )


def table(head: Sequence[str], rows: Sequence[str], css: str = "") -> str:
    """A table in its own scrolling box: a wide table scrolls there, never the page."""
    attribute = f' class="{css}"' if css else ""
    return (
        f'<div class="scroll"><table{attribute}><thead>{"".join(head)}</thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )
