"""The quota report as one self-contained HTML page for a wall screen: tables and inline SVG.

No scripts and no external assets; the page reloads itself once per controller interval. Every
string from the policy or the cluster is escaped (tenant, class and queue names, reasons).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from quotaguard.charts.svg import Line, color, line_chart
from quotaguard.reports.bars import Series, grouped_bars
from quotaguard.reports.history import HistoryPoint

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5em auto;
max-width:1600px;color:#1d232a;padding:0 1em}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.15em;margin:1.4em 0 .3em}
p.meta{color:#4b5661;margin:.1em 0}
p.warn{background:#fff4e5;border-left:4px solid #d9822b;padding:.4em .8em;margin:.4em 0}
table{border-collapse:collapse;margin:.4em 0}
td,th{padding:.22em .7em;border-bottom:1px solid #e3e7eb;text-align:right;white-space:nowrap}
td:first-child,th:first-child,td.text,th.text{text-align:left}
td.text{white-space:normal;max-width:34em}
th{font-weight:600;background:#f5f7f9}
td.moved{font-weight:600;color:#2f6fb5}
td.over{color:#b5404a;font-weight:600}
.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
.charts svg{height:auto;border:1px solid #e3e7eb;border-radius:4px}
.charts svg.bars{width:520px;max-width:100%}.charts svg.lines{width:760px;max-width:100%}
svg .title{font:600 13px system-ui,sans-serif;fill:#1d232a}
svg .axis{font:11px system-ui,sans-serif;fill:#5f6b73}
svg .legend{font:11px system-ui,sans-serif;fill:#1d232a}
svg .grid{stroke:#e9edf0;stroke-width:1}
"""

BAR_SERIES = (
    Series("guaranteed", "#8c9aa6"),
    Series("nominal", "#2f6fb5"),
    Series("usage", "#3b9c5a"),
    Series("pending", "#d9822b"),
)


def _text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _cell(value: object, css: str = "") -> str:
    attribute = f' class="{css}"' if css else ""
    return f"<td{attribute}>{escape(_text(value))}</td>"


