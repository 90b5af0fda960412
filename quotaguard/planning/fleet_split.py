"""Tenants' quotas across a MultiKueue fleet: the pure core of the fleet planner.

For each GPU class, out of the fleet's capacity F (the sum over the workers that answered):

1. Each tenant's fleet total: its fleet guarantee first (scaled to F x g / G when the
   guarantees G are more than F), then its demand (pending on the manager + admitted on the
   workers) by weighted water-filling up to its max, then what nobody demands, up to each max,
   so that it is lendable quota rather than idle.
2. Each total split over the workers: per-cluster guarantees first, then where the tenant's
   admitted work runs, then the workers with the most room left; never over a worker's
   capacity, never over a tenant's per-cluster max. The guaranteed parts of every tenant are
   placed before anything above a guarantee.
3. The manager's quota of a tenant and class is the sum of the workers' that answered.

A worker that does not answer keeps the quotas it has (nothing is written to it), its capacity
leaves F, and the fleet's guarantees are placed on the others.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from quotaguard.policy.fleet import Fleet
from quotaguard.policy.model import ClassQuota, Tenant, TenantPolicy
from quotaguard.quota.fill import apportion, water_fill
from quotaguard.quota.quota_planner import quota_of

# tenant name -> class name -> units
TenantUnits = Mapping[str, Mapping[str, int]]
NO_FLEET = Fleet()


@dataclass(frozen=True, slots=True)
class WorkerState:
    """One worker cluster as the fleet planner sees it."""

    name: str
    reachable: bool
    capacity: Mapping[str, int] = field(default_factory=dict)  # class -> distributable units
    usage: TenantUnits = field(default_factory=dict)  # admitted on this worker
    quotas: TenantUnits = field(default_factory=dict)  # the nominal quotas it holds now
    reason: str = ""  # why it is unreachable


@dataclass(frozen=True, slots=True)
class TenantTotal:
    """One tenant's fleet figures for one class."""

    tenant: str
    class_name: str
    guaranteed: int  # after scaling to the fleet's capacity
    max: int | None
    demand: int  # pending on the manager + admitted on the workers that answered
    total: int  # the fleet quota planned
    placed: int  # of it, what the workers could take


@dataclass(frozen=True, slots=True)
class FleetSplit:
    capacity: Mapping[str, int]  # class -> the fleet's capacity (workers that answered)
    totals: tuple[TenantTotal, ...]
    workers: Mapping[str, TenantUnits]  # cluster -> planned (or, unreachable, kept) quotas
    manager: TenantUnits  # the sum over the workers that answered
    unreachable: Mapping[str, str]  # cluster -> why
    problems: tuple[str, ...] = ()


@dataclass(slots=True)
class _Class:
    """The placement of one class: room left per worker, quotas placed so far."""

    name: str
    room: dict[str, int]
    caps: dict[tuple[str, str], int | None]  # (tenant, cluster) -> per-cluster max
    placed: dict[tuple[str, str], int] = field(default_factory=dict)

    def take(self, tenant: str, cluster: str, wanted: int) -> int:
        """Place up to `wanted` of the tenant on the cluster; what was placed."""
        cap = self.caps.get((tenant, cluster))
        held = self.placed.get((tenant, cluster), 0)
        limit = self.room[cluster] if cap is None else min(self.room[cluster], cap - held)
        amount = max(0, min(wanted, limit))
        if amount:
            self.room[cluster] -= amount
            self.placed[(tenant, cluster)] = held + amount
        return amount


def _fleet_totals(
    guaranteed: Sequence[int],
    maxima: Sequence[int | None],
    demand: Sequence[int],
    weights: Sequence[float],
    capacity: int,
) -> tuple[list[int], list[int]]:
    """(guarantees scaled to the capacity, fleet totals) of the tenants of one class."""
    if sum(guaranteed) > capacity:
        guaranteed = apportion(capacity, guaranteed)
    caps = [capacity if m is None else m for m in maxima]
    floors = [min(g, c) for g, c in zip(guaranteed, caps, strict=True)]
    wanted = [max(f, min(d, c)) for f, d, c in zip(floors, demand, caps, strict=True)]
    totals = water_fill(floors, wanted, weights, capacity)
    if sum(totals) < capacity:
        totals = water_fill(totals, caps, weights, capacity)
    return floors, totals


def _cluster_terms(
    fleet: Fleet, tenant: str, class_name: str, cluster: str
) -> tuple[int, int | None]:
    found = fleet.cluster_quota(cluster, tenant, class_name)
    return (0, None) if found is None else (found.guaranteed, found.max)


def _spread(work: _Class, tenant: str, amount: int, order: Sequence[str]) -> int:
    """Place `amount` on the clusters in `order`, each as much as it takes; what is left."""
    for cluster in order:
        if amount <= 0:
            break
        amount -= work.take(tenant, cluster, amount)
    return amount


