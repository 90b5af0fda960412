"""Demand per tenant and GPU class: what is admitted or running (usage) and what waits (pending).

Read from the first source that has anything for the tenant:
  1. Kueue Workloads: admitted to the tenant's ClusterQueue, or pending in its namespaces;
  2. Volcano PodGroups of the tenant's Queue (or its namespaces);
  3. the tenant's Pods (bound ones are usage, unbound pending ones are pending).
Amounts are in units of each class's resource.

With GPU telemetry, pods whose GPUs were idle (`quotaguard.telemetry`) are found per tenant and
class; under `rebalance.idleDemand: discount` the idle units a tenant holds above its guarantee
are not demand (`ClassDemand.discounted`): its borrowing shrinks, nothing is evicted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from quotaguard.policy.fungibility import class_order
from quotaguard.policy.model import GpuClass, Tenant, TenantPolicy
from quotaguard.quota.class_capacity import class_of_pod_resource
from quotaguard.quota.cluster import ClusterSnapshot, Pod, PodGroup, Workload

VOLCANO_HOLDING_PHASES = frozenset({"Running", "Inqueue", "Unknown"})


@dataclass(frozen=True, slots=True)
class ClassDemand:
    usage: int = 0
    pending: int = 0
    # idle-held units above the guarantee not counted as demand (idleDemand: discount)
    discounted: int = 0

    @property
    def total(self) -> int:
        """The demand the planner shares out."""
        return self.usage + self.pending - self.discounted


class PodActivity(Protocol):
    """What telemetry says of one pod (`quotaguard.telemetry.idle.PodActivity` is one)."""

    @property
    def idle(self) -> bool: ...
    @property
    def mean_percent(self) -> float: ...
    @property
    def idle_seconds(self) -> float: ...


# (namespace, pod name) -> its activity
Activity = Mapping[tuple[str, str], PodActivity]


@dataclass(frozen=True, slots=True)
class ClassActivity:
    """Allocated against used GPUs of one tenant and class, from its bound pods."""

    allocated: int = 0  # units the tenant's running pods hold
    observed: int = 0  # of those, units telemetry reported on
    used: float = 0.0  # observed units weighted by their mean activity
    idle: int = 0  # units held by idle pods
    idle_pods: tuple[str, ...] = ()  # namespace/name
    idle_gpu_hours: float = 0.0  # whole-GPU equivalents x hours idle


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
    policy: TenantPolicy, resource: str, selector: Mapping[str, str], tenant: Tenant | None
) -> GpuClass | None:
    """The class a request not yet given a flavor counts for: the one its nodeSelector names,
    else the first of the resource in the order the tenant's queue tries them (its lists'
    order, `to: [h100, a100]`, then the policy's)."""
    found = policy.class_of_resource(resource, dict(selector))
    if found is None:
        order = class_order(policy, tenant)
        found = next((c for c in order if c.resource == resource), None)
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
                gpu_class = _class_by_selector(
                    policy, resource, pod_set.node_selector, policy.tenants_by_name.get(tenant)
                )
            if gpu_class is not None and amount > 0:
                tally.add(tenant, gpu_class.name, amount, holding=holding)


def _pod_group_demand(policy: TenantPolicy, group: PodGroup, tenant: str, tally: _Tally) -> None:
    holding = group.phase in VOLCANO_HOLDING_PHASES
    for resource, amount in group.min_resources.items():
        gpu_class = _class_by_selector(policy, resource, {}, policy.tenants_by_name.get(tenant))
        if gpu_class is not None and amount > 0:
            tally.add(tenant, gpu_class.name, amount, holding=holding)


def bound_pod_units(
    policy: TenantPolicy, snapshot: ClusterSnapshot
) -> Iterator[tuple[str, GpuClass, Pod, int]]:
    """(tenant, class, pod, units) for every tenant pod bound to a node.

    On a known node the class depends on the node and the resource only: found once per pair
    (a cluster has thousands of pods per few nodes' worth of label sets)."""
    nodes = {node.name: node for node in snapshot.nodes}
    on_node: dict[tuple[str, str], GpuClass | None] = {}
    for pod in snapshot.pods:
        if not pod.bound:
            continue
        tenant = _tenant_of(policy, pod.namespace, None)
        if tenant is None:
            continue
        node = nodes.get(pod.node_name) if pod.node_name else None
        for resource, amount in pod.gpus.items():
            if node is None:
                gpu_class = class_of_pod_resource(policy, resource, pod, None)
            elif (node.name, resource) in on_node:
                gpu_class = on_node[(node.name, resource)]
            else:
                gpu_class = on_node[(node.name, resource)] = class_of_pod_resource(
                    policy, resource, pod, node
                )
            if gpu_class is not None and amount > 0:
                yield tenant.name, gpu_class, pod, amount


