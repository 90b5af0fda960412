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

borrowingLimit = max - nominal (None without max); lendingLimit = nominal - guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from quotaguard.policy.model import ClassQuota, GpuClass, Rebalance, Tenant, TenantPolicy
from quotaguard.quota.capacity import ClassCapacity
from quotaguard.quota.demand import ClassDemand, Demand
from quotaguard.quota.fill import apportion, water_fill
from quotaguard.quota.queues import QueueState

NO_DEMAND = ClassDemand()


@dataclass(frozen=True, slots=True)
class ClassPlan:
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

    @property
    def borrowing_limit(self) -> int | None:
        return None if self.max is None else self.max - self.nominal

    @property
    def lending_limit(self) -> int:
        return self.nominal - self.guaranteed

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


@dataclass(slots=True)
class _Row:
    tenant: str
    guaranteed: int
    configured: int
    cap: int | None
    demand: ClassDemand
    weight: float
    baseline: int | None
    target: int = 0
    nominal: int = 0
    notes: str = ""


def _targets(rows: Sequence[_Row], budget: int) -> None:
    """Steps 2 and 3: water-filling of demand, then of idle capacity, up to each max."""
    floors = [row.guaranteed for row in rows]
    weights = [row.weight for row in rows]
    caps = [budget if row.cap is None else row.cap for row in rows]
    wants = [
        min(max(row.demand.total, row.guaranteed), cap) for row, cap in zip(rows, caps, strict=True)
    ]
    served = water_fill(floors, wants, weights, budget)
    if sum(served) < budget:
        served = water_fill(served, caps, weights, budget)
    for row, amount in zip(rows, served, strict=True):
        row.target = amount


def _hysteresis(rows: Sequence[_Row], budget: int, rebalance: Rebalance) -> None:
    """Step 4: bounded moves from the baseline, then restore invariants 2 and 1."""
    percent = f"{rebalance.max_step_percent:g}"
    for row in rows:
        baseline, target = row.baseline, row.target
        if baseline is None:
            row.nominal = target
            continue
        change = target - baseline
        limit = step_limit(baseline, rebalance)
        if change and abs(change) < rebalance.min_change:
            row.nominal = baseline
            row.notes = f"held: change {abs(change)} below minChange {rebalance.min_change}"
        elif abs(change) > limit:
            row.nominal = baseline + (limit if change > 0 else -limit)
            row.notes = f"step limited to {percent}% (target {target})"
        else:
            row.nominal = target
        if row.nominal < row.guaranteed:
            row.nominal = row.guaranteed
            row.notes = f"raised to guarantee {row.guaranteed}"
        elif row.cap is not None and row.nominal > row.cap:
            row.nominal = row.cap
            row.notes = f"lowered to max {row.cap}"
    excess = sum(row.nominal for row in rows) - budget
    if excess <= 0:
        return
    # Hold increases back first: that keeps every move within its limits.
    rising = [
        row
        for row in rows
        if row.baseline is not None and row.nominal > max(row.baseline, row.guaranteed)
    ]
    room = [row.nominal - max(row.baseline or 0, row.guaranteed) for row in rising]
    cuts = apportion(min(excess, sum(room)), room)
    for row, cut in zip(rising, cuts, strict=True):
        if not cut:
            continue
        row.nominal -= cut
        if 0 < row.nominal - (row.baseline or 0) < rebalance.min_change:
            row.nominal = max(row.baseline or 0, row.guaranteed)
        row.notes = f"increase held back: capacity {budget} in use (target {row.target})"
    excess = sum(row.nominal for row in rows) - budget
    if excess <= 0:
        return
    falling = [row for row in rows if row.nominal > row.target]
    room = [row.nominal - row.target for row in falling]
    for row, cut in zip(falling, apportion(excess, room), strict=True):
        if cut:
            row.nominal -= cut
            row.notes = f"lowered beyond step to fit capacity {budget}"


