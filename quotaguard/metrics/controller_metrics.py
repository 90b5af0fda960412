"""The quota report as Prometheus series, and the controller's own counters.

Quota and capacity series are built from the latest report when scraped (`quota_families`, a
pure function), so a tenant or class that leaves the policy has no series rather than one
frozen at its last value. Every one carries `resource` and the labels Kueue's own metrics use
(`cluster_queue`, `flavor`, `resource`, `cohort`) next to `tenant` and `class`, so the two join
in one query, and has a `_gpus` companion in whole-GPU equivalents (a MIG slice is slices/7 of
a GPU, a shared unit a fraction of one), which sums across classes. Only the replica holding the
controller Lease publishes them: summed over replicas, a dashboard counts each tenant once.

The watch series (`watch_families`) are read from the controller's live watches when scraped,
through the `WatchView` protocol: reports sit below the controller and never import it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from quotaguard.metrics.registry import REGISTRY, counter, gauge
from quotaguard.metrics.showback_metrics import showback_families
from quotaguard.policy.model import TenantPolicy

QUOTA_LABELS: Final = ("tenant", "class", "cluster_queue", "flavor", "resource", "cohort")
TENANT_LABELS: Final = ("tenant", "cluster_queue", "cohort")
CLASS_LABELS: Final = ("class", "flavor", "resource")


@dataclass(frozen=True)
class QuotaField:
    """One per-tenant, per-class series: its name, help text and where the value is read."""

    name: str
    help: str
    key: str
    current: bool = False  # read from the row's `current` (the queue as it is now)


QUOTA_FIELDS: Final = (
    QuotaField(
        "quotaguard_quota_nominal",
        "Nominal quota the controller sets (in recommend mode: recommends), per tenant and class.",
        "nominal",
    ),
    QuotaField(
        "quotaguard_quota_borrowing_limit",
        "Borrowing limit the controller sets or recommends (max - nominal); absent without max.",
        "borrowingLimit",
    ),
    QuotaField(
        "quotaguard_quota_lending_limit",
        "Lending limit the controller sets or recommends (nominal - guaranteed).",
        "lendingLimit",
    ),
    QuotaField(
        "quotaguard_quota_guaranteed",
        "Guaranteed quota after scaling to live capacity.",
        "guaranteed",
    ),
    QuotaField("quotaguard_quota_max", "The policy's ceiling (max); absent without one.", "max"),
    QuotaField("quotaguard_quota_usage", "Admitted or running demand.", "usage"),
    QuotaField("quotaguard_quota_pending", "Pending demand (smoothed).", "pending"),
    QuotaField(
        "quotaguard_quota_allocated",
        "Allocated units (admitted or running), next to quotaguard_quota_used.",
        "allocated",
    ),
    QuotaField(
        "quotaguard_quota_used",
        "Allocated units weighted by their GPUs' activity (DCGM); absent without telemetry.",
        "used",
    ),
    QuotaField(
        "quotaguard_quota_idle",
        "Allocated units whose GPUs were idle (below idleBelow for idleFor); absent without "
        "telemetry.",
        "idle",
    ),
    QuotaField(
        "quotaguard_quota_current_nominal",
        "Nominal quota the queue has now (what Kueue or Volcano enforces).",
        "nominal",
        current=True,
    ),
    QuotaField(
        "quotaguard_quota_current_borrowing_limit",
        "Borrowing limit the queue has now; absent when it has none.",
        "borrowingLimit",
        current=True,
    ),
    QuotaField(
        "quotaguard_quota_current_lending_limit",
        "Lending limit the queue has now; absent when it has none.",
        "lendingLimit",
        current=True,
    ),
)
CLASS_FIELDS: Final = (
    QuotaField(
        "quotaguard_class_capacity",
        "Healthy capacity per GPU class (Ready, schedulable, not faulty nodes).",
        "capacity",
    ),
    QuotaField(
        "quotaguard_class_distributable",
        "Capacity per GPU class handed out as quota (headroom and outside pods taken off).",
        "distributable",
    ),
    QuotaField(
        "quotaguard_class_held_outside",
        "Capacity per GPU class held by pods of no tenant.",
        "heldOutside",
    ),
    QuotaField(
        "quotaguard_class_guaranteed",
        "Sum of the tenants' configured guarantees per GPU class (above distributable: the "
        "guarantees cannot all be met).",
        "configuredGuarantee",
    ),
    QuotaField(
        "quotaguard_class_faulty_gpus",
        "GPUs (or nodes, by a node condition) of the class out of capacity as faulty.",
        "faultyGpuCount",
    ),
    QuotaField("quotaguard_class_free", "Capacity per GPU class no bound pod requests.", "free"),
    QuotaField(
        "quotaguard_class_largest_fit",
        "The most of a GPU class free on one node: the largest pod of it that fits now.",
        "largestFit",
    ),
)


@dataclass(frozen=True)
class ClassFacts:
    """What the series of one class need from the policy."""

    flavor: str
    resource: str
    gpu_equivalent: float


def class_facts(policy: TenantPolicy) -> dict[str, ClassFacts]:
    return {
        c.name: ClassFacts(c.flavor, c.resource, float(c.gpu_equivalent))
        for c in policy.spec.gpu_classes
    }


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _pair(
    name: str, help_text: str, labels: Sequence[str]
) -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
    units = GaugeMetricFamily(name, f"{help_text} In units of the class resource.", labels=labels)
    gpus = GaugeMetricFamily(
        f"{name}_gpus", f"{help_text} In whole-GPU equivalents.", labels=labels
    )
    return units, gpus


def _row_labels(
    tenant: Mapping[str, Any], row: Mapping[str, Any], facts: ClassFacts | None, cohort: str
) -> list[str]:
    return [
        str(tenant["name"]),
        str(row["class"]),
        str(tenant.get("queue") or ""),
        str(row.get("flavor") or (facts.flavor if facts else "")),
        str(row.get("resource") or (facts.resource if facts else "")),
        cohort,
    ]


def _add_row(
    per_field: Mapping[str, tuple[GaugeMetricFamily, GaugeMetricFamily]],
    row: Mapping[str, Any],
    labels: list[str],
    equivalent: float,
) -> None:
    for field in QUOTA_FIELDS:
        source = row.get("current") if field.current else row
        value = _number(source.get(field.key)) if isinstance(source, Mapping) else None
        if value is not None:
            units, gpus = per_field[field.name]
            units.add_metric(labels, value)
            gpus.add_metric(labels, value * equivalent)


def _tenant_families(
    report: Mapping[str, Any], classes: Mapping[str, ClassFacts], cohort: str
) -> list[GaugeMetricFamily]:
    per_field = {f.name: _pair(f.name, f.help, QUOTA_LABELS) for f in QUOTA_FIELDS}
    weight = GaugeMetricFamily(
        "quotaguard_tenant_weight",
        "Fair-share weight the controller sets or recommends, adjusted by decayed usage.",
        labels=TENANT_LABELS,
    )
    current_weight = GaugeMetricFamily(
        "quotaguard_tenant_current_weight",
        "Fair-share weight the queue has now; absent when it has none.",
        labels=TENANT_LABELS,
    )
    for tenant in report.get("tenants", ()):
        tenant_labels = [str(tenant["name"]), str(tenant.get("queue") or ""), cohort]
        for family, key in ((weight, "weight"), (current_weight, "currentWeight")):
            value = _number(tenant.get(key))
            if value is not None:
                family.add_metric(tenant_labels, value)
        for row in tenant.get("classes", ()):
            facts = classes.get(str(row["class"]))
            labels = _row_labels(tenant, row, facts, cohort)
            _add_row(per_field, row, labels, facts.gpu_equivalent if facts else 1.0)
    families = [family for pair in per_field.values() for family in pair]
    return [*families, weight, current_weight]


def _configured_guarantees(report: Mapping[str, Any]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for tenant in report.get("tenants", ()):
        for row in tenant.get("classes", ()):
            configured = _number(row.get("configuredGuarantee")) or 0.0
            totals[str(row["class"])] = totals.get(str(row["class"]), 0.0) + configured
    return totals


def _class_families(
    report: Mapping[str, Any], classes: Mapping[str, ClassFacts]
) -> list[GaugeMetricFamily]:
    per_class = {f.name: _pair(f.name, f.help, CLASS_LABELS) for f in CLASS_FIELDS}
    guaranteed = _configured_guarantees(report)
    fragmentation = {row["name"]: row for row in report.get("fragmentation") or ()}
    for row in report.get("classes", ()):
        name = str(row["name"])
        facts = classes.get(name) or ClassFacts("", str(row.get("resource") or ""), 1.0)
        labels = [name, facts.flavor, str(row.get("resource") or facts.resource)]
        values = {
            **fragmentation.get(name, {}),
            **row,
            "configuredGuarantee": guaranteed.get(name, 0.0),
            "faultyGpuCount": len(row.get("faultyGpus") or ()),
        }
        for field in CLASS_FIELDS:
            value = _number(values.get(field.key))
            if value is not None:
                units, gpus = per_class[field.name]
                units.add_metric(labels, value)
                gpus.add_metric(labels, value * facts.gpu_equivalent)
    return [family for pair in per_class.values() for family in pair]


# A reason counting down its quiet period changes every interval; the series keeps the fault.
_COUNTDOWN = re.compile(r", \d+s of quiet period left$")


def _faulty_gpu_family(
    report: Mapping[str, Any], classes: Mapping[str, ClassFacts]
) -> list[GaugeMetricFamily]:
    """One series per faulty GPU (or node, by a condition) with its reason, as the report's
    `classes[].faultyGpus` names them; none while no GPU is faulty."""
    family = GaugeMetricFamily(
        "quotaguard_class_faulty_gpu",
        "1 per GPU (gpu=all: a node, by a condition) out of the class's capacity as faulty, "
        "with the reason (the quiet period's countdown left off).",
        labels=(*CLASS_LABELS, "node", "gpu", "reason"),
    )
    for row in report.get("classes", ()):
        name = str(row["name"])
        facts = classes.get(name) or ClassFacts("", str(row.get("resource") or ""), 1.0)
        for gpu in row.get("faultyGpus") or ():
            reason = _COUNTDOWN.sub("", str(gpu.get("reason") or ""))
            labels = [name, facts.flavor, str(row.get("resource") or facts.resource)]
            family.add_metric([*labels, str(gpu.get("node")), str(gpu.get("gpu")), reason], 1.0)
    return [family] if family.samples else []


def _layout_families(report: Mapping[str, Any]) -> list[GaugeMetricFamily]:
    """Nodes of each geometry pool by what the layout plan does to them."""
    counted: dict[tuple[str, str], int] = {}
    for node in report.get("nodes", ()):
        key = (str(node.get("pool")), str(node.get("action")))
        counted[key] = counted.get(key, 0) + 1
    if not counted:
        return []
    family = GaugeMetricFamily(
        "quotaguard_layout_nodes",
        "Nodes of each geometry pool by what the layout plan does to them "
        "(keep, start, wait, changing, failed, skip).",
        labels=("pool", "action"),
    )
    for (pool, action), count in sorted(counted.items()):
        family.add_metric([pool, action], float(count))
    return [family]


def _telemetry_families(report: Mapping[str, Any]) -> list[GaugeMetricFamily]:
    """Whether the last plan had GPU telemetry, and the series it skipped by kind; none
    without `--prometheus-url` (or a report that does not say)."""
    telemetry = report.get("telemetry")
    if not isinstance(telemetry, Mapping) or telemetry.get("source") is None:
        return []
    available = GaugeMetricFamily(
        "quotaguard_telemetry_available",
        "1 when the last plan read GPU telemetry, 0 when it planned without (unreachable or "
        "unusable; the report's telemetry.note says why).",
    )
    available.add_metric([], 1.0 if telemetry.get("available") else 0.0)
    skipped = GaugeMetricFamily(
        "quotaguard_telemetry_skipped_series",
        "Telemetry series or points the last plan skipped as untrustworthy, by kind "
        "(not a number, missing labels, unknown node, too many series, ...).",
        labels=("kind",),
    )
    for kind, count in sorted((telemetry.get("warnings") or {}).items()):
        value = _number(count)
        if value is not None:
            skipped.add_metric([str(kind)], value)
    return [available, skipped]


def quota_families(
    report: Mapping[str, Any], classes: Mapping[str, ClassFacts]
) -> list[GaugeMetricFamily]:
    """Every quota and capacity series of `report` (pure: the same report, the same series)."""
    cohort = str(report.get("cohort") or "")
    mode = GaugeMetricFamily(
        "quotaguard_controller_mode",
        "1 for the mode the controller plans in (apply, recommend, off).",
        labels=("mode",),
    )
    mode.add_metric([str(report.get("mode") or "")], 1.0)
    return [
        *_tenant_families(report, classes, cohort),
        *_class_families(report, classes),
        *_faulty_gpu_family(report, classes),
        *_layout_families(report),
        *_telemetry_families(report),
        *showback_families(report),
        mode,
    ]


class LatestReport(Collector):
    """The quota series of the last published report, rendered at scrape time; none while
    this replica is a standby (or before the first plan)."""

    def __init__(self) -> None:
        # prometheus_client may collect from any thread; publish and collect swap one pair
        self._lock = threading.Lock()
        self._report: Mapping[str, Any] | None = None
        self._classes: Mapping[str, ClassFacts] = {}

    def publish(self, report: Mapping[str, Any], classes: Mapping[str, ClassFacts]) -> None:
        with self._lock:
            self._report, self._classes = report, classes

    def withdraw(self) -> None:
        with self._lock:
            self._report = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            report, classes = self._report, self._classes
        if report is not None:
            yield from quota_families(report, classes)

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return ()  # dynamic: nothing to check at registration


QUOTA_SERIES: Final = LatestReport()
REGISTRY.register(QUOTA_SERIES)


class WatchCounts(Protocol):
    """What the watch series read of one watch's counters (the controller's WatchStats)."""

    @property
    def lists(self) -> int: ...

    @property
    def events(self) -> int: ...

    @property
    def skipped_lines(self) -> int: ...

    @property
    def gone(self) -> int: ...

    @property
    def errors(self) -> int: ...


class WatchView(Protocol):
    """What the watch series read of one of the controller's watches."""

    @property
    def name(self) -> str: ...

    @property
    def stats(self) -> WatchCounts: ...

    @property
    def resource_version(self) -> str | None: ...

    @property
    def synced(self) -> bool: ...


