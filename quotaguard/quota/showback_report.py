"""The showback object of the reports (`showback` in `plan -o json`, `GET /reports/quota`,
`simulate -o json`), and the CSV rows and terminal lines derived from that same dict.

    {"basis": "snapshot" | "accumulated" | "simulated", "currency": "USD" | null,
     "rows": [{"day", "tenant", "class", "model", "allocatedGpuHours", "busyGpuHours",
               "idleGpuHours", "unobservedGpuHours", "pricePerGpuHour", "cost", "idleCost"}],
     "tenants": [{"tenant", the same figures over every row of the tenant}],
     "sinceStart": [{"tenant", "class", "model", the figures}]   # the controller's only
     ...}

Costs are null where no price applies; a tenant's cost sums its priced rows and says how many
GPU-hours were not priced (`unpricedGpuHours`).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from quotaguard.kube.values import utc_timestamp
from quotaguard.policy.model import TenantPolicy
from quotaguard.policy.prices import price_of
from quotaguard.policy.sections import Showback
from quotaguard.quota.cluster import ClusterSnapshot
from quotaguard.quota.demand import Activity
from quotaguard.quota.showback import (
    DAY,
    HOUR,
    Hours,
    Key,
    Ledger,
    Totals,
    cost_of,
    holdings_of,
    rates_of,
)

DayLabel = Callable[[int], str]
HOURS_DIGITS = 4  # a 1g slice for a minute is 0.0004 GPU-hours
COST_DIGITS = 4


def utc_day(day: int) -> str:
    """The UTC date of a day index of epoch seconds (`2026-12-05`)."""
    return datetime.fromtimestamp(day * DAY, UTC).date().isoformat()


def simulated_day(day: int) -> str:
    """The day of a trace, counted from its start (`day 1`)."""
    return f"day {day + 1}"


def _hours(hours: Hours) -> dict[str, float]:
    return {
        "allocatedGpuHours": round(hours.allocated, HOURS_DIGITS),
        "busyGpuHours": round(hours.busy, HOURS_DIGITS),
        "idleGpuHours": round(hours.idle, HOURS_DIGITS),
        "unobservedGpuHours": round(hours.unobserved, HOURS_DIGITS),
    }


def _figures(hours: Hours, price: float | None) -> dict[str, Any]:
    cost = cost_of(hours, price)
    return {
        **_hours(hours),
        "pricePerGpuHour": cost.price,
        "cost": None if cost.cost is None else round(cost.cost, COST_DIGITS),
        "idleCost": None if cost.idle_cost is None else round(cost.idle_cost, COST_DIGITS),
    }


def _keyed(key: Key) -> dict[str, str]:
    tenant, class_name, model = key
    return {"tenant": tenant, "class": class_name, "model": model}


def _tenant_totals(
    rows: list[tuple[Key, Hours]], prices: Mapping[str, float]
) -> list[dict[str, Any]]:
    """Per tenant, the hours of every row and the cost of the priced ones."""
    hours_of: dict[str, Hours] = {}
    costs: dict[str, tuple[float, float, float]] = {}  # cost, idle cost, unpriced hours
    for key, hours in rows:
        tenant = key[0]
        hours_of[tenant] = hours_of.get(tenant, Hours()) + hours
        cost, idle_cost, unpriced = costs.get(tenant, (0.0, 0.0, 0.0))
        found = cost_of(hours, price_of(prices, key[1], key[2]))
        if found.cost is None or found.idle_cost is None:
            unpriced += hours.allocated
        else:
            cost, idle_cost = cost + found.cost, idle_cost + found.idle_cost
        costs[tenant] = (cost, idle_cost, unpriced)
    return [
        {
            "tenant": tenant,
            **_hours(hours_of[tenant]),
            "cost": round(costs[tenant][0], COST_DIGITS),
            "idleCost": round(costs[tenant][1], COST_DIGITS),
            "unpricedGpuHours": round(costs[tenant][2], HOURS_DIGITS),
        }
        for tenant in sorted(hours_of)
    ]


def showback_json(
    totals: Totals,
    showback: Showback | None,
    *,
    basis: str,
    day_label: DayLabel,
    since_start: Mapping[Key, Hours] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The report's `showback` object; `extra` (the basis's own facts) is merged in."""
    prices = showback.price_per_gpu_hour if showback is not None else {}
    rows = [
        {"day": day_label(day), **_keyed(key), **_figures(hours, price_of(prices, *key[1:]))}
        for day in sorted(totals)
        for key, hours in sorted(totals[day].items())
    ]
    every = [(key, hours) for day in totals.values() for key, hours in day.items()]
    document: dict[str, Any] = {
        "basis": basis,
        **extra,
        "currency": showback.currency if showback is not None else None,
        "rows": rows,
        "tenants": _tenant_totals(every, prices),
    }
    if since_start is not None:
        document["sinceStart"] = [
            {**_keyed(key), **_figures(hours, price_of(prices, *key[1:]))}
            for key, hours in sorted(since_start.items())
        ]
    return document


