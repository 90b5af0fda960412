"""The showback as an HTML section (the /reports page, `plan -o html`, simulate's page): GPU-hours
and cost per tenant, then per day, tenant, class and GPU model.

Every value is escaped through `markup`; a long history shows its last day only (the CSV,
`/reports/showback.csv`, has every day)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from quotaguard.reports.markup import cell, header_row, table

MAX_ROWS = 200
SAYS = {
    "snapshot": "GPU-hours of one hour at the allocations of this moment (GPUs held)",
    "accumulated": "GPU-hours counted since the controller started",
    "simulated": "GPU-hours over the simulated span",
}
HOURS = (
    ("allocatedGpuHours", "allocated"),
    ("busyGpuHours", "busy"),
    ("idleGpuHours", "held idle"),
    ("unobservedGpuHours", "no telemetry"),
)


def _money(value: object) -> object:
    return round(value, 2) if isinstance(value, float) else value


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _hour_columns(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Allocated always; busy and idle when telemetry saw something, "no telemetry" when it
    missed something: a page without telemetry shows no column of zeros."""
    observed = any(
        _number(row.get("unobservedGpuHours")) < _number(row.get("allocatedGpuHours"))
        for row in rows
    )
    missed = any(_number(row.get("unobservedGpuHours")) > 0 for row in rows)
    return [
        (key, label)
        for key, label in HOURS
        if key == "allocatedGpuHours"
        or (key == "unobservedGpuHours" and missed)
        or (key in ("busyGpuHours", "idleGpuHours") and observed)
    ]


def _tenant_rows(rows: Sequence[Mapping[str, Any]], priced: bool) -> str:
    hours = _hour_columns(rows)
    money = ["cost", "idle cost", "no price"] if priced else []
    head = header_row(["tenant", *(label for _, label in hours), *money], [0])
    body = [
        "<tr>"
        + cell(row.get("tenant"), "text")
        + "".join(cell(row.get(key)) for key, _ in hours)
        + (
            cell(_money(row.get("cost")))
            + cell(_money(row.get("idleCost")))
            + cell(row.get("unpricedGpuHours"))
            if priced
            else ""
        )
        + "</tr>"
        for row in rows
    ]
    return table([head], body)


def _detail_rows(rows: Sequence[Mapping[str, Any]], priced: bool) -> str:
    hours = _hour_columns(rows)
    money = ["price", "cost"] if priced else []
    head = header_row(
        ["day", "tenant", "class", "model", *(label for _, label in hours), *money], [0, 1, 2, 3]
    )
    body = [
        "<tr>"
        + "".join(cell(row.get(key), "text") for key in ("day", "tenant", "class", "model"))
        + "".join(cell(row.get(key)) for key, _ in hours)
        + (cell(row.get("pricePerGpuHour")) + cell(_money(row.get("cost"))) if priced else "")
        + "</tr>"
        for row in rows
    ]
    return table([head], body)


def _basis(showback: Mapping[str, Any]) -> str:
    """What the figures count: since when, for which arm, in which currency."""
    basis = str(showback.get("basis"))
    said = SAYS.get(basis, basis)
    if showback.get("since"):
        said += f" ({showback['since']})"
    if showback.get("arm"):
        said += f", arm {showback['arm']}"
    if showback.get("currency"):
        said += f"; costs in {showback['currency']}"
    return said


def showback_section(showback: Mapping[str, Any] | None) -> str:
    """The section, or "" when the report has no showback."""
    if not isinstance(showback, Mapping):
        return ""
    rows = [row for row in showback.get("rows") or () if isinstance(row, Mapping)]
    parts = [
        '<section class="showback"><h2>Showback</h2>',
        f'<p class="meta">{escape(_basis(showback))}.</p>',
    ]
    if not rows:
        parts.append('<p class="meta">No tenant held GPUs.</p></section>')
        return "".join(parts)
    priced = any(row.get("pricePerGpuHour") is not None for row in rows)
    tenants = [row for row in showback.get("tenants") or () if isinstance(row, Mapping)]
    parts.append(_tenant_rows(tenants, priced))
    if len(rows) > MAX_ROWS:
        last = rows[-1].get("day")
        rows = [row for row in rows if row.get("day") == last][:MAX_ROWS]
        parts.append(f'<p class="meta">{escape(f"{last} only; the CSV has every day.")}</p>')
    parts.append(_detail_rows(rows, priced))
    parts.append("</section>")
    return "".join(parts)