WatchSource = Callable[[], Iterable[WatchView]]


def resource_version_number(resource_version: str | None) -> float | None:
    """An etcd revision as a number; None for anything else (resourceVersions are opaque by
    contract: an etcd-backed API server spells them as integers, nothing promises it)."""
    if resource_version and resource_version.isascii() and resource_version.isdigit():
        return float(resource_version)
    return None


def watch_families(watches: Iterable[WatchView]) -> list[Metric]:
    """Every watch series of `watches` (pure: the same counters, the same series)."""
    labels = ("resource",)
    events = CounterMetricFamily(
        "quotaguard_watch_events",
        "Watch events decoded and applied to the controller's cache, bookmarks included.",
        labels=labels,
    )
    skipped = CounterMetricFamily(
        "quotaguard_watch_skipped_events",
        "Watch events skipped undecoded (objects the cache never keeps, e.g. pods without GPUs); "
        "they do not move quotaguard_watch_resource_version.",
        labels=labels,
    )
    lists = CounterMetricFamily(
        "quotaguard_watch_lists",
        "Full lists of the resource (the first, and one after every restart).",
        labels=labels,
    )
    restarts = CounterMetricFamily(
        "quotaguard_watch_restarts",
        "Watches restarted with a full list, by reason: gone (the resourceVersion was too old, "
        "HTTP 410) or error.",
        labels=("resource", "reason"),
    )
    resource_version = GaugeMetricFamily(
        "quotaguard_watch_resource_version",
        "The last resourceVersion the watch has seen, as a number; absent when it is not an "
        "integer (resourceVersions are opaque by contract, etcd revisions in practice).",
        labels=labels,
    )
    synced = GaugeMetricFamily(
        "quotaguard_watch_synced",
        "1 while the watch's cache is listed and current, 0 from an error until the next list.",
        labels=labels,
    )
    for watch in watches:
        stats, resource = watch.stats, [watch.name]
        events.add_metric(resource, float(stats.events))
        skipped.add_metric(resource, float(stats.skipped_lines))
        lists.add_metric(resource, float(stats.lists))
        restarts.add_metric([watch.name, "gone"], float(stats.gone))
        restarts.add_metric([watch.name, "error"], float(stats.errors))
        version = resource_version_number(watch.resource_version)
        if version is not None:
            resource_version.add_metric(resource, version)
        synced.add_metric(resource, 1.0 if watch.synced else 0.0)
    return [events, skipped, lists, restarts, resource_version, synced]