CSV_COLUMNS = (
    "day",
    "tenant",
    "class",
    "model",
    "allocatedGpuHours",
    "busyGpuHours",
    "idleGpuHours",
    "unobservedGpuHours",
    "pricePerGpuHour",
    "currency",
    "cost",
    "idleCost",
)


def _cell(value: object) -> str:
    return "" if value is None else str(value)


def csv_rows(showback: Mapping[str, Any]) -> list[list[str]]:
    """A header, then one row per day, tenant, class and GPU model."""
    currency = showback.get("currency")
    lines = [list(CSV_COLUMNS)]
    for row in showback.get("rows") or ():
        values = {**row, "currency": currency if row.get("cost") is not None else None}
        lines.append([_cell(values.get(column)) for column in CSV_COLUMNS])
    return lines


def to_csv(showback: Mapping[str, Any]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(csv_rows(showback))
    return buffer.getvalue()


def _money(value: object, currency: object) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{value:,.2f}" + (f" {currency}" if currency else "")


def tenant_lines(showback: Mapping[str, Any]) -> list[str]:
    """One line per tenant: GPU-hours held, busy, idle and what they cost."""
    currency = showback.get("currency")
    lines = []
    for row in showback.get("tenants") or ():
        said = f"{row['tenant']}: {row['allocatedGpuHours']:g} GPU-hours allocated"
        if row["unobservedGpuHours"] < row["allocatedGpuHours"]:
            said += f", {row['busyGpuHours']:g} busy, {row['idleGpuHours']:g} idle"
            if row["unobservedGpuHours"]:
                said += f", {row['unobservedGpuHours']:g} without telemetry"
        elif row["allocatedGpuHours"]:
            said += " (busy or idle unknown: no GPU telemetry)"
        if row.get("allocatedGpuHours") != row.get("unpricedGpuHours"):
            said += f"; cost {_money(row.get('cost'), currency)}"
            said += f" (idle {_money(row.get('idleCost'), currency)})"
        if row.get("unpricedGpuHours"):
            said += f"; {row['unpricedGpuHours']:g} GPU-hours with no price set"
        lines.append(said)
    return lines


def snapshot_showback(
    policy: TenantPolicy, snapshot: ClusterSnapshot, activity: Activity | None, *, at: float
) -> dict[str, Any]:
    """`plan`'s showback: one snapshot is one instant, so each figure is the GPU-hours of one
    hour at the allocations it shows (GPUs held), on the snapshot's day."""
    rates = rates_of(holdings_of(policy, snapshot, activity))
    return showback_json(
        {math.floor(at / DAY): rates} if rates else {},
        policy.spec.showback,
        basis="snapshot",
        day_label=utc_day,
        seconds=int(HOUR),
    )


def ledger_showback(ledger: Ledger, showback: Showback | None) -> dict[str, Any]:
    """The controller's showback: GPU-hours counted per UTC day since it started (the last
    KEEP_DAYS days), and since it started for the metrics."""
    return showback_json(
        ledger.days,
        showback,
        basis="accumulated",
        day_label=utc_day,
        since_start=ledger.since_start,
        since=None if ledger.started is None else utc_timestamp(ledger.started),
    )


BASIS_SAYS = {
    "snapshot": "GPU-hours per hour at the snapshot's allocations",
    "accumulated": "GPU-hours since the controller started",
    "simulated": "GPU-hours over the simulated span",
}


def format_lines(showback: Mapping[str, Any]) -> list[str]:
    """The terminal's showback: a heading, then one line per tenant (none without tenants)."""
    lines = tenant_lines(showback)
    if not lines:
        return []
    basis = str(showback.get("basis"))
    heading = f"showback, {BASIS_SAYS.get(basis, basis)}"
    if showback.get("arm"):
        heading += f" (arm {showback['arm']})"
    return ["", heading + ":", *(f"  {line}" for line in lines)]
