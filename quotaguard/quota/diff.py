"""What the controller must write to make the queues match a plan, and the patches that do it.

`diff(current, target)` compares queue by queue and lists only what differs (empty when the
queues already hold the plan). For Kueue every GPU class appears in the tenant's GPU resource
group: a class the tenant has no quota for is written as nominal 0 with borrowing and lending
limits 0, so the tenant can neither use nor borrow it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quotaguard.quota.cluster import ClusterQueue, ResourceQuota
from quotaguard.quota.planner import Plan, TenantPlan
from quotaguard.quota.queues import QueueState

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
    volcano = target.backend == "volcano"
    for tenant in target.tenants:
        state = current.get(tenant.name)
        reasons = _reasons(tenant)
        quotas = []
        for name, quota in target_quotas(target, tenant).items():
            before = state.quotas.get(name) if state is not None else None
            if before == quota or (before is None and quota == NO_QUOTA and volcano):
                continue
            flavor, resource = target.flavors[name]
            reason = reasons.get(name, "no quota for this class")
            quotas.append(QuotaChange(name, flavor, resource, quota, before, reason))
        cohort = None
        if not volcano and (state is None or state.cohort != target.cohort):
            cohort = target.cohort
        wanted = volcano_weight(tenant.weight) if volcano else tenant.weight
        weight = None
        if state is None or state.weight is None or (abs(state.weight - wanted) > WEIGHT_TOLERANCE):
            weight = wanted
        change = QueueChange(
            tenant=tenant.name,
            queue=tenant.queue,
            create=state is None,
            cohort=cohort,
            weight=weight,
            quotas=tuple(quotas),
        )
        if not change.empty:
            changes.append(change)
    return changes


def volcano_weight(weight: float) -> int:
    """Volcano queue weights are whole numbers of at least 1."""
    return max(1, round(weight))


def _quantity(value: int | float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _resource_entry(resource: str, quota: ResourceQuota) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": resource, "nominalQuota": _quantity(quota.nominal)}
    if quota.borrowing_limit is not None:
        entry["borrowingLimit"] = _quantity(quota.borrowing_limit)
    if quota.lending_limit is not None:
        entry["lendingLimit"] = _quantity(quota.lending_limit)
    return entry


def gpu_resource_group(plan: Plan, tenant: TenantPlan) -> dict[str, Any]:
    """The Kueue resource group of every GPU class: each flavor lists every covered resource
    (combinations no class offers get nominal 0), as Kueue requires."""
    by_pair = {plan.flavors[name]: quota for name, quota in target_quotas(plan, tenant).items()}
    resources = sorted({resource for _, resource in plan.flavors.values()})
    flavors = list(dict.fromkeys(flavor for flavor, _ in plan.flavors.values()))
    return {
        "coveredResources": resources,
        "flavors": [
            {
                "name": flavor,
                "resources": [
                    _resource_entry(
                        resource,
                        by_pair.get((flavor, resource), ResourceQuota(0, None, None)),
                    )
                    for resource in resources
                ],
            }
            for flavor in flavors
        ],
    }


def _without_gpus(group: Mapping[str, Any], gpu: set[str]) -> dict[str, Any] | None:
    """A resource group with the GPU resources taken out (None when nothing is left)."""
    covered = [r for r in group.get("coveredResources") or [] if r not in gpu]
    if not covered:
        return None
    flavors = []
    for flavor in group.get("flavors") or []:
        resources = [r for r in flavor.get("resources") or [] if r.get("name") not in gpu]
        flavors.append({**flavor, "resources": resources})
    return {**group, "coveredResources": covered, "flavors": flavors}


def kueue_spec_patch(
    plan: Plan, tenant: TenantPlan, queue: ClusterQueue | None = None
) -> dict[str, Any]:
    """A merge patch for the tenant's ClusterQueue (or the spec of a new one).

    Resource groups that cover no GPU class resource are kept exactly; the GPU classes are
    written as one group, in the place of the first group that covered any of them.
    """
    gpu = {resource for _, resource in plan.flavors.values()}
    groups: list[Any] = []
    placed = False
    existing = list((queue.spec.get("resourceGroups") or []) if queue is not None else [])
    for group in existing:
        if not isinstance(group, Mapping) or not gpu & set(group.get("coveredResources") or []):
            groups.append(group)
            continue
        if not placed:
            groups.append(gpu_resource_group(plan, tenant))
            placed = True
        rest = _without_gpus(group, gpu)
        if rest is not None:
            groups.append(rest)
    if not placed:
        groups.append(gpu_resource_group(plan, tenant))
    # v1beta1 names the cohort field `cohort`; v1beta2 `cohortName`.
    cohort_field = (
        "cohort" if queue is not None and queue.api_version.endswith("v1beta1") else ("cohortName")
    )
    return {
        "spec": {
            "resourceGroups": groups,
            cohort_field: plan.cohort,
            "fairSharing": {"weight": _quantity(tenant.weight)},
        }
    }


def volcano_spec_patch(plan: Plan, tenant: TenantPlan) -> dict[str, Any]:
    """A merge patch for the tenant's Volcano Queue: weight, capability (= max),
    guarantee (= guaranteed) and deserved (= the target nominal)."""
    capability: dict[str, str | None] = {}
    guarantee: dict[str, str] = {}
    deserved: dict[str, str] = {}
    for row in tenant.classes:
        # A merge patch deletes a key set to null: an unbounded class has no capability.
        capability[row.resource] = None if row.max is None else str(row.max)
        guarantee[row.resource] = str(row.guaranteed)
        deserved[row.resource] = str(row.nominal)
    return {
        "spec": {
            "weight": volcano_weight(tenant.weight),
            "capability": capability,
            "guarantee": {"resource": guarantee},
            "deserved": deserved,
        }
    }
