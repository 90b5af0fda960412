"""The layout plan in the report: `nodes: [{name, pool, current, target, reason}]` of
`quotaguard plan --output json` and `GET /reports/quota`, and its lines in the table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from quotaguard.geometry.layout_planner import LayoutPlan


class LayoutRow(TypedDict):
    name: str
    pool: str
    current: str | None
    target: str | None
    action: str
    reason: str


def layout_rows(plan: LayoutPlan) -> list[LayoutRow]:
    """One row per node of a geometry pool; `action` says what happens to it now (keep, start,
    wait, changing, failed, skip)."""
    return [
        {
            "name": node.name,
            "pool": node.pool,
            "current": node.current,
            "target": node.target,
            "action": node.action,
            "reason": node.reason,
        }
        for node in plan.nodes
    ]


def format_layouts(rows: Sequence[Mapping[str, Any]], mode: str) -> list[str]:
    """Terminal lines: every node whose layout changes or cannot be planned, then a count of
    the nodes that keep theirs."""
    if not rows:
        return []
    shown = [r for r in rows if r["action"] != "keep"]
    kept = len(rows) - len(shown)
    lines = ["", f"LAYOUTS (geometry mode {mode})"]
    if shown:
        cells = [
            [
                str(r["name"]),
                str(r["pool"]),
                str(r["current"] or "-"),
                str(r["target"] or "-"),
                str(r["action"]),
                str(r["reason"]),
            ]
            for r in shown
        ]
        header = ["NODE", "POOL", "CURRENT", "TARGET", "ACTION", "REASON"]
        widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
        for line in [header, *cells]:
            lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(line)).rstrip())
    lines.append(f"{kept} node(s) keep their layout")
    return lines