def activity_of(
    policy: TenantPolicy, snapshot: ClusterSnapshot, activity: Activity
) -> dict[str, dict[str, ClassActivity]]:
    """Allocated, used and idle units per tenant and class (tenants with running pods)."""
    rows: dict[str, dict[str, ClassActivity]] = {}
    for tenant, gpu_class, pod, units in bound_pod_units(policy, snapshot):
        row = rows.setdefault(tenant, {}).get(gpu_class.name, ClassActivity())
        seen = activity.get((pod.namespace, pod.name))
        observed = units if seen is not None else 0
        used = units * seen.mean_percent / 100 if seen is not None else 0.0
        idle = seen is not None and seen.idle
        seconds = seen.idle_seconds if seen is not None and idle else 0.0
        hours = float(gpu_class.gpu_equivalent) * units * seconds / 3600
        rows[tenant][gpu_class.name] = ClassActivity(
            allocated=row.allocated + units,
            observed=row.observed + observed,
            used=row.used + used,
            idle=row.idle + (units if idle else 0),
            idle_pods=(*row.idle_pods, f"{pod.namespace}/{pod.name}") if idle else row.idle_pods,
            idle_gpu_hours=row.idle_gpu_hours + hours,
        )
    return rows


def _discount_idle(
    policy: TenantPolicy,
    demand: dict[str, dict[str, ClassDemand]],
    activity: Mapping[str, Mapping[str, ClassActivity]],
) -> None:
    """Idle-held units above the tenant's guarantee stop counting as demand."""
    for tenant_name, classes in activity.items():
        tenant = policy.tenants_by_name.get(tenant_name)
        for class_name, row in classes.items():
            current = demand.get(tenant_name, {}).get(class_name)
            if tenant is None or current is None or not row.idle:
                continue
            quota = tenant.quota.get(class_name)
            guaranteed = quota.guaranteed if quota is not None else 0
            if quota is not None and quota.max is not None:
                guaranteed = min(guaranteed, quota.max)
            above = max(0, current.usage - guaranteed)
            discounted = min(row.idle, above)
            if discounted:
                demand[tenant_name][class_name] = dataclasses.replace(
                    current, discounted=discounted
                )


def demand_of(
    policy: TenantPolicy, snapshot: ClusterSnapshot, *, activity: Activity | None = None
) -> dict[str, dict[str, ClassDemand]]:
    """Usage and pending demand of every tenant with any, per class.

    `activity` (GPU telemetry per pod) matters only under `idleDemand: discount`."""
    demand = _observed_demand(policy, snapshot)
    if activity and policy.spec.rebalance.idle_demand == "discount":
        _discount_idle(policy, demand, activity_of(policy, snapshot, activity))
    return demand


def _observed_demand(
    policy: TenantPolicy, snapshot: ClusterSnapshot
) -> dict[str, dict[str, ClassDemand]]:
    """Each tenant's demand from the richest source it has: Kueue Workloads, else Volcano
    PodGroups, else its pods one by one."""
    tally = _Tally()
    with_workloads = _workloads_demand(policy, snapshot, tally)
    with_groups = _pod_groups_demand(policy, snapshot, tally, with_workloads)
    _pods_demand(policy, snapshot, tally, with_workloads | with_groups)
    return tally.demand()


def _workloads_demand(policy: TenantPolicy, snapshot: ClusterSnapshot, tally: _Tally) -> set[str]:
    """Tally the unfinished Workloads; the tenants that have any."""
    counted: set[str] = set()
    for workload in snapshot.workloads:
        if workload.finished:
            continue
        queue = workload.cluster_queue if workload.holds_quota else None
        tenant = _tenant_of(policy, workload.namespace, queue)
        if tenant is not None:
            counted.add(tenant.name)
            _workload_demand(policy, workload, tenant.name, tally)
    return counted


def _pod_groups_demand(
    policy: TenantPolicy, snapshot: ClusterSnapshot, tally: _Tally, counted: set[str]
) -> set[str]:
    """Tally the live PodGroups of tenants not `counted` yet; the tenants that have any."""
    with_groups: set[str] = set()
    for group in snapshot.pod_groups:
        if group.phase == "Completed":
            continue
        tenant = _tenant_of(policy, group.namespace, group.queue)
        if tenant is not None and tenant.name not in counted:
            with_groups.add(tenant.name)
            _pod_group_demand(policy, group, tenant.name, tally)
    return with_groups


def _pods_demand(
    policy: TenantPolicy, snapshot: ClusterSnapshot, tally: _Tally, counted: set[str]
) -> None:
    """Tally the active pods of tenants not `counted` yet, by the class of each resource."""
    nodes = {node.name: node for node in snapshot.nodes}
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


@dataclass(frozen=True, slots=True)
class DemandSmoother:
    """Smoothed demand that rises at once and falls slowly: state in, state out.

    For each tenant and class, with observed demand o = usage + pending and the previous
    smoothed level s, after dt seconds (o net of idle units discounted, `ClassDemand.total`):

        s' = o                                   when o >= s   (rise at once)
        s' = o + (s - o) * exp(-3 * dt / W)      otherwise     (W = demandWindow)

    so an excess over the current demand decays to 5 % within one demand window. The
    smoothed pending demand is round(s') - usage (half up), never below what is pending now;
    a smoothed level below usage + pending keeps the rest as `discounted`.
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
                # what is still discounted once the smoothed level is reached
                discounted = max(0, row.usage + pending - rounded)
                smoothed.setdefault(key[0], {})[key[1]] = ClassDemand(
                    row.usage, pending, discounted
                )
        return DemandSmoother(self.window, now, levels), smoothed
