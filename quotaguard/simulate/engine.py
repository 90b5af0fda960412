"""The discrete-event simulation: arrivals, completions and quota-controller ticks on one clock.

Two arms replay the same admitted arrivals against the same cluster:

* **static** — quotas set by hand once, from the policy alone. Baseline `guarantees` (the
  default, as the command line contract defines the static arm): each queue's nominal quota
  is its guarantee and its borrowing limit is max - guarantee, with Kueue's default lending
  (a queue lends all its unused nominal quota); capacity above the sum of guarantees belongs
  to no queue, so nobody can use it. Baseline `pool`: the same guarantees, never lent, and
  the rest of the distributable capacity as quota of the cohort itself (a Kueue Cohort with
  resourceGroups), which any queue may borrow up to its max: the most a hand-written
  configuration can do with the policy's numbers.
* **dynamic** — every `rebalance.interval` of simulated time the quota controller's own
  planner (`quotaguard.quota.planner.plan`, fed by the same demand smoothing and usage-decayed
  weights as in the cluster) rewrites every queue's nominal quota, borrowing and lending limits
  and fair-share weight, as `mode: apply` would.

Both arms (and the reference) run with the same preemption setting on every queue (see
`preemption.py`); an evicted workload is requeued and, admitted again, runs from its last
checkpoint (`checkpointEvery` in the trace) or, without checkpoints, its full duration again.

Event order at one instant: completions, then arrivals, then the controller tick, then one
admission pass. The run stops at the trace's end; workloads still waiting then are reported
with the wait they had so far.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.capacity import ClassCapacity, class_capacity
from quotaguard.quota.demand import ClassDemand, DemandSmoother
from quotaguard.quota.planner import Plan, plan, quota_of
from quotaguard.quota.weights import UsageHistory, fair_share_weights, usage_in_gpus
from quotaguard.simulate.arrivals import Arrival
from quotaguard.simulate.preemption import PRESETS, SAMPLE_PRESET, Preemption
from quotaguard.simulate.queueing import (
    CohortConfig,
    QueueConfig,
    QueuedWorkload,
    QueueModel,
    Quota,
    most_admissible,
)
from quotaguard.simulate.trace import Trace

ArmName = Literal["static", "dynamic"]
StaticBaseline = Literal["guarantees", "pool"]
Progress = Callable[[float], None]


@dataclass(frozen=True)
class Setup:
    """What both arms share: the policy, the cluster, the admitted arrivals and the clock."""

    policy: TenantPolicy
    arrivals: tuple[Arrival, ...]
    capacity: Mapping[str, ClassCapacity]
    horizon: float
    interval: float
    static_baseline: StaticBaseline = "guarantees"
    preemption: Preemption = PRESETS[SAMPLE_PRESET]

    @cached_property
    def units(self) -> dict[str, int]:
        """Class units tenants can be given on the cluster (capacity minus what others hold)."""
        return {name: max(0, c.capacity - c.held_outside) for name, c in self.capacity.items()}

    @cached_property
    def capacity_gpus(self) -> float:
        classes = self.policy.classes_by_name
        return sum(
            c.capacity * float(classes[name].gpu_equivalent)
            for name, c in self.capacity.items()
            if name in classes
        )

    @cached_property
    def _bounds(self) -> dict[ArmName, CohortConfig]:
        return {
            "static": static_cohort(self.policy, self.capacity, self.static_baseline),
            "dynamic": dynamic_bounds(self.policy, self.capacity),
        }

    def reachable(self, arm: ArmName, tenant: str, class_name: str) -> float:
        """The most units of a class a tenant's queue could ever be admitted with in an arm:
        what its quotas allow (`most_admissible`; for the dynamic arm, the widest quotas the
        controller can write) and what the cluster offers."""
        return min(
            most_admissible(self._bounds[arm], tenant, class_name),
            self.units.get(class_name, 0),
        )

    def never_fits(self, arrival: Arrival, arm: ArmName) -> bool:
        """A queued workload bigger than its queue could ever be admitted with in that arm:
        Kueue keeps it pending for ever (and the controller counts it as demand); waiting
        times leave it out."""
        if arrival.tenant is None:
            return False
        if arrival.verdict.unknown:
            return True
        return any(
            units > self.reachable(arm, arrival.tenant, name)
            for name, units in arrival.verdict.request
        )

    def queued(self, arrival: Arrival) -> bool:
        """Whether the arrival enters a tenant's queue: allowed, owned, and asking for GPUs."""
        return (
            arrival.tenant is not None and arrival.verdict.allowed and bool(arrival.verdict.request)
        )


def setup(
    policy: TenantPolicy,
    trace: Trace,
    arrivals: Sequence[Arrival],
    *,
    static_baseline: StaticBaseline = "guarantees",
    preemption: Preemption = PRESETS[SAMPLE_PRESET],
) -> Setup:
    return Setup(
        policy=policy,
        arrivals=tuple(arrivals),
        capacity=class_capacity(policy, trace.nodes, trace.pods),
        horizon=trace.end,
        interval=policy.spec.rebalance.interval,
        static_baseline=static_baseline,
        preemption=preemption,
    )


