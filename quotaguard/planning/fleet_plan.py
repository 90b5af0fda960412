"""The fleet plan: each cluster as read -> capacity, demand and queues -> the fleet split ->
the report `quotaguard plan --fleet-snapshot` prints and the fleet component writes.

Capacity is each worker's distributable GPU capacity (its nodes, net of faulty ones); demand is
what the manager holds (every MultiKueue Workload lives there: pending, or reserved and
dispatched) or, where more, what the workers admitted; the workers' admitted work also says
where each tenant's quota stays. Pure: the reads are the caller's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from quotaguard.planning.fleet_split import FleetSplit, TenantUnits, WorkerState, split_fleet
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.class_capacity import class_capacity
from quotaguard.quota.cluster import ClusterSnapshot
from quotaguard.quota.demand import demand_of
from quotaguard.quota.queues import current_state


@dataclass(frozen=True, slots=True)
class WorkerRead:
    """One worker as read: its snapshot, or why it could not be read (and the quotas it held
    when last read, which it keeps)."""

    name: str
    snapshot: ClusterSnapshot | None
    reason: str = ""
    last_quotas: TenantUnits | None = None


def queue_quotas(policy: TenantPolicy, snapshot: ClusterSnapshot) -> dict[str, dict[str, int]]:
    """Tenant -> class -> the nominal quota of its ClusterQueue in a snapshot."""
    return {
        tenant: {name: quota.nominal for name, quota in state.quotas.items()}
        for tenant, state in current_state(policy, snapshot).items()
    }


def worker_state(policy: TenantPolicy, read: WorkerRead) -> WorkerState:
    if read.snapshot is None:
        return WorkerState(read.name, False, quotas=read.last_quotas or {}, reason=read.reason)
    capacity = class_capacity(policy, read.snapshot.nodes, read.snapshot.pods)
    usage = {
        tenant: {name: row.usage for name, row in classes.items()}
        for tenant, classes in demand_of(policy, read.snapshot).items()
    }
    return WorkerState(
        read.name,
        True,
        capacity={name: row.distributable for name, row in capacity.items()},
        usage=usage,
        quotas=queue_quotas(policy, read.snapshot),
    )


def _manager_demand(
    policy: TenantPolicy, manager: ClusterSnapshot, workers: Sequence[WorkerState]
) -> dict[str, dict[str, int]]:
    """What the split adds to the workers' usage: the manager's pending, and what it holds
    reserved beyond what the workers that answered admitted."""
    found: dict[str, dict[str, int]] = {}
    for tenant, classes in demand_of(policy, manager).items():
        for name, row in classes.items():
            admitted = sum(w.usage.get(tenant, {}).get(name, 0) for w in workers if w.reachable)
            found.setdefault(tenant, {})[name] = row.pending + max(0, row.usage - admitted)
    return found


class FleetQuotaRow(TypedDict):
    tenant: str
    gpuClass: str
    nominal: int
    current: int | None
    usage: int


class FleetClusterRow(TypedDict):
    name: str
    reachable: bool
    reason: str
    capacity: dict[str, int]
    quotas: list[FleetQuotaRow]


class FleetTenantRow(TypedDict):
    tenant: str
    gpuClass: str
    guaranteed: int
    max: int | None
    demand: int
    fleetQuota: int
    manager: int


class FleetReport(TypedDict):
    policy: str
    mode: str
    capacity: dict[str, int]
    tenants: list[FleetTenantRow]
    manager: list[FleetQuotaRow]  # the manager's ClusterQueues: the sum over the workers
    clusters: list[FleetClusterRow]
    unreachable: dict[str, str]
    problems: list[str]


@dataclass(frozen=True, slots=True)
class FleetPlan:
    split: FleetSplit
    workers: tuple[WorkerState, ...]
    manager_now: TenantUnits  # the manager's ClusterQueue quotas as read
    manager_usage: TenantUnits  # what the manager holds reserved

    def report(self, policy: TenantPolicy) -> FleetReport:
        fleet = policy.spec.fleet
        return {
            "policy": policy.name,
            "mode": fleet.mode if fleet else "off",
            "capacity": dict(self.split.capacity),
            "tenants": [
                {
                    "tenant": row.tenant,
                    "gpuClass": row.class_name,
                    "guaranteed": row.guaranteed,
                    "max": row.max,
                    "demand": row.demand,
                    "fleetQuota": row.total,
                    "manager": self.split.manager.get(row.tenant, {}).get(row.class_name, 0),
                }
                for row in self.split.totals
            ],
            "manager": [
                {
                    "tenant": tenant,
                    "gpuClass": name,
                    "nominal": nominal,
                    "current": self.manager_now.get(tenant, {}).get(name),
                    "usage": self.manager_usage.get(tenant, {}).get(name, 0),
                }
                for tenant, classes in sorted(self.split.manager.items())
                for name, nominal in sorted(classes.items())
            ],
            "clusters": [self._cluster_row(worker) for worker in self.workers],
            "unreachable": dict(self.split.unreachable),
            "problems": list(self.split.problems),
        }

    def _cluster_row(self, worker: WorkerState) -> FleetClusterRow:
        planned = self.split.workers.get(worker.name, {})
        return {
            "name": worker.name,
            "reachable": worker.reachable,
            "reason": worker.reason,
            "capacity": dict(worker.capacity),
            "quotas": [
                {
                    "tenant": tenant,
                    "gpuClass": name,
                    "nominal": nominal,
                    "current": worker.quotas.get(tenant, {}).get(name)
                    if worker.reachable
                    else nominal,
                    "usage": worker.usage.get(tenant, {}).get(name, 0),
                }
                for tenant, classes in sorted(planned.items())
                for name, nominal in sorted(classes.items())
            ],
        }


def plan_fleet(
    policy: TenantPolicy, manager: ClusterSnapshot, workers: Sequence[WorkerRead]
) -> FleetPlan:
    """The fleet's quotas from the manager's and the workers' snapshots."""
    states = tuple(worker_state(policy, read) for read in workers)
    split = split_fleet(policy, states, _manager_demand(policy, manager, states))
    usage = {
        tenant: {name: row.usage for name, row in classes.items()}
        for tenant, classes in demand_of(policy, manager).items()
    }
    return FleetPlan(split, states, queue_quotas(policy, manager), usage)


def clusters_of(policy: TenantPolicy, named: Mapping[str, object] | None = None) -> list[str]:
    """The worker clusters of the policy's fleet, then any others found (a MultiKueueConfig's)."""
    listed = [c.name for c in policy.spec.fleet.clusters] if policy.spec.fleet else []
    return listed + sorted(set(named or {}) - set(listed))