def _reason(row: _Row, scaled: str) -> str:
    parts = [scaled] if scaled and row.configured > row.guaranteed else []
    demand, nominal = row.demand, row.target
    if demand.total > nominal:
        if row.cap is not None and nominal >= row.cap:
            parts.append(f"demand {demand.total} capped at max {row.cap}")
        elif demand.pending and demand.usage <= nominal:
            parts.append(f"pending demand {demand.pending} above nominal; share by weight")
        else:
            parts.append(f"usage {demand.usage} above nominal; share by weight")
    elif demand.total == nominal:
        parts.append(f"demand {demand.total} met" if demand.total else "no demand")
    elif nominal == row.guaranteed:
        parts.append(f"guarantee {row.guaranteed} kept; demand {demand.total}")
    else:
        parts.append(f"idle capacity lendable by weight; demand {demand.total}")
    if row.notes:
        parts.append(row.notes)
    if demand.usage > row.nominal:
        parts.append(f"over quota by {demand.usage - row.nominal} until admitted work finishes")
    return "; ".join(parts)


def _class_rows(
    policy: TenantPolicy,
    gpu_class: GpuClass,
    demand: Demand,
    weights: Mapping[str, float],
    baselines: Mapping[str, Mapping[str, int]],
) -> list[_Row]:
    rows = []
    for tenant in policy.spec.tenants:
        quota = quota_of(tenant, gpu_class.name)
        if quota is None:
            continue
        cap = quota.max
        guaranteed = quota.guaranteed if cap is None else min(quota.guaranteed, cap)
        rows.append(
            _Row(
                tenant=tenant.name,
                guaranteed=guaranteed,
                configured=guaranteed,
                cap=cap,
                demand=demand.get(tenant.name, {}).get(gpu_class.name, NO_DEMAND),
                weight=weights.get(tenant.name, tenant.weight),
                baseline=baselines.get(tenant.name, {}).get(gpu_class.name),
            )
        )
    rows.sort(key=lambda row: row.tenant)
    return rows


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
    rebalance = policy.spec.rebalance
    weights = weights or {}
    baselines = _baselines(current, previous)
    per_tenant: dict[str, list[ClassPlan]] = {t.name: [] for t in policy.spec.tenants}
    rows_of_classes: list[ClassCapacity] = []
    problems: list[str] = []
    for gpu_class in policy.spec.gpu_classes:
        cap = capacity.get(gpu_class.name) or ClassCapacity(
            gpu_class.name, gpu_class.resource, 0, 0, 0
        )
        rows_of_classes.append(cap)
        rows = _class_rows(policy, gpu_class, demand, weights, baselines)
        if not rows:
            continue
        budget = cap.distributable
        guarantees = sum(row.guaranteed for row in rows)
        scaled = ""
        if guarantees > budget:
            scaled = f"guarantee scaled: capacity {budget} < guarantees {guarantees}"
            problems.append(f"{gpu_class.name}: {scaled}")
            parts = apportion(budget, [row.guaranteed for row in rows])
            for row, part in zip(rows, parts, strict=True):
                row.guaranteed = part
        _targets(rows, budget)
        _hysteresis(rows, budget, rebalance)
        for row in rows:
            per_tenant[row.tenant].append(
                ClassPlan(
                    class_name=gpu_class.name,
                    resource=gpu_class.resource,
                    flavor=gpu_class.flavor,
                    guaranteed=row.guaranteed,
                    configured_guarantee=row.configured,
                    max=row.cap,
                    nominal=row.nominal,
                    target=row.target,
                    usage=row.demand.usage,
                    pending=row.demand.pending,
                    reason=_reason(row, scaled),
                )
            )
    tenants = tuple(
        TenantPlan(
            name=tenant.name,
            queue=tenant.queue,
            base_weight=tenant.weight,
            weight=weights.get(tenant.name, tenant.weight),
            classes=tuple(per_tenant[tenant.name]),
        )
        for tenant in sorted(policy.spec.tenants, key=lambda t: t.name)
    )
    return Plan(
        policy=policy.name,
        cohort=policy.cohort,
        backend=policy.spec.backend,
        mode=rebalance.mode,
        classes=tuple(rows_of_classes),
        tenants=tenants,
        flavors={c.name: (c.flavor, c.resource) for c in policy.spec.gpu_classes},
        problems=tuple(problems),
    )
