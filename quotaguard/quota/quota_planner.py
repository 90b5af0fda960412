"""Quota targets per tenant and GPU class: the pure core of the quota controller.

For each class, out of its distributable capacity D, in whole class units:

1. Guarantees first. When D is less than the sum of guarantees G, each guarantee is scaled to
   D x g / G (largest remainder) and the plan reports it.
2. What tenants demand (usage + pending, capped by max) is shared by weighted water-filling:
   tenant t gets clamp(L x weight_t, guarantee_t, min(demand_t, max_t)) for the level L that
   spends D (work-conserving).
3. What nobody demands is still handed out by the same water-filling up to each max, so that
   it shows up as lendable nominal quota instead of lying idle.
4. Against a baseline (the previous recommendation, else what the queue holds now) a quota
   moves only by at least `minChange` and at most max(minChange, maxStepPercent % of the
   baseline), except to restore invariants 1 (sum <= D: increases are held back first, then
   decreases go further) and 2 (guarantee <= nominal <= max).

borrowingLimit = max - nominal (None without max); lendingLimit = nominal - guarantee, plus,
with `rebalance.lendIdleGuarantees`, the part of the guarantee the tenant neither uses nor
waits for (its smoothed demand): lent while idle, reclaimed by preemption when work returns.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from quotaguard.policy.fungibility import preferred_classes
from quotaguard.policy.model import (
    ClassQuota,
    FlavorFungibility,
    GpuClass,
    Rebalance,
    Tenant,
    TenantPolicy,
)
from quotaguard.quota.class_capacity import ClassCapacity
from quotaguard.quota.demand import ClassDemand, Demand
from quotaguard.quota.fill import apportion, water_fill
from quotaguard.quota.queues import QueueState

NO_DEMAND = ClassDemand()
NO_QUOTA = ClassQuota()


class ClassPlan(NamedTuple):
    """One tenant's quota for one class (a tuple: thousands are built per plan)."""

    class_name: str
    resource: str
    flavor: str
    guaranteed: int  # after scaling to capacity
    configured_guarantee: int
    max: int | None
    nominal: int  # what to write, after hysteresis
    target: int  # what the plan aims at before hysteresis
    usage: int
    pending: int
    reason: str
    # guaranteed units nobody of the tenant uses or waits for, lent to the cohort
    # (`rebalance.lendIdleGuarantees`); the tenant reclaims them by preemption
    lent_idle: int = 0

    @property
    def borrowing_limit(self) -> int | None:
        return None if self.max is None else self.max - self.nominal

    @property
    def lending_limit(self) -> int:
        return self.nominal - self.guaranteed + self.lent_idle

    @property
    def over_quota(self) -> bool:
        """Admitted usage above the new nominal: nothing is evicted, it drains as work ends."""
        return self.usage > self.nominal


@dataclass(frozen=True, slots=True)
class TenantPlan:
    name: str
    queue: str
    base_weight: float
    weight: float
    classes: tuple[ClassPlan, ...]
    # the classes the tenant's lists (`to: [h100, a100]`) leave Kueue to pick, in the order
    # its ClusterQueue lists their flavors, and its flavorFungibility (None: Kueue's default)
    flavor_order: tuple[str, ...] = ()
    fungibility: FlavorFungibility | None = None

    def for_class(self, class_name: str) -> ClassPlan | None:
        return next((row for row in self.classes if row.class_name == class_name), None)


@dataclass(frozen=True, slots=True)
class Plan:
    policy: str
    cohort: str
    backend: str
    mode: str
    classes: tuple[ClassCapacity, ...]
    tenants: tuple[TenantPlan, ...]
    # class name -> (ResourceFlavor, resource) for every class of the policy
    flavors: Mapping[str, tuple[str, str]]
    # one line per class whose guarantees had to be scaled down to its capacity
    problems: tuple[str, ...]
    # backend volcano: the parent queue of every tenant queue (the policy's cohort, when set)
    parent: str | None = None

    def tenant(self, name: str) -> TenantPlan | None:
        return next((tenant for tenant in self.tenants if tenant.name == name), None)


def quota_of(tenant: Tenant, class_name: str) -> ClassQuota | None:
    """The tenant's quota for a class; an allowed class without one has no guarantee or max."""
    found = tenant.quota.get(class_name)
    if found is None and tenant.allows(class_name):
        return ClassQuota()
    return found


