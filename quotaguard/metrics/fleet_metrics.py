"""The fleet component's series, each with a `cluster` label (a worker's name, or `manager`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from quotaguard.metrics.registry import counter, gauge

MANAGER: Final = "manager"

FLEET_QUOTA: Final = gauge(
    "quotaguard_fleet_quota",
    "Nominal quota the fleet plan gives a tenant's ClusterQueue for a GPU class on a cluster "
    "(cluster=manager: the sum over the workers that answered); an unreachable worker's is "
    "the quota it keeps",
    ("cluster", "tenant", "class"),
)
FLEET_CAPACITY: Final = gauge(
    "quotaguard_fleet_capacity",
    "Distributable GPU capacity of a worker cluster per class, as last read",
    ("cluster", "class"),
)
FLEET_REACHABLE: Final = gauge(
    "quotaguard_fleet_cluster_reachable",
    "1 when the worker cluster answered the last fleet cycle, 0 when it did not",
    ("cluster",),
)
FLEET_WRITES: Final = counter(
    "quotaguard_fleet_writes_total",
    "ClusterQueue writes of the fleet component per cluster, by result (changed, unchanged, "
    "failed)",
    ("cluster", "result"),
)
FLEET_CYCLES: Final = counter(
    "quotaguard_fleet_cycles_total",
    "Fleet cycles by result (planned, manager-unreachable, skipped)",
    ("result",),
)


def record_fleet(report: Mapping[str, Any]) -> None:
    """Set the gauges from a fleet report (`planning.fleet_plan.FleetReport`)."""
    for cluster in report.get("clusters", []):
        name = cluster["name"]
        FLEET_REACHABLE.labels(name).set(1 if cluster["reachable"] else 0)
        if cluster["reachable"]:
            for class_name, units in cluster["capacity"].items():
                FLEET_CAPACITY.labels(name, class_name).set(units)
        for row in cluster["quotas"]:
            FLEET_QUOTA.labels(name, row["tenant"], row["gpuClass"]).set(row["nominal"])
    for row in report.get("manager", []):
        FLEET_QUOTA.labels(MANAGER, row["tenant"], row["gpuClass"]).set(row["nominal"])


def record_write(cluster: str, changed: int, error: str) -> None:
    result = "failed" if error else "changed" if changed else "unchanged"
    FLEET_WRITES.labels(cluster, result).inc()