def _resources(policy: TenantPolicy) -> dict[str, str]:
    return {gpu_class.name: gpu_class.resource for gpu_class in policy.spec.gpu_classes}


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
        queues.append(QueueConfig(tenant.name, quotas, weight=tenant.weight, preemption=preemption))
    pool = {}
    if baseline == "pool":
        pool = {
            name: max(0, row.distributable - guaranteed.get(name, 0))
            for name, row in capacity.items()
        }
    return CohortConfig(tuple(queues), _resources(policy), pool)


def planned_cohort(
    policy: TenantPolicy, targets: Plan, preemption: Preemption = PRESETS["never"]
) -> CohortConfig:
    """The queues as the controller writes them from a plan (it leaves `preemption` alone)."""
    queues = tuple(
        QueueConfig(
            tenant.name,
            {
                row.class_name: Quota(row.nominal, row.borrowing_limit, row.lending_limit)
                for row in tenant.classes
            },
            weight=tenant.weight,
            preemption=preemption,
        )
        for tenant in targets.tenants
    )
    return CohortConfig(queues, _resources(policy))


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
    return CohortConfig(tuple(queues), _resources(policy), pool)


@dataclass
class Series:
    """Samples every interval, for charts."""

    times: list[float] = field(default_factory=list)
    capacity: list[float] = field(default_factory=list)  # whole-GPU equivalents
    allocated: dict[str, list[float]] = field(default_factory=dict)  # tenant -> GPU equivalents
    pending: dict[str, list[int]] = field(default_factory=dict)  # tenant -> workloads waiting
    nominal: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # tenant -> class
    usage: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # tenant -> class
    waiting_units: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    weight: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class ArmRun:
    name: ArmName
    # arrival id -> when its last admission was (absent: denied, not queued, or still waiting
    # at the end); with preemption, earlier runs were thrown away
    admitted_at: dict[int, float]
    series: Series
    plans: int = 0
    preempted: dict[int, int] = field(default_factory=dict)  # arrival id -> times evicted
    lost: dict[int, float] = field(default_factory=dict)  # arrival id -> GPU-seconds thrown away
    # arrival id -> seconds of work kept from evicted runs (checkpoints): the last run is
    # that much shorter than the workload's duration
    kept: dict[int, float] = field(default_factory=dict)


class _Controller:
    """The quota controller of the dynamic arm: demand smoothing, usage history, plan."""

    def __init__(
        self,
        policy: TenantPolicy,
        capacity: Mapping[str, ClassCapacity],
        preemption: Preemption,
    ) -> None:
        rebalance = policy.spec.rebalance
        self.policy = policy
        self.preemption = preemption
        self.capacity = capacity
        self.smoother = DemandSmoother(rebalance.demand_window)
        self.history = UsageHistory()
        self.previous: Plan | None = None
        self.runs = 0
        self.computed = 0
        self._inputs: tuple[object, ...] | None = None

    def tick(self, model: QueueModel, now: float) -> CohortConfig | None:
        """One controller pass; the queues to write, or None when they stay as they are."""
        demand: dict[str, dict[str, ClassDemand]] = {}
        for tenant in model.queue_names():
            usage, pending = model.usage(tenant), model.pending_units(tenant)
            rows = {
                name: ClassDemand(usage.get(name, 0), pending.get(name, 0))
                for name in usage.keys() | pending.keys()
                if usage.get(name, 0) or pending.get(name, 0)
            }
            if rows:
                demand[tenant] = rows
        rebalance = self.policy.spec.rebalance
        self.smoother, smoothed = self.smoother.observe(demand, now)
        self.history = self.history.record(
            usage_in_gpus(self.policy, demand), now, rebalance.usage_half_life
        )
        weights = fair_share_weights(self.policy, self.history)
        self.runs += 1
        # The plan is a function of these inputs alone: when they repeat (a quiet cluster),
        # so does the plan, and the planner need not run again.
        inputs = (
            tuple(
                (tenant, name, row.usage, row.pending)
                for tenant, rows in sorted(smoothed.items())
                for name, row in sorted(rows.items())
            ),
            tuple(sorted(weights.items())),
            _nominals(self.previous),
        )
        if inputs == self._inputs:
            return None
        targets = plan(
            self.policy, self.capacity, smoothed, weights=weights, previous=self.previous
        )
        self.computed += 1
        self.previous = targets
        self._inputs = (inputs[0], inputs[1], _nominals(targets))
        queues = planned_cohort(self.policy, targets, self.preemption)
        return None if queues == model.cohort else queues


def _nominals(targets: Plan | None) -> tuple[tuple[str, str, int], ...]:
    if targets is None:
        return ()
    return tuple(
        (tenant.name, row.class_name, row.nominal)
        for tenant in targets.tenants
        for row in tenant.classes
    )


