"""What the controller must write to make the queues match a plan (the specs themselves are
built by `quotaguard.controller.kueue` and `quotaguard.controller.volcano`).

`diff(current, target)` compares queue by queue and lists only what differs (empty when the
queues already hold the plan). For Kueue every GPU class appears in the tenant's GPU resource
group: a class the tenant has no quota for is written as nominal 0 with borrowing and lending
limits 0, so the tenant can neither use nor borrow it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from quotaguard.quota.cluster import ResourceQuota
from quotaguard.quota.queues import QueueState
from quotaguard.quota.quota_planner import Plan, TenantPlan

NO_QUOTA = ResourceQuota(nominal=0, borrowing_limit=0, lending_limit=0)
WEIGHT_TOLERANCE = 1e-6


@dataclass(frozen=True, slots=True)
class QuotaChange:
    class_name: str
    flavor: str
    resource: str
    quota: ResourceQuota
    before: ResourceQuota | None
    reason: str


@dataclass(frozen=True, slots=True)
class QueueChange:
    tenant: str
    queue: str
    create: bool  # the queue does not exist yet
    cohort: str | None  # the cohort to set; None when it is already right (or Volcano)
    weight: float | None  # the weight to set; None when it is already right
    quotas: tuple[QuotaChange, ...]  # only the classes whose quota differs

    @property
    def empty(self) -> bool:
        return self.cohort is None and self.weight is None and not self.quotas


def target_quotas(plan: Plan, tenant: TenantPlan) -> dict[str, ResourceQuota]:
    """Class name -> what the tenant's queue should hold, for every class of the policy."""
    found = dict.fromkeys(plan.flavors, NO_QUOTA)
    for row in tenant.classes:
        found[row.class_name] = ResourceQuota(row.nominal, row.borrowing_limit, row.lending_limit)
    return found


def _reasons(tenant: TenantPlan) -> dict[str, str]:
    return {row.class_name: row.reason for row in tenant.classes}


def diff(current: Mapping[str, QueueState], target: Plan) -> list[QueueChange]:
    """The changes that bring each tenant's queue (tenant -> state) to the plan."""
    changes = []
    for tenant in target.tenants:
        state = current.get(tenant.name)
        change = QueueChange(
            tenant=tenant.name,
            queue=tenant.queue,
            create=state is None,
            cohort=_cohort(state, target),
            weight=_weight(state, tenant, volcano=target.backend == "volcano"),
            quotas=_quota_changes(state, target, tenant),
        )
        if not change.empty:
            changes.append(change)
    return changes


def _quota_changes(
    state: QueueState | None, target: Plan, tenant: TenantPlan
) -> tuple[QuotaChange, ...]:
    """The classes whose quota differs from what the queue holds (a Volcano queue holds no
    entry for a class without quota, which is the same as none)."""
    volcano = target.backend == "volcano"
    reasons = _reasons(tenant)
    quotas = []
    for name, quota in target_quotas(target, tenant).items():
        before = state.quotas.get(name) if state is not None else None
        if before == quota or (before is None and quota == NO_QUOTA and volcano):
            continue
        flavor, resource = target.flavors[name]
        reason = reasons.get(name, "no quota for this class")
        quotas.append(QuotaChange(name, flavor, resource, quota, before, reason))
    return tuple(quotas)


def _cohort(state: QueueState | None, target: Plan) -> str | None:
    """The cohort (Kueue) or parent queue (Volcano) to set; None when it is already right."""
    if target.backend != "volcano":
        return target.cohort if state is None or state.cohort != target.cohort else None
    if target.parent and (state is None or state.cohort != target.parent):
        return target.parent  # Volcano's hierarchy: the queue's spec.parent
    return None


def _weight(state: QueueState | None, tenant: TenantPlan, *, volcano: bool) -> float | None:
    """The weight to set; None when the queue has it already."""
    wanted = volcano_weight(tenant.weight) if volcano else tenant.weight
    if state is None or state.weight is None or abs(state.weight - wanted) > WEIGHT_TOLERANCE:
        return wanted
    return None


def _nominal(quota: ResourceQuota | None) -> int:
    return quota.nominal if quota is not None else 0


def _raises(change: QueueChange) -> bool:
    return any(q.quota.nominal > _nominal(q.before) for q in change.quotas)


def _lowers(change: QueueChange) -> bool:
    return any(q.quota.nominal < _nominal(q.before) for q in change.quotas)


def held_back(change: QueueChange) -> QueueChange:
    """The change without its raises of a nominal quota."""
    kept = tuple(q for q in change.quotas if q.quota.nominal <= _nominal(q.before))
    return replace(change, quotas=kept)


def held_quotas(plan: Plan, tenant: TenantPlan, change: QueueChange) -> dict[str, ResourceQuota]:
    """`target_quotas`, except that a class whose nominal quota the change raises keeps what
    the queue holds now."""
    quotas = target_quotas(plan, tenant)
    for q in change.quotas:
        if q.quota.nominal > _nominal(q.before):
            quotas[q.class_name] = q.before if q.before is not None else NO_QUOTA
    return quotas


def room_first(
    changes: list[QueueChange],
) -> tuple[list[tuple[QueueChange, bool]], list[QueueChange]]:
    """The changes as two passes of writes, so that while queues are written one by one the
    nominal quotas of a class never add up to more than the plan gives out (were a raise written
    before another queue's cut, the cohort would hold more than the capacity for a moment).

    First pass: every change that raises no nominal quota, and the part of each change that
    both raises and lowers without its raises (`(change, True)`: write `held_quotas`). Second
    pass: every change that raises a nominal quota, in full; write it only when the whole first
    pass was written."""
    first = [
        (change, _raises(change)) for change in changes if not _raises(change) or _lowers(change)
    ]
    second = [change for change in changes if _raises(change)]
    return first, second


@dataclass(frozen=True, slots=True)
class QueueWrite:
    """One queue write the plan calls for: the quotas to write and the change it carries out."""

    tenant: TenantPlan
    quotas: Mapping[str, ResourceQuota]
    change: QueueChange  # without the raises a held-back write leaves for the second pass

    @property
    def queue(self) -> str:
        return self.change.queue


def writes_for(
    plan: Plan, current: Mapping[str, QueueState]
) -> tuple[tuple[QueueWrite, ...], tuple[QueueWrite, ...]]:
    """Every queue write that brings the queues from `current` to `plan`, in the two passes of
    `room_first`: cuts (and the held-back part of changes that also raise) first, then the
    raises in full, to be written only when the whole first pass was."""
    first, second = room_first(diff(current, plan))

    def write(change: QueueChange, hold: bool) -> QueueWrite | None:
        tenant = plan.tenant(change.tenant)
        if tenant is None:
            return None
        if hold:
            return QueueWrite(tenant, held_quotas(plan, tenant, change), held_back(change))
        return QueueWrite(tenant, target_quotas(plan, tenant), change)

    cuts = tuple(found for change, hold in first if (found := write(change, hold)) is not None)
    raises = tuple(found for change in second if (found := write(change, False)) is not None)
    return cuts, raises


def volcano_weight(weight: float) -> int:
    """Volcano queue weights are whole numbers of at least 1."""
    return max(1, round(weight))
