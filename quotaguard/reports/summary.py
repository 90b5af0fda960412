"""The cluster at a glance, from the quota report: what the page shows above the tenants.

Pure: plain data in, plain data out; the page renders it (reports/report_page.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

QUEUE_FIELDS = ("nominal", "borrowingLimit", "lendingLimit")


@dataclass(frozen=True, slots=True)
class ClassSummary:
    name: str
    resource: str
    capacity: float
    held_outside: float
    faulty: tuple[str, ...]  # "node GPU n: reason", one per faulty GPU
    distributable: float
    guaranteed: float
    usage: float
    pending: float
    used: float | None  # None without GPU telemetry
    idle: float | None
    # units free, and the most free on one node (None in a report without `fragmentation`)
    free: float | None = None
    largest_fit: float | None = None


@dataclass(frozen=True, slots=True)
class OverQuota:
    """Admitted usage above the planned nominal (nothing is evicted: it drains as work ends)."""

    tenant: str
    gpu_class: str
    usage: float
    nominal: float


@dataclass(frozen=True, slots=True)
class Conflict:
    tenant: str
    field: str
    manager: str


@dataclass(frozen=True, slots=True)
class ClusterSummary:
    mode: str
    tenants: int
    classes: tuple[ClassSummary, ...]
    over_quota: tuple[OverQuota, ...]
    conflicts: tuple[Conflict, ...]
    # queue fields whose target differs from what the queue holds now (recommended or to write)
    changes: int
    telemetry: bool  # whether any row has used/idle figures


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _optional_sum(values: Sequence[Any]) -> float | None:
    known = [float(v) for v in values if isinstance(v, int | float)]
    return sum(known) if known else None


def _changes(row: Mapping[str, Any]) -> int:
    current = row.get("current")
    if not current:
        return 0
    return sum(1 for key in QUEUE_FIELDS if current.get(key) != row.get(key))


def _class_summary(
    gpu_class: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    fragmentation: Mapping[str, Any] | None = None,
) -> ClassSummary:
    found = fragmentation or {}
    return ClassSummary(
        name=str(gpu_class.get("name")),
        resource=str(gpu_class.get("resource") or ""),
        capacity=_number(gpu_class.get("capacity")),
        held_outside=_number(gpu_class.get("heldOutside")),
        faulty=tuple(
            f"{g.get('node')} GPU {g.get('gpu')}: {g.get('reason')}"
            for g in gpu_class.get("faultyGpus") or ()
        ),
        distributable=_number(gpu_class.get("distributable")),
        guaranteed=sum(_number(r.get("guaranteed")) for r in rows),
        usage=sum(_number(r.get("usage")) for r in rows),
        pending=sum(_number(r.get("pending")) for r in rows),
        used=_optional_sum([r.get("used") for r in rows]),
        idle=_optional_sum([r.get("idle") for r in rows]),
        free=_optional_sum([found.get("free")]),
        largest_fit=_optional_sum([found.get("largestFit")]),
    )


def _rows(tenants: Sequence[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    """(tenant name, class row) of every tenant's every class."""
    return [(str(t.get("name")), row) for t in tenants for row in t.get("classes") or ()]


def _conflicts(tenants: Sequence[Mapping[str, Any]]) -> tuple[Conflict, ...]:
    return tuple(
        Conflict(str(t.get("name")), str(c.get("field")), str(c.get("manager")))
        for t in tenants
        for c in t.get("conflicts") or ()
    )


def cluster_summary(report: Mapping[str, Any]) -> ClusterSummary:
    tenants = list(report.get("tenants") or ())
    rows = _rows(tenants)
    by_class: dict[str, list[Mapping[str, Any]]] = {}
    for _, row in rows:
        by_class.setdefault(str(row.get("class")), []).append(row)
    fragmentation = {str(f.get("name")): f for f in report.get("fragmentation") or ()}
    classes = tuple(
        _class_summary(
            c, by_class.get(str(c.get("name")), []), fragmentation.get(str(c.get("name")))
        )
        for c in report.get("classes") or ()
    )
    over = tuple(
        OverQuota(name, str(r.get("class")), _number(r.get("usage")), _number(r.get("nominal")))
        for name, r in rows
        if r.get("overQuota")
    )
    return ClusterSummary(
        mode=str(report.get("mode")),
        tenants=len(tenants),
        classes=classes,
        over_quota=over,
        conflicts=_conflicts(tenants),
        changes=sum(_changes(r) for _, r in rows),
        telemetry=any(c.used is not None for c in classes),
    )