def _sample(
    series: Series, model: QueueModel, now: float, capacity_gpus: float, gpus: Mapping[str, float]
) -> None:
    series.times.append(now)
    series.capacity.append(capacity_gpus)
    weights = {queue.name: queue.weight for queue in model.cohort.queues}
    quotas = {queue.name: queue.quotas for queue in model.cohort.queues}
    for tenant in model.queue_names():
        series.allocated.setdefault(tenant, []).append(gpus.get(tenant, 0.0))
        series.pending.setdefault(tenant, []).append(model.pending_count(tenant))
        series.weight.setdefault(tenant, []).append(weights.get(tenant, 0.0))
        nominal = series.nominal.setdefault(tenant, {})
        usage = series.usage.setdefault(tenant, {})
        waiting = series.waiting_units.setdefault(tenant, {})
        used, pending = model.usage(tenant), model.pending_units(tenant)
        for name, quota in quotas.get(tenant, {}).items():
            nominal.setdefault(name, []).append(quota.nominal)
            usage.setdefault(name, []).append(used.get(name, 0))
            waiting.setdefault(name, []).append(pending.get(name, 0))


def run_arm(shared: Setup, arm: ArmName, *, progress: Progress | None = None) -> ArmRun:
    """Replay the arrivals against one arm's quotas; deterministic."""
    policy, preemption = shared.policy, shared.preemption
    controller = None
    if arm == "dynamic":
        controller = _Controller(policy, shared.capacity, preemption)
        cohort = planned_cohort(policy, plan(policy, shared.capacity, {}), preemption)
    else:
        cohort = static_cohort(policy, shared.capacity, shared.static_baseline, preemption)
    model = QueueModel(cohort, shared.units)
    queued = [a for a in shared.arrivals if shared.queued(a) and a.at < shared.horizon]
    by_id = {a.id: a for a in queued}
    capacity_gpus = shared.capacity_gpus
    allocated: dict[str, float] = {}
    admitted_at: dict[int, float] = {}
    preempted: dict[int, int] = {}
    lost: dict[int, float] = {}
    kept: dict[int, float] = {}
    series = Series()
    # (end, id, workload, start): an entry whose start is no longer the workload's is stale
    completions: list[tuple[float, int, QueuedWorkload, float]] = []
    horizon, interval = shared.horizon, shared.interval
    next_tick, position, reported = 0.0, 0, -1
    while True:
        candidates = [next_tick]
        if position < len(queued):
            candidates.append(queued[position].at)
        if completions:
            candidates.append(completions[0][0])
        now = min(candidates)
        if now >= horizon:
            break
        while completions and completions[0][0] <= now:
            _, _, done, started = heapq.heappop(completions)
            if done.admitted_at != started:
                continue  # preempted since
            model.finish(done)
            tenant = done.queue
            allocated[tenant] -= by_id[done.id].verdict.gpus
        while position < len(queued) and queued[position].at <= now:
            arrival = queued[position]
            assert arrival.tenant is not None
            model.submit(
                QueuedWorkload(
                    arrival.id,
                    arrival.tenant,
                    arrival.verdict.request,
                    arrival.at,
                    priority=arrival.priority,
                )
            )
            position += 1
        ticking = next_tick <= now
        if ticking and controller is not None:
            queues = controller.tick(model, now)
            if queues is not None:
                model.configure(queues)
        admitted = model.admit(now)
        for workload in admitted:
            gpus = by_id[workload.id].verdict.gpus
            allocated[workload.queue] = allocated.get(workload.queue, 0.0) + gpus
        for eviction in model.evictions():
            victim = eviction.workload
            gpus = by_id[victim.id].verdict.gpus
            allocated[victim.queue] -= gpus
            preempted[victim.id] = preempted.get(victim.id, 0) + 1
            ran = eviction.at - eviction.started
            saved = by_id[victim.id].kept_of(ran)
            kept[victim.id] = kept.get(victim.id, 0.0) + saved
            lost[victim.id] = lost.get(victim.id, 0.0) + gpus * (ran - saved)
            admitted_at.pop(victim.id, None)
        for workload in admitted:
            # a workload admitted and preempted within one pass is pending again
            if workload.admitted_at == now and workload.id not in admitted_at:
                admitted_at[workload.id] = now
                end = now + by_id[workload.id].duration - kept.get(workload.id, 0.0)
                heapq.heappush(completions, (end, workload.id, workload, now))
        if ticking:
            _sample(series, model, now, capacity_gpus, allocated)
            next_tick += interval
            if progress is not None:
                done_percent = int(100 * now / horizon)
                if done_percent != reported:
                    reported = done_percent
                    progress(now / horizon)
    if progress is not None:
        progress(1.0)
    return ArmRun(
        arm,
        admitted_at,
        series,
        plans=controller.runs if controller else 0,
        preempted=preempted,
        lost=lost,
        kept=kept,
    )