def step_limit(baseline: int, rebalance: Rebalance) -> int:
    """Largest move of one quota in one interval (at least one unit, so quotas can move)."""
    return max(
        rebalance.min_change, 1, math.floor(baseline * rebalance.max_step_percent / 100 + 1e-9)
    )


@dataclass(frozen=True, slots=True)
class _Members:
    """Who takes part in one class, by tenant name, and their quotas: fixed by the policy."""

    indexes: tuple[int, ...]  # into the policy's tenants sorted by name
    guaranteed: tuple[int, ...]  # capped at max
    caps: tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class _Participation:
    policy: TenantPolicy
    tenants: list[Tenant]  # sorted by name
    by_class: dict[str, _Members]


def _participation(policy: TenantPolicy) -> _Participation:
    """Who takes part in each class: depends on the policy alone (see Planner)."""
    tenants = sorted(policy.spec.tenants, key=lambda t: t.name)
    by_class = {}
    for gpu_class in policy.spec.gpu_classes:
        taking_part = [
            (index, quota)
            for index, tenant in enumerate(tenants)
            if (quota := quota_of(tenant, gpu_class.name)) is not None
        ]
        by_class[gpu_class.name] = _Members(
            tuple(index for index, _ in taking_part),
            tuple(
                q.guaranteed if q.max is None else min(q.guaranteed, q.max) for _, q in taking_part
            ),
            tuple(q.max for _, q in taking_part),
        )
    return _Participation(policy, tenants, by_class)


@dataclass(slots=True)
class _Class:
    """One class being planned: parallel lists, one entry per participating tenant."""

    budget: int
    configured: Sequence[int]
    guaranteed: Sequence[int]
    caps: Sequence[int | None]
    weights: list[float]
    demand: list[ClassDemand]
    baselines: list[int | None]
    scaled: str = ""
    targets: list[int] = field(default_factory=list)
    nominal: list[int] = field(default_factory=list)
    notes: dict[int, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        budget: int,
        members: _Members,
        weights: list[float],
        demand: list[ClassDemand],
        baselines: list[int | None],
    ) -> _Class:
        guaranteed = members.guaranteed
        return cls(budget, guaranteed, guaranteed, members.caps, weights, demand, baselines)


def _targets(rows: _Class) -> None:
    """Steps 2 and 3: water-filling of demand, then of idle capacity, up to each max."""
    budget = rows.budget
    caps = [budget if cap is None else cap for cap in rows.caps]
    wants = [
        low if (total := d.total) < low else high if total > high else total
        for d, low, high in zip(rows.demand, rows.guaranteed, caps, strict=True)
    ]
    served = water_fill(rows.guaranteed, wants, rows.weights, budget)
    if sum(served) < budget:
        served = water_fill(served, caps, rows.weights, budget)
    rows.targets = served


def _hysteresis(rows: _Class, rebalance: Rebalance) -> None:
    """Step 4: bounded moves from the baseline, then restore invariants 2 and 1."""
    percent = f"{rebalance.max_step_percent:g}"
    min_change = rebalance.min_change
    nominal = list(rows.targets)
    notes = rows.notes
    for i, baseline in enumerate(rows.baselines):
        target = nominal[i]
        if baseline is None or baseline == target:  # targets keep invariant 2 already
            continue
        change = target - baseline
        size = change if change > 0 else -change
        if size < min_change:
            nominal[i] = baseline
            notes[i] = f"held: change {size} below minChange {min_change}"
        elif size > (limit := step_limit(baseline, rebalance)):
            nominal[i] = baseline + (limit if change > 0 else -limit)
            notes[i] = f"step limited to {percent}% (target {target})"
        cap = rows.caps[i]
        if nominal[i] < rows.guaranteed[i]:
            nominal[i] = rows.guaranteed[i]
            notes[i] = f"raised to guarantee {rows.guaranteed[i]}"
        elif cap is not None and nominal[i] > cap:
            nominal[i] = cap
            notes[i] = f"lowered to max {cap}"
    rows.nominal = nominal
    if sum(nominal) > rows.budget:
        _fit_capacity(rows, rebalance)


def _fit_capacity(rows: _Class, rebalance: Rebalance) -> None:
    """Restore invariant 1 after bounded moves: hold increases back first (that keeps every
    move within its limits), then lower what is still above its target beyond the step."""
    _hold_increases_back(rows, rebalance)
    if sum(rows.nominal) > rows.budget:
        _lower_beyond_step(rows)