class WatchSeries(Collector):
    """The watch series of the watches a source names now, read at scrape time: a watch the
    controller stopped has none. The last source set wins (one controller per process)."""

    def __init__(self) -> None:
        self._source: WatchSource | None = None

    def read_from(self, source: WatchSource | None) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        source = self._source
        if source is not None:
            yield from watch_families(source())

    def describe(self) -> Iterable[Metric]:
        # the families without series: their names are fixed, so a scrape that asks for some
        # by name (`/metrics?name[]=...`) finds this collector
        return watch_families(())


WATCH_SERIES: Final = WatchSeries()
REGISTRY.register(WATCH_SERIES)

QUEUE_WRITES: Final = counter(
    "quotaguard_queue_writes",
    "Queue writes by result (updated, created, unchanged, missing, conflict, error, not_leader).",
    ["result"],
)
CONTROLLER_STALE: Final = gauge(
    "quotaguard_controller_stale",
    "1 while the controller's view of the cluster is stale (a watch unsynced, the API server "
    "unreachable) and it changes nothing.",
)
CONTROLLER_LEADER: Final = gauge(
    "quotaguard_controller_leader",
    "1 while this replica holds the controller Lease and may write queues; 0 on a standby, "
    "which publishes no quota series.",
)
CONTROLLER_INTERVALS: Final = counter(
    "quotaguard_controller_intervals",
    "Controller intervals by outcome (planned, stale, off).",
    ["outcome"],
)
PLAN_CPU: Final = counter(
    "quotaguard_controller_plan_cpu_seconds",
    "CPU seconds spent planning (parse, capacity, demand, weights, plan, report), the "
    "planning thread's own: not the watches between intervals, not the queue writes.",
)
CONTROLLER_INTERVAL: Final = gauge(
    "quotaguard_controller_interval_seconds",
    "The policy's rebalance interval: a plan older than a few of these is stale.",
)
LAST_PLAN: Final = gauge(
    "quotaguard_controller_last_plan_timestamp_seconds",
    "When the controller last planned quotas from a fresh view of the cluster (Unix time).",
)
LAST_WRITE: Final = gauge(
    "quotaguard_controller_last_write_timestamp_seconds",
    "When the controller last changed a queue (Unix time); 0 before its first change.",
)
LAYOUT_CHANGES: Final = counter(
    "quotaguard_layout_changes",
    "Steps of node layout changes by outcome (started, relabelled, succeeded, rolled-back, "
    "failed, given-up).",
    ["outcome"],
)

