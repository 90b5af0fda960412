"""The quota report as one self-contained HTML page for a wall screen or a laptop: a cluster
summary on top, then a table and inline SVG charts per tenant.

No scripts and no external assets; the page reloads itself once per controller interval and
reads at 700 px (wide tables scroll in their own box, charts scale with their viewBox). Every
string from the policy or the cluster is escaped (tenant, class and queue names, reasons).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from quotaguard.charts.svg import color
from quotaguard.reports.history import HistoryPoint
from quotaguard.reports.markup import cell, header_row, table, text
from quotaguard.reports.showback_html import showback_section
from quotaguard.reports.summary import ClassSummary, ClusterSummary, cluster_summary
from quotaguard.reports.tenant_view import View, tenant_section

STYLE = """
*,*::before,*::after{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5em auto;
max-width:1600px;color:#1d232a;padding:0 1em}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.15em;margin:1.4em 0 .3em}
h1,h2,p,li{overflow-wrap:anywhere}
p.meta{color:#4b5661;margin:.1em 0}
p.warn{background:#fff4e5;border-left:4px solid #d9822b;padding:.4em .8em;margin:.4em 0}
section.summary{border:1px solid #e3e7eb;border-radius:6px;padding:.2em 1em .6em;margin:1em 0}
section.summary h2{margin-top:.5em}
ul.facts{display:flex;flex-wrap:wrap;gap:.3em 1.6em;list-style:none;padding:0;margin:.4em 0}
ul.facts b{font-size:1.25em}ul.facts li.bad b{color:#b5404a}
ul.faulty{margin:.2em 0;padding-left:1.2em;color:#4b5661}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.4em 0;font-size:13px}
td,th{padding:.22em .55em;border-bottom:1px solid #e3e7eb;text-align:right;white-space:nowrap}
th{font-weight:600;background:#f5f7f9;white-space:normal;vertical-align:bottom}
td:first-child,th:first-child,td.text,th.text{text-align:left}
td.text{white-space:normal;overflow-wrap:anywhere}
th.now,td.now{background:#eef4fb}th.rec{background:#dce8f6}th[colspan]{text-align:center}
table.classes tr:not(.why) td{border-bottom:none}
tr.why td{color:#4b5661;font-size:12px;padding-top:0;max-width:60em}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:.5em 0}
.card{border:1px solid #e3e7eb;border-radius:4px;padding:.4em .7em;flex:1 1 13em;max-width:20em}
.card h3{font-size:1em;margin:0 0 .3em}
span.resource{display:block;color:#5f6b73;font-size:11px;font-weight:400}
dl{display:grid;grid-template-columns:1fr auto;gap:0 1em;margin:0;font-size:13px}
dt{color:#4b5661}dd{margin:0;text-align:right;font-variant-numeric:tabular-nums}
table.classes tr:not(.why) td:first-child,table.classes thead th:first-child{position:sticky;
left:0;background:#fff;z-index:1;white-space:nowrap}
table.classes thead th:first-child{background:#f5f7f9}
tr.why td span{display:block;white-space:normal;position:sticky;left:.55em;
max-width:min(60em,calc(100vw - 4em))}
td.moved{font-weight:600;color:#2f6fb5}
td.over{color:#b5404a;font-weight:600}
.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
.charts svg{display:block;height:auto;border:1px solid #e3e7eb;border-radius:4px}
.charts svg.bars{width:520px;max-width:100%}.charts svg.lines{width:760px;max-width:100%}
@media (max-width:760px){body{margin-top:.8em;padding:0 .6em}td,th{padding:.2em .4em}}
svg .title{font:600 13px system-ui,sans-serif;fill:#1d232a}
svg .axis{font:11px system-ui,sans-serif;fill:#5f6b73}
svg .legend{font:11px system-ui,sans-serif;fill:#1d232a}
svg .grid{stroke:#e9edf0;stroke-width:1}
"""

MODE_SAYS = {
    "recommend": "nothing is written to the queues; each shows its value now beside the"
    " recommendation",
    "apply": "the targets are written to the queues; a value still moving shows as now → target",
    "off": "the queues are left as they are",
}


def class_colors(report: Mapping[str, Any]) -> dict[str, str]:
    """One colour per class, by its place in the report's class list: the same in every chart."""
    return {str(row.get("name")): color(i) for i, row in enumerate(report.get("classes", ()))}


def _fact(count: int, one: str, many: str, *, bad: bool = False) -> str:
    css = ' class="bad"' if bad and count else ""
    return f"<li{css}><b>{count}</b> {escape(one if count == 1 else many)}</li>"


def _facts(summary: ClusterSummary) -> str:
    faulty = sum(len(c.faulty) for c in summary.classes)
    moving = "recommended to change" if summary.mode == "recommend" else "to change"
    over = len(summary.over_quota)
    return (
        '<ul class="facts">'
        + _fact(summary.tenants, "tenant", "tenants")
        + _fact(summary.changes, f"queue value {moving}", f"queue values {moving}")
        + _fact(over, "over quota", "over quota", bad=True)
        + _fact(len(summary.conflicts), "conflict", "conflicts", bad=True)
        + _fact(faulty, "faulty GPU", "faulty GPUs", bad=True)
        + "</ul>"
    )


def _class_card(row: ClassSummary, telemetry: bool) -> str:
    """One class's figures as label / value pairs: cards wrap on a narrow screen, where a
    table of ten columns would not fit."""
    figures: list[tuple[str, object]] = [
        ("capacity", row.capacity),
        ("outside tenants", row.held_outside),
        ("faulty GPUs", len(row.faulty)),
        ("distributable", row.distributable),
        ("guaranteed", row.guaranteed),
        ("usage", row.usage),
        *((("used", row.used), ("idle", row.idle)) if telemetry else ()),
        ("pending", row.pending),
        *((("free", row.free),) if row.free is not None else ()),
        *((("largest fit on one node", row.largest_fit),) if row.largest_fit is not None else ()),
    ]
    pairs = "".join(f"<dt>{escape(k)}</dt><dd>{escape(text(v))}</dd>" for k, v in figures)
    return (
        f'<div class="card"><h3>{escape(row.name)}'
        f'<span class="resource">{escape(row.resource)}</span></h3><dl>{pairs}</dl></div>'
    )


def _class_cards(summary: ClusterSummary) -> str:
    cards = "".join(_class_card(row, summary.telemetry) for row in summary.classes)
    return f'<div class="cards">{cards}</div>'


def _summary_warnings(summary: ClusterSummary) -> list[str]:
    over = [
        f"{o.tenant} {o.gpu_class}: usage {text(o.usage)} above nominal {text(o.nominal)}"
        for o in summary.over_quota
    ]
    conflicts = [f"{c.tenant}: {c.field} owned by {c.manager}" for c in summary.conflicts]
    said = []
    if over:
        said.append("Over quota (nothing is evicted, it drains as work ends): " + "; ".join(over))
    if conflicts:
        said.append("Not written, another manager owns it: " + "; ".join(conflicts))
    return [f'<p class="warn">{escape(s)}</p>' for s in said]


def _summary_section(summary: ClusterSummary) -> str:
    mode = f"Mode {summary.mode}: {MODE_SAYS.get(summary.mode, '')}".rstrip(": ")
    faulty = [f"{c.name}: {g}" for c in summary.classes for g in c.faulty]
    return (
        '<section class="summary"><h2>Cluster</h2>'
        f'<p class="mode">{escape(mode)}.</p>'
        + _facts(summary)
        + "".join(_summary_warnings(summary))
        + _class_cards(summary)
        + (
            '<ul class="faulty">' + "".join(f"<li>{escape(f)}</li>" for f in faulty) + "</ul>"
            if faulty
            else ""
        )
        + "</section>"
    )


def _layout_table(report: Mapping[str, Any]) -> str:
    keys = ("name", "pool", "current", "target", "action", "reason")
    rows = [
        "<tr>" + "".join(cell(row.get(key), "text") for key in keys) + "</tr>"
        for row in report.get("nodes", ())
    ]
    header = ("node", "pool", "current", "target", "action", "reason")
    return table([header_row(header, range(6))], rows) if rows else ""


def _page(title: str, body: list[str], refresh_seconds: float | None) -> str:
    refresh = (
        f'<meta http-equiv="refresh" content="{max(5, int(refresh_seconds))}">'
        if refresh_seconds
        else ""
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
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
    summary = cluster_summary(report)
    body.append(_summary_section(summary))
    if layouts := _layout_table(report):
        body.append("<h2>Layouts</h2>")
        body.append(layouts)
    view = View(
        recommend=report.get("mode") == "recommend",
        telemetry=summary.telemetry,
        colors=class_colors(report),
        history=history,
        now=now,
    )
    body.extend(tenant_section(tenant, view) for tenant in report.get("tenants", ()))
    body.append(showback_section(report.get("showback")))
    return _page(title, body, refresh_seconds)


def render_unavailable_page(reason: str, *, refresh_seconds: float | None = 30) -> str:
    return _page(
        "GPU quotas: no report",
        ["<h1>GPU quotas</h1>", f'<p class="warn">{escape(reason)}</p>'],
        refresh_seconds,
    )