def _hold_increases_back(rows: _Class, rebalance: Rebalance) -> None:
    """Take the excess over the budget from the rows that rose, back towards their baselines."""
    nominal, budget = rows.nominal, rows.budget
    excess = sum(nominal) - budget
    floors = {
        i: max(baseline, rows.guaranteed[i])
        for i, baseline in enumerate(rows.baselines)
        if baseline is not None and nominal[i] > max(baseline, rows.guaranteed[i])
    }
    rising = sorted(floors)
    room = [nominal[i] - floors[i] for i in rising]
    for i, cut in zip(rising, apportion(min(excess, sum(room)), room), strict=True):
        if not cut:
            continue
        nominal[i] -= cut
        if 0 < nominal[i] - (rows.baselines[i] or 0) < rebalance.min_change:
            nominal[i] = floors[i]
        rows.notes[i] = f"increase held back: capacity {budget} in use (target {rows.targets[i]})"


def _lower_beyond_step(rows: _Class) -> None:
    """Take what is still over the budget from the rows above their targets, past the step."""
    nominal, budget = rows.nominal, rows.budget
    excess = sum(nominal) - budget
    falling = [i for i, amount in enumerate(nominal) if amount > rows.targets[i]]
    room = [nominal[i] - rows.targets[i] for i in falling]
    for i, cut in zip(falling, apportion(excess, room), strict=True):
        if cut:
            nominal[i] -= cut
            rows.notes[i] = f"lowered beyond step to fit capacity {budget}"


def _demand_reason(rows: _Class, i: int) -> str:
    demand, target, cap = rows.demand[i], rows.targets[i], rows.caps[i]
    usage, pending = demand.usage, demand.pending
    total = demand.total
    if total > target:
        if cap is not None and target >= cap:
            return f"demand {total} capped at max {cap}"
        if pending and usage <= target:
            return f"pending demand {pending} above nominal; share by weight"
        return f"usage {usage} above nominal; share by weight"
    if total == target:
        return f"demand {total} met" if total else "no demand"
    if target == rows.guaranteed[i]:
        return f"guarantee {target} kept; demand {total}"
    return f"idle capacity lendable by weight; demand {total}"


def _reason(rows: _Class, i: int) -> str:
    """Why the row is what it is: scaling, then demand against the target, then hysteresis."""
    reason = _demand_reason(rows, i)
    if rows.demand[i].discounted:
        reason = f"{reason} (idle {rows.demand[i].discounted} above guarantee not counted)"
    if rows.scaled and rows.configured[i] > rows.guaranteed[i]:
        reason = f"{rows.scaled}; {reason}"
    note = rows.notes.get(i)
    if note:
        reason = f"{reason}; {note}"
    usage, nominal = rows.demand[i].usage, rows.nominal[i]
    if usage > nominal:
        reason = f"{reason}; over quota by {usage - nominal} until admitted work finishes"
    return reason


def _baselines(
    current: Mapping[str, QueueState] | None, previous: Plan | None
) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for tenant, state in (current or {}).items():
        found[tenant] = {name: quota.nominal for name, quota in state.quotas.items()}
    if previous is not None:
        for tenant_plan in previous.tenants:
            mine = found.setdefault(tenant_plan.name, {})
            for row in tenant_plan.classes:
                mine[row.class_name] = row.nominal
    return found


def _plan_class(rows: _Class, rebalance: Rebalance) -> str:
    """Steps 1 to 4 for one class; the scaling of step 1 when it happened, else ""."""
    guarantees = sum(rows.guaranteed)
    if guarantees > rows.budget:
        rows.scaled = f"guarantee scaled: capacity {rows.budget} < guarantees {guarantees}"
        rows.guaranteed = apportion(rows.budget, rows.guaranteed)
    _targets(rows)
    _hysteresis(rows, rebalance)
    return rows.scaled


def _class_plans(gpu_class: GpuClass, rows: _Class, *, lend_idle: bool) -> Iterator[ClassPlan]:
    flavor, resource, class_name = gpu_class.flavor, gpu_class.resource, gpu_class.name
    for i, row_demand in enumerate(rows.demand):
        wanted = row_demand.usage + row_demand.pending
        idle = max(0, min(rows.guaranteed[i], rows.nominal[i]) - wanted) if lend_idle else 0
        yield ClassPlan(
            class_name,
            resource,
            flavor,
            rows.guaranteed[i],
            rows.configured[i],
            rows.caps[i],
            rows.nominal[i],
            rows.targets[i],
            row_demand.usage,
            row_demand.pending,
            _reason(rows, i),
            idle,
        )