WRITE_RESULTS: Final = (
    "updated",
    "created",
    "unchanged",
    "missing",
    "conflict",
    "error",
    "not_leader",
)


def publish_report(
    report: Mapping[str, Any],
    policy: TenantPolicy,
    *,
    leader: bool,
    at: float,
    interval: float,
) -> None:
    """Publish a planned interval: its quota series when this replica leads, the time always."""
    if leader:
        QUOTA_SERIES.publish(report, class_facts(policy))
    else:
        QUOTA_SERIES.withdraw()
    CONTROLLER_INTERVAL.set(interval)
    LAST_PLAN.set(at)


class WriteResult(Protocol):
    @property
    def result(self) -> str: ...


def record_writes(outcomes: Iterable[WriteResult], *, at: float) -> None:
    wrote = False
    for outcome in outcomes:
        QUEUE_WRITES.labels(result=outcome.result).inc()
        wrote = wrote or outcome.result in ("updated", "created")
    if wrote:
        LAST_WRITE.set(at)


def leadership_changed(leader: bool) -> None:
    CONTROLLER_LEADER.set(1 if leader else 0)
    if not leader:
        QUOTA_SERIES.withdraw()


for _result in WRITE_RESULTS:
    QUEUE_WRITES.labels(result=_result)
for _outcome in ("planned", "stale", "off"):
    CONTROLLER_INTERVALS.labels(outcome=_outcome)