def _place_all(
    work: _Class,
    totals: Mapping[str, tuple[int, int]],
    cluster_floors: Mapping[str, Mapping[str, int]],
    usage: Mapping[str, Mapping[str, int]],
) -> dict[str, int]:
    """Place every tenant's (guaranteed part, total); what found no room, per tenant.

    In passes over all tenants: per-cluster guarantees, then each tenant's admitted work where
    it runs, then the rest of the guarantees, then what is above them, each on the clusters
    with the most room left. Without per-cluster ceilings everything fits, as the totals add
    up to at most the room."""
    left = {tenant: total for tenant, (_, total) in totals.items()}

    def put(tenant: str, cluster: str, upto: int) -> None:
        held = work.placed.get((tenant, cluster), 0)
        left[tenant] -= work.take(tenant, cluster, min(left[tenant], upto - held))

    for tenant, floors in cluster_floors.items():
        for cluster, floor in sorted(floors.items()):
            put(tenant, cluster, min(floor, totals[tenant][0]))
    for tenant, used in usage.items():
        for cluster, amount in sorted(used.items()):
            put(tenant, cluster, amount)
    for above_guarantee in (False, True):
        for tenant, (guaranteed, total) in totals.items():
            placed = total - left[tenant]
            wanted = total - placed if above_guarantee else max(0, guaranteed - placed)
            by_room = sorted(work.room, key=lambda cluster: (-work.room[cluster], cluster))
            unplaced = _spread(work, tenant, wanted, by_room)
            left[tenant] -= wanted - unplaced
    return left


def _members(policy: TenantPolicy, class_name: str) -> list[tuple[Tenant, ClassQuota]]:
    """The tenants that may use the class, by name, with their fleet quota of it."""
    return [
        (tenant, quota)
        for tenant in sorted(policy.spec.tenants, key=lambda t: t.name)
        if (quota := quota_of(tenant, class_name)) is not None
    ]


def _work(
    policy: TenantPolicy, class_name: str, names: Sequence[str], workers: Sequence[WorkerState]
) -> tuple[_Class, dict[str, dict[str, int]]]:
    """The class's placement, empty, and each tenant's per-cluster guarantees."""
    fleet = policy.spec.fleet or NO_FLEET
    terms = {
        (t, w.name): _cluster_terms(fleet, t, class_name, w.name) for t in names for w in workers
    }
    room = {w.name: w.capacity.get(class_name, 0) for w in workers}
    work = _Class(class_name, room, {key: cap for key, (_, cap) in terms.items()})
    return work, {t: {w.name: terms[(t, w.name)][0] for w in workers} for t in names}


def _split_class(
    policy: TenantPolicy,
    class_name: str,
    workers: Sequence[WorkerState],
    pending: TenantUnits,
) -> tuple[list[TenantTotal], dict[tuple[str, str], int]]:
    members = _members(policy, class_name)
    names = [tenant.name for tenant, _ in members]
    usage = {t: {w.name: w.usage.get(t, {}).get(class_name, 0) for w in workers} for t in names}
    demand = [pending.get(t, {}).get(class_name, 0) + sum(usage[t].values()) for t in names]
    floors, totals = _fleet_totals(
        [quota.guaranteed for _, quota in members],
        [quota.max for _, quota in members],
        demand,
        [tenant.weight for tenant, _ in members],
        sum(w.capacity.get(class_name, 0) for w in workers),
    )
    work, cluster_floors = _work(policy, class_name, names, workers)
    wanted = {t: (min(floors[i], totals[i]), totals[i]) for i, t in enumerate(names)}
    left = _place_all(work, wanted, cluster_floors, usage)
    rows = [
        TenantTotal(
            tenant,
            class_name,
            floors[index],
            members[index][1].max,
            demand[index],
            totals[index],
            totals[index] - left[tenant],
        )
        for index, tenant in enumerate(names)
    ]
    return rows, work.placed


def _short(totals: Sequence[TenantTotal]) -> Iterator[str]:
    for row in totals:
        if row.placed < row.total:
            yield (
                f"{row.total - row.placed} {row.class_name} of {row.tenant}'s fleet quota found "
                "no worker within its per-cluster max"
            )


def _scaled(policy: TenantPolicy, totals: Sequence[TenantTotal]) -> Iterator[str]:
    tenants = policy.tenants_by_name
    for row in totals:
        configured = tenants[row.tenant].quota.get(row.class_name)
        if configured and row.guaranteed < configured.guaranteed:
            yield (
                f"{row.tenant}'s fleet guarantee of {configured.guaranteed} {row.class_name} is "
                f"scaled to {row.guaranteed}: the workers that answered have too few"
            )


def split_fleet(
    policy: TenantPolicy, workers: Sequence[WorkerState], pending: TenantUnits
) -> FleetSplit:
    """Quotas per worker and on the manager, from each worker's capacity and usage and the
    manager's pending demand (`pending`: tenant -> class -> units)."""
    reachable = [w for w in workers if w.reachable]
    planned: dict[str, dict[str, dict[str, int]]] = {w.name: {} for w in reachable}
    manager: dict[str, dict[str, int]] = {}
    totals: list[TenantTotal] = []
    for gpu_class in policy.spec.gpu_classes:
        rows, placed = _split_class(policy, gpu_class.name, reachable, pending)
        totals += rows
        for row in rows:
            for worker in reachable:
                amount = placed.get((row.tenant, worker.name), 0)
                planned[worker.name].setdefault(row.tenant, {})[gpu_class.name] = amount
                sums = manager.setdefault(row.tenant, {})
                sums[gpu_class.name] = sums.get(gpu_class.name, 0) + amount
    kept = {w.name: w.quotas for w in workers if not w.reachable}
    return FleetSplit(
        capacity={
            c.name: sum(w.capacity.get(c.name, 0) for w in reachable)
            for c in policy.spec.gpu_classes
        },
        totals=tuple(totals),
        workers={**planned, **kept},
        manager=manager,
        unreachable={w.name: w.reason for w in workers if not w.reachable},
        problems=(*_scaled(policy, totals), *_short(totals)),
    )