class Planner:
    """Plans for one policy. What depends on the policy alone (who takes part in each class,
    with which guarantee and max) is worked out once, when the planner is built: the
    controller and the simulator plan with the same policy every interval."""

    __slots__ = ("_participation",)

    def __init__(self, policy: TenantPolicy) -> None:
        self._participation = _participation(policy)

    @property
    def policy(self) -> TenantPolicy:
        return self._participation.policy

    def plan(
        self,
        capacity: Mapping[str, ClassCapacity],
        demand: Demand,
        *,
        current: Mapping[str, QueueState] | None = None,
        weights: Mapping[str, float] | None = None,
        previous: Plan | None = None,
    ) -> Plan:
        """Quota targets for every tenant and class of the policy (see `plan`)."""
        participation = self._participation
        policy, tenants = participation.policy, participation.tenants
        weights = weights or {}
        tenant_weights = [weights.get(tenant.name, tenant.weight) for tenant in tenants]
        demands = [demand.get(tenant.name) or {} for tenant in tenants]
        all_baselines = _baselines(current, previous)
        baselines = [all_baselines.get(tenant.name) or {} for tenant in tenants]
        per_tenant, capacities, problems = self._classes(
            capacity, tenant_weights, demands, baselines
        )
        return Plan(
            policy=policy.name,
            cohort=policy.cohort,
            backend=policy.spec.backend,
            parent=policy.volcano_parent,
            mode=policy.spec.rebalance.mode,
            classes=tuple(capacities),
            tenants=tuple(
                TenantPlan(
                    tenant.name,
                    tenant.queue,
                    tenant.weight,
                    weight,
                    tuple(rows),
                    flavor_order=preferred_classes(tenant),
                    fungibility=tenant.flavor_fungibility,
                )
                for tenant, weight, rows in zip(tenants, tenant_weights, per_tenant, strict=True)
            ),
            flavors={c.name: (c.flavor, c.resource) for c in policy.spec.gpu_classes},
            problems=tuple(problems),
        )

    def _classes(
        self,
        capacity: Mapping[str, ClassCapacity],
        tenant_weights: list[float],
        demands: Sequence[Mapping[str, ClassDemand]],
        baselines: Sequence[Mapping[str, int]],
    ) -> tuple[list[list[ClassPlan]], list[ClassCapacity], list[str]]:
        """Every class planned: rows per tenant (in name order), capacities, problems."""
        participation = self._participation
        policy = participation.policy
        per_tenant: list[list[ClassPlan]] = [[] for _ in participation.tenants]
        problems: list[str] = []
        capacities: list[ClassCapacity] = []
        lend_idle = policy.spec.rebalance.lend_idle_guarantees
        for gpu_class in policy.spec.gpu_classes:
            class_name = gpu_class.name
            cap = capacity.get(class_name) or ClassCapacity(class_name, gpu_class.resource, 0, 0, 0)
            capacities.append(cap)
            indexes = participation.by_class[class_name].indexes
            if not indexes:
                continue
            rows = _Class.of(
                cap.distributable,
                participation.by_class[class_name],
                [tenant_weights[i] for i in indexes],
                [demands[i].get(class_name, NO_DEMAND) for i in indexes],
                [baselines[i].get(class_name) for i in indexes],
            )
            scaled = _plan_class(rows, policy.spec.rebalance)
            if scaled:
                problems.append(f"{class_name}: {scaled}")
            plans = _class_plans(gpu_class, rows, lend_idle=lend_idle)
            for index, row in zip(indexes, plans, strict=True):
                per_tenant[index].append(row)
        return per_tenant, capacities, problems


def plan(
    policy: TenantPolicy,
    capacity: Mapping[str, ClassCapacity],
    demand: Demand,
    *,
    current: Mapping[str, QueueState] | None = None,
    weights: Mapping[str, float] | None = None,
    previous: Plan | None = None,
) -> Plan:
    """Quota targets for every tenant and class of the policy.

    `capacity`: per class name (missing classes have none); `demand`: tenant -> class ->
    usage and pending; `current`: tenant -> its queue now; `weights`: effective fair-share
    weights (default: the policy's base weights), used for sharing and written to queues;
    `previous`: the last plan, the baseline for hysteresis in recommend mode, where queues do
    not move (it wins over `current`). Deterministic: the same inputs give the same plan.
    """
    return Planner(policy).plan(
        capacity, demand, current=current, weights=weights, previous=previous
    )
