"""Demand per tenant and GPU class: what is admitted or running (usage) and what waits (pending).

Read from the first source that has anything for the tenant:
  1. Kueue Workloads: admitted to the tenant's ClusterQueue, or pending in its namespaces;
  2. Volcano PodGroups of the tenant's Queue (or its namespaces);
  3. the tenant's Pods (bound ones are usage, unbound pending ones are pending).
Amounts are in units of each class's resource.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from quotaguard.policy.model import GpuClass, Tenant, TenantPolicy
from quotaguard.quota.capacity import class_of_pod_resource
from quotaguard.quota.cluster import ClusterSnapshot, PodGroup, Workload

VOLCANO_HOLDING_PHASES = frozenset({"Running", "Inqueue", "Unknown"})


@dataclass(frozen=True, slots=True)
class ClassDemand:
    usage: int = 0
    pending: int = 0

    @property
    def total(self) -> int:
        return self.usage + self.pending


# tenant name -> class name -> demand
Demand = Mapping[str, Mapping[str, ClassDemand]]


class _Tally:
    def __init__(self) -> None:
        self.usage: dict[tuple[str, str], int] = {}
        self.pending: dict[tuple[str, str], int] = {}

    def add(self, tenant: str, gpu_class: str, amount: int, *, holding: bool) -> None:
        target = self.usage if holding else self.pending
        key = (tenant, gpu_class)
        target[key] = target.get(key, 0) + amount

    def demand(self) -> dict[str, dict[str, ClassDemand]]:
        result: dict[str, dict[str, ClassDemand]] = {}
        for tenant, gpu_class in sorted(self.usage.keys() | self.pending.keys()):
            key = (tenant, gpu_class)
            result.setdefault(tenant, {})[gpu_class] = ClassDemand(
                self.usage.get(key, 0), self.pending.get(key, 0)
            )
        return result


def _class_by_flavor(policy: TenantPolicy, resource: str, flavor: str | None) -> GpuClass | None:
    candidates = policy.classes_by_resource.get(resource, [])
    for gpu_class in candidates:
        if gpu_class.flavor == flavor:
            return gpu_class
    return None


def _class_by_selector(
    policy: TenantPolicy, resource: str, selector: Mapping[str, str]
) -> GpuClass | None:
    found = policy.class_of_resource(resource, dict(selector))
    if found is None:
        candidates = policy.classes_by_resource.get(resource, [])
        found = candidates[0] if candidates else None
    return found


def _tenant_of(policy: TenantPolicy, namespace: str, queue: str | None) -> Tenant | None:
    if policy.exempt(namespace):
        return None
    tenant = policy.tenant_of_queue(queue) if queue else None
    return tenant or policy.tenant_of(namespace)


def _workload_demand(policy: TenantPolicy, workload: Workload, tenant: str, tally: _Tally) -> None:
    holding = workload.holds_quota
    assigned = {a.name: a for a in workload.assignments} if holding else {}
    for pod_set in workload.pod_sets:
        assignment = assigned.get(pod_set.name)
        totals = {r: n * pod_set.count for r, n in pod_set.per_pod.items()}
        if assignment is not None and assignment.usage:
            totals = dict(assignment.usage)
        for resource, amount in totals.items():
            gpu_class = None
            if assignment is not None:
                gpu_class = _class_by_flavor(policy, resource, assignment.flavors.get(resource))
            if gpu_class is None:
                gpu_class = _class_by_selector(policy, resource, pod_set.node_selector)
            if gpu_class is not None and amount > 0:
                tally.add(tenant, gpu_class.name, amount, holding=holding)


def _pod_group_demand(policy: TenantPolicy, group: PodGroup, tenant: str, tally: _Tally) -> None:
    holding = group.phase in VOLCANO_HOLDING_PHASES
    for resource, amount in group.min_resources.items():
        gpu_class = _class_by_selector(policy, resource, {})
        if gpu_class is not None and amount > 0:
            tally.add(tenant, gpu_class.name, amount, holding=holding)


def demand_of(policy: TenantPolicy, snapshot: ClusterSnapshot) -> dict[str, dict[str, ClassDemand]]:
    """Usage and pending demand of every tenant with any, per class."""
    tally = _Tally()
    with_workloads: set[str] = set()
    for workload in snapshot.workloads:
        if workload.finished:
            continue
        queue = workload.cluster_queue if workload.holds_quota else None
        tenant = _tenant_of(policy, workload.namespace, queue)
        if tenant is not None:
            with_workloads.add(tenant.name)
            _workload_demand(policy, workload, tenant.name, tally)
    with_groups: set[str] = set()
    for group in snapshot.pod_groups:
        if group.phase == "Completed":
            continue
        tenant = _tenant_of(policy, group.namespace, group.queue)
        if tenant is not None and tenant.name not in with_workloads:
            with_groups.add(tenant.name)
            _pod_group_demand(policy, group, tenant.name, tally)
    nodes = {node.name: node for node in snapshot.nodes}
    counted = with_workloads | with_groups
    for pod in snapshot.pods:
        if not pod.active:
            continue
        tenant = _tenant_of(policy, pod.namespace, None)
        if tenant is None or tenant.name in counted:
            continue
        node = nodes.get(pod.node_name) if pod.node_name else None
        for resource, amount in pod.gpus.items():
            gpu_class = class_of_pod_resource(policy, resource, pod, node)
            if gpu_class is not None:
                tally.add(tenant.name, gpu_class.name, amount, holding=pod.bound)
    return tally.demand()


@dataclass(frozen=True, slots=True)
class DemandSmoother:
    """Smoothed demand that rises at once and falls slowly: state in, state out.

    For each tenant and class, with observed demand o = usage + pending and the previous
    smoothed level s, after dt seconds:

        s' = o                                   when o >= s   (rise at once)
        s' = o + (s - o) * exp(-3 * dt / W)      otherwise     (W = demandWindow)

    so an excess over the current demand decays to 5 % within one demand window. The
    smoothed pending demand is round(s') - usage (half up), never below what is pending now.
    """

    window: float
    at: float | None = None
    levels: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def observe(self, demand: Demand, now: float) -> tuple[DemandSmoother, Demand]:
        elapsed = 0.0 if self.at is None else max(0.0, now - self.at)
        decay = math.exp(-3.0 * elapsed / self.window) if self.window > 0 else 0.0
        levels: dict[tuple[str, str], float] = {}
        smoothed: dict[str, dict[str, ClassDemand]] = {}
        observed = {
            (tenant, gpu_class): row
            for tenant, classes in demand.items()
            for gpu_class, row in classes.items()
        }
        for key in sorted(observed.keys() | self.levels.keys()):
            row = observed.get(key, ClassDemand())
            before = self.levels.get(key, 0.0)
            level = float(row.total)
            if before > level:
                level += (before - level) * decay
            rounded = math.floor(level + 0.5)
            if rounded > row.total or key in observed:
                levels[key] = level
                pending = max(row.pending, rounded - row.usage)
                smoothed.setdefault(key[0], {})[key[1]] = ClassDemand(row.usage, pending)
        return DemandSmoother(self.window, now, levels), smoothed