def _table(header: Sequence[str], rows: Sequence[str], text_columns: Sequence[int] = ()) -> str:
    head = "".join(
        f'<th class="text">{escape(h)}</th>' if i in text_columns else f"<th>{escape(h)}</th>"
        for i, h in enumerate(header)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _moved(row: Mapping[str, Any], key: str) -> str:
    current = row.get("current")
    target = row.get(key)
    if current is None or current.get(key) == target:
        return _cell(target)
    return _cell(f"{_text(current.get(key))} → {_text(target)}", "moved")


def _last_change(change: Mapping[str, Any] | None) -> str:
    if not change:
        return "-"
    verb = "set" if change.get("applied") else "recommended"
    return f"{change.get('at')}: {verb} {_text(change.get('from'))} → {_text(change.get('to'))}"


def _tenant_table(tenant: Mapping[str, Any]) -> str:
    rows = []
    for row in tenant.get("classes", ()):
        over = row.get("overQuota")
        rows.append(
            "<tr>"
            + _cell(row.get("class"))
            + _cell(row.get("guaranteed"))
            + _cell(row.get("max"))
            + _moved(row, "nominal")
            + _moved(row, "borrowingLimit")
            + _moved(row, "lendingLimit")
            + _cell(row.get("usage"), "over" if over else "")
            + _cell(row.get("used"))
            + _cell(row.get("idle"))
            + _cell(row.get("pending"))
            + _cell(_last_change(row.get("lastChange")), "text")
            + _cell(row.get("reason"), "text")
            + "</tr>"
        )
    header = (
        "class",
        "guaranteed",
        "max",
        "nominal",
        "borrowing",
        "lending",
        "usage",
        "used",
        "idle",
        "pending",
        "last change",
        "reason",
    )
    return _table(header, rows, text_columns=(10, 11))


def _bars(tenant: Mapping[str, Any]) -> str:
    classes = list(tenant.get("classes", ()))
    groups = [
        (
            str(row.get("class")),
            [float(row.get(key) or 0) for key in ("guaranteed", "nominal", "usage", "pending")],
        )
        for row in classes
    ]
    markers = [float(row["max"]) if row.get("max") is not None else None for row in classes]
    chart = grouped_bars(
        f"{tenant.get('name')}: quota and demand", groups, BAR_SERIES, markers=markers
    )
    return chart.replace("<svg ", '<svg class="bars" ', 1)


def class_colors(report: Mapping[str, Any]) -> dict[str, str]:
    """One colour per class, by its place in the report's class list: the same in every chart."""
    return {str(row.get("name")): color(i) for i, row in enumerate(report.get("classes", ()))}


def _over_time(
    tenant: str, points: Sequence[HistoryPoint], now: float, colors: Mapping[str, str]
) -> str:
    """Nominal quota per class (solid) and usage (dashed) over the kept history."""
    classes = sorted({name for p in points for name in p.tenants.get(tenant, {})})
    if len(points) < 2 or not classes:
        return ""
    times = [p.at - now for p in points]
    lines = []
    for index, name in enumerate(classes):
        hue = colors.get(name) or color(len(colors) + index)
        rows = [p.tenants.get(tenant, {}).get(name) for p in points]
        lines.append(Line(f"{name} nominal", [float(r.nominal if r else 0) for r in rows], hue))
        lines.append(
            Line(
                f"{name} usage",
                [float(r.usage if r else 0) for r in rows],
                hue,
                dashed=True,
            )
        )
    chart = line_chart(
        f"{tenant}: quota over time (now = 0)", times, lines, y_label="class units", whole=True
    )
    return chart.replace("<svg ", '<svg class="lines" ', 1)


def _capacity_table(report: Mapping[str, Any]) -> str:
    rows = [
        "<tr>"
        + _cell(row.get("name"))
        + _cell(row.get("resource"), "text")
        + _cell(row.get("capacity"))
        + _cell(row.get("heldOutside"))
        + _cell(row.get("distributable"))
        + _cell(
            "; ".join(f"{g['node']} GPU {g['gpu']}: {g['reason']}" for g in row["faultyGpus"])
            if row.get("faultyGpus")
            else "-",
            "text",
        )
        + "</tr>"
        for row in report.get("classes", ())
    ]
    return _table(
        ("class", "resource", "capacity", "outside tenants", "distributable", "faulty GPUs"),
        rows,
        text_columns=(1, 5),
    )


def _layout_table(report: Mapping[str, Any]) -> str:
    rows = [
        "<tr>"
        + "".join(
            _cell(row.get(key), "text")
            for key in ("name", "pool", "current", "target", "action", "reason")
        )
        + "</tr>"
        for row in report.get("nodes", ())
    ]
    header = ("node", "pool", "current", "target", "action", "reason")
    return _table(header, rows, text_columns=range(6)) if rows else ""


def _page(title: str, body: list[str], refresh_seconds: float | None) -> str:
    refresh = (
        f'<meta http-equiv="refresh" content="{max(5, int(refresh_seconds))}">'
        if refresh_seconds
        else ""
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title>{refresh}<style>{STYLE}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )


def render_report_page(
    report: Mapping[str, Any],
    history: Sequence[HistoryPoint],
    *,
    now: float,
    refresh_seconds: float | None = 60,
) -> str:
    controller = report.get("controller") or {}
    title = f"GPU quotas: {report.get('policy')}"
    body = [
        f"<h1>{escape(title)}</h1>",
        '<p class="meta">'
        + escape(
            f"mode {report.get('mode')} · backend {report.get('backend')} · cohort "
            f"{report.get('cohort')} · planned at {report.get('generatedAt')}"
            + (f" · leader {'yes' if controller.get('leader') else 'no'}" if controller else "")
        )
        + "</p>",
    ]
    if controller.get("stale"):
        body.append(
            '<p class="warn">'
            + escape(f"View of the cluster is stale, nothing is changed: {controller['stale']}")
            + "</p>"
        )
    body.extend(f'<p class="warn">{escape(str(p))}</p>' for p in report.get("problems", ()))
    body.append("<h2>Capacity</h2>")
    body.append(_capacity_table(report))
    if layouts := _layout_table(report):
        body.append("<h2>Layouts</h2>")
        body.append(layouts)
    colors = class_colors(report)
    for tenant in report.get("tenants", ()):
        weight = _text(tenant.get("weight"))
        if tenant.get("weight") != tenant.get("baseWeight"):
            weight += f" (base {_text(tenant.get('baseWeight'))})"
        meta = f"queue {tenant.get('queue')} · weight {weight}"
        body.append(f'<h2>{escape(str(tenant.get("name")))}</h2><p class="meta">{escape(meta)}</p>')
        body.extend(
            '<p class="warn">'
            + escape(
                f"Not written: {c.get('field')} is owned by {c.get('manager')}, which applied it"
                " (rebalance.forceConflicts: true takes it over)"
            )
            + "</p>"
            for c in tenant.get("conflicts") or ()
        )
        body.append(_tenant_table(tenant))
        charts = [_bars(tenant), _over_time(str(tenant.get("name")), history, now, colors)]
        body.append('<div class="charts">' + "".join(c for c in charts if c) + "</div>")
    return _page(title, body, refresh_seconds)


def render_unavailable_page(reason: str, *, refresh_seconds: float | None = 30) -> str:
    return _page(
        "GPU quotas: no report",
        ["<h1>GPU quotas</h1>", f'<p class="warn">{escape(reason)}</p>'],
        refresh_seconds,
    )
