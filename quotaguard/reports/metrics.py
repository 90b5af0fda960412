"""The quota report as Prometheus series, and the controller's own counters.

Gauges per tenant and class follow the latest report; a tenant or class that leaves the policy
has its series removed rather than frozen at its last value.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Final

from prometheus_client import Counter, Gauge

from quotaguard.serve.observability import REGISTRY

_TENANT_CLASS = ("tenant", "class")

QUOTA_NOMINAL: Final = Gauge(
    "quotaguard_quota_nominal",
    "Target nominal quota per tenant and GPU class, in units of the class resource.",
    _TENANT_CLASS,
    registry=REGISTRY,
)
QUOTA_BORROWING_LIMIT: Final = Gauge(
    "quotaguard_quota_borrowing_limit",
    "Target borrowing limit (max - nominal); absent when the tenant has no max.",
    _TENANT_CLASS,
    registry=REGISTRY,
)
QUOTA_LENDING_LIMIT: Final = Gauge(
    "quotaguard_quota_lending_limit",
    "Target lending limit (nominal - guaranteed).",
    _TENANT_CLASS,
    registry=REGISTRY,
)
QUOTA_GUARANTEED: Final = Gauge(
    "quotaguard_quota_guaranteed",
    "Guaranteed quota per tenant and class, after scaling to live capacity.",
    _TENANT_CLASS,
    registry=REGISTRY,
)
QUOTA_USAGE: Final = Gauge(
    "quotaguard_quota_usage",
    "Admitted or running demand per tenant and class.",
    _TENANT_CLASS,
    registry=REGISTRY,
)
QUOTA_PENDING: Final = Gauge(
    "quotaguard_quota_pending",
    "Pending demand (smoothed) per tenant and class.",
    _TENANT_CLASS,
    registry=REGISTRY,
)
TENANT_WEIGHT: Final = Gauge(
    "quotaguard_tenant_weight",
    "Fair-share weight per tenant, adjusted by decayed usage.",
    ["tenant"],
    registry=REGISTRY,
)
CLASS_CAPACITY: Final = Gauge(
    "quotaguard_class_capacity",
    "Healthy capacity per GPU class (Ready, schedulable, not faulty nodes).",
    ["class"],
    registry=REGISTRY,
)
CLASS_DISTRIBUTABLE: Final = Gauge(
    "quotaguard_class_distributable",
    "Capacity per GPU class handed out as quota (headroom and outside pods taken off).",
    ["class"],
    registry=REGISTRY,
)
QUEUE_WRITES: Final = Counter(
    "quotaguard_queue_writes",
    "Queue writes by result (updated, created, unchanged, missing, conflict, error, not_leader).",
    ["result"],
    registry=REGISTRY,
)
CONTROLLER_STALE: Final = Gauge(
    "quotaguard_controller_stale",
    "1 while the controller's view of the cluster is stale (a watch unsynced, the API server "
    "unreachable) and it changes nothing.",
    registry=REGISTRY,
)
CONTROLLER_LEADER: Final = Gauge(
    "quotaguard_controller_leader",
    "1 while this replica holds the controller Lease and may write queues.",
    registry=REGISTRY,
)
CONTROLLER_INTERVALS: Final = Counter(
    "quotaguard_controller_intervals",
    "Controller intervals by outcome (planned, stale, off).",
    ["outcome"],
    registry=REGISTRY,
)

_PER_CLASS: Final = (
    (QUOTA_NOMINAL, "nominal"),
    (QUOTA_BORROWING_LIMIT, "borrowingLimit"),
    (QUOTA_LENDING_LIMIT, "lendingLimit"),
    (QUOTA_GUARANTEED, "guaranteed"),
    (QUOTA_USAGE, "usage"),
    (QUOTA_PENDING, "pending"),
)

_lock = threading.Lock()
_published: dict[int, set[tuple[str, ...]]] = {}


def _set(gauge: Gauge, labels: tuple[str, ...], value: object, seen: set[tuple[str, ...]]) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        gauge.labels(*labels).set(value)
        seen.add(labels)


def publish_report(report: Mapping[str, Any]) -> None:
    """Set every per-tenant/class gauge from a report; drop series the report no longer has."""
    with _lock:
        seen: dict[int, set[tuple[str, ...]]] = {}
        for gauge, key in _PER_CLASS:
            labels_seen = seen.setdefault(id(gauge), set())
            for tenant in report.get("tenants", ()):
                for row in tenant.get("classes", ()):
                    _set(gauge, (tenant["name"], row["class"]), row.get(key), labels_seen)
        weights = seen.setdefault(id(TENANT_WEIGHT), set())
        for tenant in report.get("tenants", ()):
            _set(TENANT_WEIGHT, (tenant["name"],), tenant.get("weight"), weights)
        capacity = seen.setdefault(id(CLASS_CAPACITY), set())
        distributable = seen.setdefault(id(CLASS_DISTRIBUTABLE), set())
        for row in report.get("classes", ()):
            _set(CLASS_CAPACITY, (row["name"],), row.get("capacity"), capacity)
            _set(CLASS_DISTRIBUTABLE, (row["name"],), row.get("distributable"), distributable)
        gauges = [g for g, _ in _PER_CLASS] + [TENANT_WEIGHT, CLASS_CAPACITY, CLASS_DISTRIBUTABLE]
        for gauge in gauges:
            for labels in _published.get(id(gauge), set()) - seen.get(id(gauge), set()):
                gauge.remove(*labels)
        _published.clear()
        _published.update(seen)


for _result in ("updated", "created", "unchanged", "missing", "conflict", "error", "not_leader"):
    QUEUE_WRITES.labels(result=_result)
for _outcome in ("planned", "stale", "off"):
    CONTROLLER_INTERVALS.labels(outcome=_outcome)
