"""The arms of a simulation: how each runs the same cluster, side by side.

* **none** — no quotaguard. Pods ask for what their authors wrote (whole `nvidia.com/gpu`,
  nothing rewritten, nothing denied); every tenant has the same Kueue queue with nominal
  quota = its guarantee and borrowing up to its max. Guarantees of classes no written pod
  asks for (MIG slices, shared GPUs) are counted in whole GPUs and given as quota of the first
  class that offers `nvidia.com/gpu`, as a platform without the webhook would have to.
* **static** — the webhook rewrites; quotas set by hand once, from the policy alone (the
  command line's `--static` baseline, `guarantees` by default: nominal = guarantee,
  borrowing up to max, Kueue's default lending; capacity above the guarantees is in no
  queue).
* **pool** — the same guarantees, never lent, and the rest of the distributable capacity as
  quota of the cohort itself (a Kueue Cohort with resourceGroups) that any queue borrows up to
  its max: the most a hand-written configuration can do with the policy's numbers.
* **dynamic** — every `rebalance.interval` the quota controller's planning cycle
  (`quotaguard.planning.cycle`: the same demand smoothing, usage-decayed weights held within
  the controller's default `WEIGHT_HOLD_FRACTION`, and planner as in the cluster; run by
  `arm_controller.ArmController`) rewrites every queue's quotas and weights, as `mode: apply`
  would.
* **geometry** — dynamic quotas, and the nodes of the policy's `geometry.pools` change MIG
  layout as the layout planner chooses, each change serving nothing for `reconfigureTime`
  (`geometry_arm.py`); without `geometry:` it is the dynamic arm.

An arm is one `Arm` in `ARMS`: the queues it starts with, the widest quotas it can ever
have, what its pods ask for, and, where quotas move, the `QuotaStep` that moves them (the one
place a quota plan is made while an arm runs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from quotaguard.policy.model import Tenant, TenantPolicy
from quotaguard.quota.class_capacity import ClassCapacity
from quotaguard.quota.quota_planner import plan, quota_of
from quotaguard.simulate.arm_controller import ArmController, cohort_resources, planned_cohort
from quotaguard.simulate.arrivals import Arrival, Verdict
from quotaguard.simulate.cohort import CohortConfig, QueueConfig, Quota, most_admissible
from quotaguard.simulate.geometry_arm import widest_capacity
from quotaguard.simulate.placement import Cluster
from quotaguard.simulate.preemption import PRESETS, Preemption
from quotaguard.simulate.queueing import QueueModel
from quotaguard.simulate.setup import Setup, StaticBaseline

Requests = Literal["admitted", "written"]  # what the arm's pods ask for
WHOLE_GPU = "nvidia.com/gpu"


class QuotaStep(Protocol):
    """What re-plans an arm's queues every interval: the quota controller's one seam."""

    runs: int

    def tick(self, model: QueueModel, now: float) -> CohortConfig | None:
        """The queues to write now, or None when they stay as they are."""
        ...


@dataclass(frozen=True, slots=True)
class Arm:
    name: str
    summary: str  # one line for the report's header
    requests: Requests
    queues: Callable[[Setup], CohortConfig]  # the queues it starts with
    bounds: Callable[[Setup], CohortConfig]  # the widest quotas it can ever have
    # what re-plans it every interval, given the arm's own nodes (a layout step changes them)
    controller: Callable[[Setup, Cluster], QuotaStep] | None = None

    def verdict(self, arrival: Arrival) -> Verdict:
        return arrival.written if self.requests == "written" else arrival.verdict


def static_cohort(
    policy: TenantPolicy,
    capacity: Mapping[str, ClassCapacity],
    baseline: StaticBaseline = "guarantees",
    preemption: Preemption = PRESETS["never"],
) -> CohortConfig:
    """Hand-set quotas from the policy alone (see the module docstring)."""
    queues = []
    guaranteed: dict[str, int] = {}
    for tenant in sorted(policy.spec.tenants, key=lambda t: t.name):
        quotas = {}
        for gpu_class in policy.spec.gpu_classes:
            quota = quota_of(tenant, gpu_class.name)
            if quota is None:
                continue
            own = quota.guaranteed if quota.max is None else min(quota.guaranteed, quota.max)
            guaranteed[gpu_class.name] = guaranteed.get(gpu_class.name, 0) + own
            quotas[gpu_class.name] = Quota(
                nominal=own,
                borrowing_limit=None if quota.max is None else quota.max - own,
                lending_limit=0 if baseline == "pool" else None,
            )
        queues.append(tenant_queue(tenant, quotas, preemption))
    pool = {}
    if baseline == "pool":
        pool = {
            name: max(0, row.distributable - guaranteed.get(name, 0))
            for name, row in capacity.items()
        }
    return CohortConfig(tuple(queues), cohort_resources(policy), pool)


def tenant_queue(
    tenant: Tenant, quotas: Mapping[str, Quota], preemption: Preemption
) -> QueueConfig:
    """A tenant's ClusterQueue as quotaguard writes it: its weight, and its
    `flavorFungibility.whenCanBorrow`."""
    fungibility = tenant.flavor_fungibility
    return QueueConfig(
        tenant.name,
        quotas,
        weight=tenant.weight,
        preemption=preemption,
        borrow_next=fungibility is not None and fungibility.borrow_next,
    )


def whole_gpu_class(policy: TenantPolicy) -> str | None:
    """The first class that offers whole `nvidia.com/gpu` (what a written pod lands on)."""
    for gpu_class in policy.spec.gpu_classes:
        if gpu_class.resource == WHOLE_GPU and not gpu_class.shared:
            return gpu_class.name
    return None


def none_cohort(policy: TenantPolicy, preemption: Preemption = PRESETS["never"]) -> CohortConfig:
    """The same queues without quotaguard (see the module docstring)."""
    base = static_cohort(policy, {}, "guarantees", preemption)
    whole = whole_gpu_class(policy)
    if whole is None:
        return base
    classes = policy.classes_by_name
    queues = []
    for queue in base.queues:
        tenant = policy.tenants_by_name.get(queue.name)
        extra_nominal, extra_max, bounded = 0.0, 0.0, True
        for name, quota in queue.quotas.items():
            gpu_class = classes[name]
            if gpu_class.resource == WHOLE_GPU and not gpu_class.shared:
                continue
            equivalent = float(gpu_class.gpu_equivalent)
            extra_nominal += quota.nominal * equivalent
            written = quota_of(tenant, name) if tenant is not None else None
            if written is None or written.max is None:
                bounded = False
            else:
                extra_max += written.max * equivalent
        quotas = dict(queue.quotas)
        have = quotas.get(whole, Quota(0, 0))
        nominal = have.nominal + round(extra_nominal)
        ceiling = None
        if bounded and have.borrowing_limit is not None:
            ceiling = have.nominal + have.borrowing_limit + round(extra_max)
        quotas[whole] = Quota(
            nominal=nominal,
            borrowing_limit=None if ceiling is None else max(0, ceiling - nominal),
        )
        queues.append(QueueConfig(queue.name, quotas, weight=queue.weight, preemption=preemption))
    return CohortConfig(tuple(queues), base.resources, base.pool)


def dynamic_bounds(policy: TenantPolicy, capacity: Mapping[str, ClassCapacity]) -> CohortConfig:
    """The widest quotas the controller can give each queue, as one configuration: whatever
    it plans, a queue keeps its guarantee (scaled to capacity) and never lends it, may grow to
    its max, and the nominal quotas of a class add up to no more than its distributable
    capacity. So a queue can hold at most its guarantee plus the distributable capacity above
    every guarantee (here: the cohort's pool), up to its max."""
    queues = []
    guaranteed: dict[str, int] = {}
    for tenant in plan(policy, capacity, {}).tenants:
        quotas = {}
        for row in tenant.classes:
            guaranteed[row.class_name] = guaranteed.get(row.class_name, 0) + row.guaranteed
            quotas[row.class_name] = Quota(
                nominal=row.guaranteed,
                borrowing_limit=None if row.max is None else max(0, row.max - row.guaranteed),
                lending_limit=0,
            )
        queues.append(QueueConfig(tenant.name, quotas, weight=tenant.weight))
    pool = {
        name: max(0, row.distributable - guaranteed.get(name, 0)) for name, row in capacity.items()
    }
    return CohortConfig(tuple(queues), cohort_resources(policy), pool)


ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm(
            "none",
            "no quotaguard: pods as written (whole GPUs), queues at nominal = guarantee",
            "written",
            queues=lambda s: none_cohort(s.policy, s.preemption),
            bounds=lambda s: none_cohort(s.policy),
        ),
        Arm(
            "static",
            "rewritten pods, quotas set by hand once from the policy",
            "admitted",
            queues=lambda s: static_cohort(s.policy, s.capacity, s.static_baseline, s.preemption),
            bounds=lambda s: static_cohort(s.policy, s.capacity, s.static_baseline),
        ),
        Arm(
            "pool",
            "rewritten pods, guarantees never lent, the rest a cohort pool up to each max",
            "admitted",
            queues=lambda s: static_cohort(s.policy, s.capacity, "pool", s.preemption),
            bounds=lambda s: static_cohort(s.policy, s.capacity, "pool"),
        ),
        Arm(
            "dynamic",
            "rewritten pods, the quota controller re-plans every interval",
            "admitted",
            queues=lambda s: planned_cohort(s.policy, plan(s.policy, s.capacity, {}), s.preemption),
            bounds=lambda s: dynamic_bounds(s.policy, s.capacity),
            controller=lambda s, nodes: ArmController(s, nodes, s.preemption),
        ),
        Arm(
            "geometry",
            "rewritten pods, the quota controller re-plans and the layout planner moves MIG "
            "layouts every interval",
            "admitted",
            queues=lambda s: planned_cohort(s.policy, plan(s.policy, s.capacity, {}), s.preemption),
            bounds=lambda s: dynamic_bounds(s.policy, widest_capacity(s)),
            controller=lambda s, nodes: ArmController(s, nodes, s.preemption, layouts=True),
        ),
    )
}


def reachable(bounds: CohortConfig, shared: Setup, tenant: str, class_name: str) -> float:
    """The most units of a class a tenant's queue could ever be admitted with: what the
    widest quotas allow and what the cluster offers."""
    return min(most_admissible(bounds, tenant, class_name), shared.units.get(class_name, 0))


def never_fits(shared: Setup, arm: Arm, bounds: CohortConfig, arrival: Arrival) -> bool:
    """A queued workload no option of which its queue could ever be admitted with in the arm,
    or could ever be placed on the empty cluster: it waits for ever (and the controller
    counts it as demand); waiting times leave it out."""
    if arrival.tenant is None:
        return False
    verdict = arm.verdict(arrival)
    if verdict.unknown or not verdict.options:
        return True
    for request, gang in zip(verdict.options, verdict.gangs, strict=True):
        if all(
            units <= reachable(bounds, shared, arrival.tenant, name) for name, units in request
        ) and shared.empty.placeable(gang):
            return False
    return True
