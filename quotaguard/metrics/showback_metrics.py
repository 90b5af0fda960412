"""The showback as Prometheus series: GPU-hours and their cost per tenant, class and GPU model,
counted since the controller started (from the report's `showback.sinceStart`).

They only go up while the controller runs and start again from 0 when it restarts, like
counters: `increase(quotaguard_showback_gpu_hours[1d])` is a day's GPU-hours whatever restarts
happened. `kind` is `allocated`, `busy` or `idle`; allocated GPU-hours that telemetry did not
see are neither busy nor idle (`allocated - busy - idle`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from prometheus_client.core import GaugeMetricFamily

GPU_HOURS: Final = "quotaguard_showback_gpu_hours"
COST: Final = "quotaguard_showback_cost"
KINDS: Final = {"allocated": "allocatedGpuHours", "busy": "busyGpuHours", "idle": "idleGpuHours"}


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def showback_families(report: Mapping[str, Any]) -> list[GaugeMetricFamily]:
    """The showback series of `report`; none when it counts nothing since a start (a `plan`
    report, or none at all)."""
    showback = report.get("showback")
    rows = showback.get("sinceStart") if isinstance(showback, Mapping) else None
    if not isinstance(rows, list):
        return []
    hours = GaugeMetricFamily(
        GPU_HOURS,
        "Whole-GPU-equivalent hours per tenant, class and GPU model since the controller "
        "started, by kind: allocated, busy (weighted by DCGM activity), idle (allocated, not "
        "busy); use increase().",
        labels=("tenant", "class", "model", "kind"),
    )
    currency = showback.get("currency") if isinstance(showback, Mapping) else None
    cost = GaugeMetricFamily(
        COST,
        "Cost of the allocated GPU-hours since the controller started, at the policy's "
        f"showback prices{f' ({currency})' if currency else ''}; absent where no price "
        "applies; use increase().",
        labels=("tenant", "class", "model"),
    )
    for row in rows:
        if not isinstance(row, Mapping):
            continue
        labels = [str(row.get("tenant")), str(row.get("class")), str(row.get("model"))]
        for kind, key in KINDS.items():
            value = _number(row.get(key))
            if value is not None:
                hours.add_metric([*labels, kind], value)
        value = _number(row.get("cost"))
        if value is not None:
            cost.add_metric(labels, value)
    return [hours, cost]
