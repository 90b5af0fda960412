"""The two ways a fleet's workers get their ClusterQueue quotas in `simulate`.

* **static** — each tenant's fleet quota (as the fleet planner sets it with no demand: its
  guarantee, then the capacity nobody is guaranteed by weight up to each max, so every GPU is
  in some queue) split over the workers once and never moved: the per-cluster guarantees of
  `spec.fleet` first, the rest in proportion to each worker's capacity of the class; the fleet
  max split the same way (never below the worker's nominal, never above a per-cluster max).
  Nominal = the quota's part, borrowing up to the max's part, Kueue's default lending: what an
  administrator writes by hand once.
* **planned** — the fleet planner (`planning.fleet_split.split_fleet`, the core of the fleet
  controller's `plan_fleet`) every `rebalance.interval`, from each worker's capacity, what it
  admitted and the quotas it holds, and what waits on the manager; a worker whose API server is
  down keeps its quotas and leaves the fleet's capacity. Only `nominalQuota` moves, as the fleet
  controller patches only it: the borrowing limits stay the static ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from quotaguard.planning.fleet_split import NO_FLEET, TenantUnits, WorkerState, split_fleet
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.fill import apportion
from quotaguard.quota.quota_planner import quota_of
from quotaguard.simulate.arm_controller import cohort_resources
from quotaguard.simulate.arms import tenant_queue
from quotaguard.simulate.cohort import CohortConfig, Quota
from quotaguard.simulate.preemption import Preemption

# cluster -> tenant -> class -> (nominal, ceiling: nominal + borrowing limit, None unbounded)
Split = Mapping[str, Mapping[str, Mapping[str, tuple[int, int | None]]]]


def _class_split(
    policy: TenantPolicy,
    tenant: str,
    class_name: str,
    capacity: Mapping[str, Mapping[str, int]],
    total: int,
) -> dict[str, tuple[int, int | None]]:
    """One tenant's (nominal, ceiling) of one class on each worker (see the module docstring)."""
    quota = quota_of(policy.tenants_by_name[tenant], class_name)
    assert quota is not None
    fleet = policy.spec.fleet or NO_FLEET
    names = list(capacity)
    terms = [fleet.cluster_quota(name, tenant, class_name) for name in names]
    floors = apportion(total, [term.guaranteed if term else 0 for term in terms])
    floors = [
        min(floor, term.guaranteed) if term else 0
        for floor, term in zip(floors, terms, strict=True)
    ]
    rooms = [capacity[name].get(class_name, 0) for name in names]
    shares = apportion(max(0, total - sum(floors)), rooms)
    ceilings: list[int | None] = [None] * len(names)
    if quota.max is not None:
        ceilings = list(apportion(quota.max, rooms))
    found = {}
    for index, name in enumerate(names):
        nominal = floors[index] + shares[index]
        ceiling = ceilings[index]
        if ceiling is not None:
            ceiling = max(ceiling, nominal)
        term = terms[index]
        cap = term.max if term is not None else None
        if cap is not None:
            nominal = min(nominal, cap)
            ceiling = cap if ceiling is None else min(ceiling, cap)
        found[name] = (nominal, ceiling)
    return found


def static_split(policy: TenantPolicy, capacity: Mapping[str, Mapping[str, int]]) -> Split:
    """Every tenant's (nominal, ceiling) per worker and class; `capacity`: worker -> class ->
    distributable units, in the fleet's order."""
    split: dict[str, dict[str, dict[str, tuple[int, int | None]]]] = {c: {} for c in capacity}
    workers = [WorkerState(name, True, capacity=units) for name, units in capacity.items()]
    totals = {
        (row.tenant, row.class_name): row.total for row in split_fleet(policy, workers, {}).totals
    }
    for tenant in sorted(policy.spec.tenants, key=lambda t: t.name):
        for gpu_class in policy.spec.gpu_classes:
            if quota_of(tenant, gpu_class.name) is None:
                continue
            total = totals.get((tenant.name, gpu_class.name), 0)
            for cluster, terms in _class_split(
                policy, tenant.name, gpu_class.name, capacity, total
            ).items():
                split[cluster].setdefault(tenant.name, {})[gpu_class.name] = terms
    return split


def worker_cohort(
    policy: TenantPolicy,
    split: Mapping[str, Mapping[str, tuple[int, int | None]]],
    preemption: Preemption,
    nominal: TenantUnits | None = None,
) -> CohortConfig:
    """One worker's queues: the static split, or `nominal` quotas planned over its ceilings."""
    queues = []
    for tenant in sorted(policy.spec.tenants, key=lambda t: t.name):
        quotas = {}
        for class_name, (static, ceiling) in split.get(tenant.name, {}).items():
            own = static if nominal is None else nominal.get(tenant.name, {}).get(class_name, 0)
            quotas[class_name] = Quota(
                nominal=own,
                borrowing_limit=None if ceiling is None else max(0, ceiling - own),
            )
        queues.append(tenant_queue(tenant, quotas, preemption))
    return CohortConfig(tuple(queues), cohort_resources(policy))


def nominal_quotas(cohort: CohortConfig) -> dict[str, dict[str, int]]:
    """Tenant -> class -> the nominal quota a worker's queues hold."""
    return {
        queue.name: {name: quota.nominal for name, quota in queue.quotas.items()}
        for queue in cohort.queues
    }


def planned_quotas(
    policy: TenantPolicy, workers: Sequence[WorkerState], pending: TenantUnits
) -> Mapping[str, TenantUnits]:
    """Worker -> tenant -> class -> the nominal quota the fleet planner gives it (an
    unreachable worker: the quotas it keeps)."""
    return split_fleet(policy, workers, pending).workers
