"""One tenant's part of the reports page: its table, its bars, its quota over time.

In recommend mode nothing is written to the queue, so each figure shows the queue's value now
beside the recommendation: two column groups in the table, two bars, a pale band under the line.
Every string from the policy or the cluster is escaped (in markup.py and the chart modules).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from quotaguard.charts.svg import Line, color, line_chart
from quotaguard.reports.bars import Series, grouped_bars
from quotaguard.reports.history import HistoryPoint
from quotaguard.reports.markup import cell, header_row, table, text
from quotaguard.reports.summary import QUEUE_FIELDS

GUARANTEED = Series("guaranteed", "#8c9aa6")
NOMINAL = Series("nominal", "#2f6fb5")
QUEUE_NOW = Series("queue now", "#a9c6e8")
RECOMMENDED = Series("recommended", "#2f6fb5")
USAGE = Series("usage", "#3b9c5a")
PENDING = Series("pending", "#d9822b")
FIELD_LABELS = ("nominal", "borrowing", "lending")  # QUEUE_FIELDS as the table heads them


@dataclass(frozen=True, slots=True)
class View:
    """What every tenant's section is drawn with."""

    recommend: bool  # mode recommend: the queue's value now beside the recommendation
    telemetry: bool  # used / idle columns (GPU telemetry was read)
    colors: Mapping[str, str]  # class -> colour, the same in every chart
    history: Sequence[HistoryPoint]
    now: float


def _last_change(change: Mapping[str, Any] | None) -> str:
    if not change:
        return ""
    verb = "set" if change.get("applied") else "recommended"
    return (
        f"last change {change.get('at')}: {verb} "
        f"{text(change.get('from'))} → {text(change.get('to'))}"
    )


def _moved(row: Mapping[str, Any], key: str) -> str:
    """Apply mode: the target, or `now → target` while the queue still holds another value."""
    current = row.get("current")
    target = row.get(key)
    if current is None or current.get(key) == target:
        return cell(target)
    return cell(f"{text(current.get(key))} → {text(target)}", "moved")


def _side_by_side(row: Mapping[str, Any]) -> str:
    """Recommend mode: the queue's three fields now, then the three recommended."""
    current = row.get("current")
    now = [cell(current.get(k) if current else None, "now") for k in QUEUE_FIELDS]
    recommended = [
        cell(row.get(k), "rec moved" if current and current.get(k) != row.get(k) else "rec")
        for k in QUEUE_FIELDS
    ]
    return "".join(now + recommended)


def _tail(view: View) -> tuple[str, ...]:
    return ("usage", *(("used", "idle") if view.telemetry else ()), "pending")


def _header(view: View) -> list[str]:
    if not view.recommend:
        return [header_row(["class", "guaranteed", "max", *FIELD_LABELS, *_tail(view)], (0,))]

    def spanning(labels: Sequence[str]) -> str:
        return "".join(f'<th rowspan="2">{escape(h)}</th>' for h in labels)

    return [
        '<tr><th rowspan="2" class="text">class</th>'
        + spanning(("guaranteed", "max"))
        + '<th colspan="3" class="now">queue now</th>'
        + '<th colspan="3" class="rec">recommended</th>'
        + spanning(_tail(view))
        + "</tr>",
        "<tr>"
        + "".join(f'<th class="now">{h}</th>' for h in FIELD_LABELS)
        + "".join(f'<th class="rec">{h}</th>' for h in FIELD_LABELS)
        + "</tr>",
    ]


def _row(row: Mapping[str, Any], view: View) -> str:
    usage_css = "over" if row.get("overQuota") else ""
    queue = _side_by_side(row) if view.recommend else "".join(_moved(row, k) for k in QUEUE_FIELDS)
    telemetry = cell(row.get("used")) + cell(row.get("idle")) if view.telemetry else ""
    return (
        "<tr>"
        + cell(row.get("class"), "text")
        + cell(row.get("guaranteed"))
        + cell(row.get("max"))
        + queue
        + cell(row.get("usage"), usage_css)
        + telemetry
        + cell(row.get("pending"))
        + "</tr>"
    )


def _idle(row: Mapping[str, Any]) -> str:
    pods = row.get("idlePods") or ()
    if not pods:
        return ""
    return f"idle: {', '.join(map(str, pods))} ({text(row.get('idleGpuHours'))} GPU-hours)"


def _why(row: Mapping[str, Any], columns: int) -> str:
    """The reason of the row's targets, its last change and its idle pods, on a line of its
    own below it (kept in view while the table scrolls sideways)."""
    parts = (str(row.get("reason") or ""), _last_change(row.get("lastChange")), _idle(row))
    said = " · ".join(s for s in parts if s)
    return (
        f'<tr class="why"><td class="text" colspan="{columns}">'
        f"<span>{escape(said)}</span></td></tr>"
    )


def _table(tenant: Mapping[str, Any], view: View) -> str:
    columns = 3 + len(QUEUE_FIELDS) * (2 if view.recommend else 1) + len(_tail(view))
    rows = [_row(row, view) + _why(row, columns) for row in tenant.get("classes") or ()]
    return table(_header(view), rows, "classes recommend" if view.recommend else "classes")


def _bars(tenant: Mapping[str, Any], view: View) -> str:
    classes = list(tenant.get("classes") or ())
    series = (
        (GUARANTEED, QUEUE_NOW, RECOMMENDED, USAGE, PENDING)
        if view.recommend
        else (GUARANTEED, NOMINAL, USAGE, PENDING)
    )

    def values(row: Mapping[str, Any]) -> list[float]:
        queue = [float((row.get("current") or {}).get("nominal") or 0)] if view.recommend else []
        return [
            float(row.get("guaranteed") or 0),
            *queue,
            float(row.get("nominal") or 0),
            float(row.get("usage") or 0),
            float(row.get("pending") or 0),
        ]

    groups = [(str(row.get("class")), values(row)) for row in classes]
    markers = [float(row["max"]) if row.get("max") is not None else None for row in classes]
    chart = grouped_bars(f"{tenant.get('name')}: quota and demand", groups, series, markers=markers)
    return chart.replace("<svg ", '<svg class="bars" ', 1)


def _class_lines(
    name: str, points: Sequence[HistoryPoint], tenant: str, hue: str, view: View
) -> list[Line]:
    rows = [p.tenants.get(tenant, {}).get(name) for p in points]
    planned = [float(r.nominal if r else 0) for r in rows]
    usage = [float(r.usage if r else 0) for r in rows]
    lines = [Line(f"{name} {'recommended' if view.recommend else 'nominal'}", planned, hue)]
    if view.recommend and any(r is not None and r.current is not None for r in rows):
        now = [float(r.current if r and r.current is not None else 0) for r in rows]
        lines.append(Line(f"{name} queue now", now, hue, band=True))
    lines.append(Line(f"{name} usage", usage, hue, dashed=True, area=True))
    return lines


def _over_time(tenant: str, view: View) -> str:
    """Per class: the planned nominal (a line), in recommend mode the queue's (a pale band
    under it), and usage (a shaded area, visible where it reaches the nominal line)."""
    points = view.history
    classes = sorted({name for p in points for name in p.tenants.get(tenant, {})})
    if len(points) < 2 or not classes:
        return ""
    lines = [
        line
        for index, name in enumerate(classes)
        for line in _class_lines(
            name, points, tenant, view.colors.get(name) or color(len(view.colors) + index), view
        )
    ]
    chart = line_chart(
        f"{tenant}: quota over time (now = 0)",
        [p.at - view.now for p in points],
        lines,
        y_label="class units",
        whole=True,
    )
    return chart.replace("<svg ", '<svg class="lines" ', 1)


def _meta(tenant: Mapping[str, Any], view: View) -> str:
    weight, base = tenant.get("weight"), tenant.get("baseWeight")
    if view.recommend and tenant.get("currentWeight") is not None:
        said = f"weight: queue now {text(tenant.get('currentWeight'))}, recommended {text(weight)}"
    else:
        said = f"weight {text(weight)}"
    if weight != base:
        said += f" (base {text(base)})"
    return f"queue {tenant.get('queue')} · {said}"


def _conflicts(tenant: Mapping[str, Any]) -> list[str]:
    return [
        '<p class="warn">'
        + escape(
            f"Not written: {c.get('field')} is owned by {c.get('manager')}, which applied it"
            " (rebalance.forceConflicts: true takes it over)"
        )
        + "</p>"
        for c in tenant.get("conflicts") or ()
    ]


def tenant_section(tenant: Mapping[str, Any], view: View) -> str:
    name = str(tenant.get("name"))
    charts = [c for c in (_bars(tenant, view), _over_time(name, view)) if c]
    return (
        f'<section class="tenant"><h2>{escape(name)}</h2>'
        f'<p class="meta">{escape(_meta(tenant, view))}</p>'
        + "".join(_conflicts(tenant))
        + _table(tenant, view)
        + f'<div class="charts">{"".join(charts)}</div></section>'
    )
