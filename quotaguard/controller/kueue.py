"""The ClusterQueue spec a tenant's targets call for, built from the spec the queue has now.

Only what quotaguard manages changes: in the resource group that covers the GPU class
resources, the quota of every (flavor, resource) pair of the policy's classes and the order of
the flavors a tenant's lists (`to: [h100, a100]`) name; `cohortName` (`cohort` in v1beta1);
`fairSharing.weight`; `flavorFungibility` when the tenant sets it. Every other resource group
(cpu, memory, ...), every other field, and the order of what is already there stay exactly as
they are. Kueue
requires each flavor of a group to list every covered resource in the group's order, so a pair
without a target is written with nominalQuota 0 rather than left out.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Any

from quotaguard.kube.quantity import QuantityError, parse_quantity
from quotaguard.policy.fungibility import class_order, preferred_classes
from quotaguard.policy.model import FlavorFungibility, Tenant, TenantPolicy
from quotaguard.quota.cluster import ResourceQuota

JsonObject = dict[str, Any]
QUOTA_FIELDS = ("nominalQuota", "borrowingLimit", "lendingLimit")


def cohort_field(api_version: str) -> str:
    """v1beta2 renamed spec.cohort to spec.cohortName."""
    return "cohort" if api_version.endswith("/v1beta1") else "cohortName"


def format_weight(weight: float) -> str:
    """A fair-sharing weight as a Quantity string with three decimals at most (`1.25`)."""
    rounded = Decimal(str(weight)).quantize(Decimal("0.001"), rounding=ROUND_HALF_EVEN)
    text = format(rounded.normalize(), "f")
    return text if text not in ("-0", "") else "0"


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _quota_entry(entry: JsonObject, target: ResourceQuota | None) -> JsonObject:
    updated = dict(entry)
    if target is None:
        updated["nominalQuota"] = "0"
        updated.pop("borrowingLimit", None)
        updated.pop("lendingLimit", None)
        return updated
    updated["nominalQuota"] = str(target.nominal)
    for key, value in (
        ("borrowingLimit", target.borrowing_limit),
        ("lendingLimit", target.lending_limit),
    ):
        if value is None:
            updated.pop(key, None)
        else:
            updated[key] = str(value)
    return updated


@dataclass(frozen=True)
class GpuKeys:
    """What of a ClusterQueue's resource groups the policy's classes speak for."""

    targets: Mapping[tuple[str, str], ResourceQuota | None]  # (flavor, resource) -> quota
    resources: tuple[str, ...]
    flavors: tuple[str, ...]

    # the flavors the tenant's lists name, in the order Kueue must try them
    preferred: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        policy: TenantPolicy,
        quotas: Mapping[str, ResourceQuota],
        tenant: Tenant | None = None,
    ) -> GpuKeys:
        classes = policy.spec.gpu_classes
        names = set(preferred_classes(tenant)) if tenant is not None else set()
        order = class_order(policy, tenant)
        return cls(
            targets={(c.flavor, c.resource): quotas.get(c.name) for c in classes},
            resources=tuple(_unique(c.resource for c in classes)),
            flavors=tuple(_unique(c.flavor for c in order)),
            preferred=tuple(_unique(c.flavor for c in order if c.name in names)),
        )

    def manages(self, flavor: object, resource: object) -> bool:
        return flavor in self.flavors and resource in self.resources


def gpu_groups(groups: list[Any], keys: GpuKeys) -> list[JsonObject]:
    """The groups covering a class resource (Kueue lets a resource belong to one group)."""
    return [
        group
        for group in groups
        if isinstance(group, dict)
        and set(group.get("coveredResources") or ()) & set(keys.resources)
    ]


def _taken(others: list[Any]) -> tuple[set[object], set[object]]:
    """The resources and flavors other groups already have."""
    groups = [g for g in others if isinstance(g, dict)]
    resources = {r for g in groups for r in g.get("coveredResources") or ()}
    flavors = {f.get("name") for g in groups for f in g.get("flavors") or ()}
    return resources, flavors


def grow_group(group: JsonObject, others: list[Any], keys: GpuKeys) -> None:
    """The one GPU group covers every class resource and flavor, except those another group
    already has (a resource or flavor may belong to one group only)."""
    taken_resources, taken_flavors = _taken(others)
    covered = list(group.get("coveredResources") or ())
    covered += [r for r in keys.resources if r not in covered and r not in taken_resources]
    group["coveredResources"] = covered
    flavors = list(group.get("flavors") or ())
    present = {f.get("name") for f in flavors} | taken_flavors
    flavors += [{"name": name, "resources": []} for name in keys.flavors if name not in present]
    group["flavors"] = flavors


def in_preferred_order(flavors: list[Any], preferred: tuple[str, ...]) -> list[Any]:
    """The flavors with those a tenant's lists name in the lists' order, in the places they
    hold (Kueue tries a group's flavors in order); every other flavor stays where it is."""
    rank = {name: at for at, name in enumerate(preferred)}
    places = [at for at, f in enumerate(flavors) if isinstance(f, dict) and f.get("name") in rank]
    ordered = sorted((flavors[at] for at in places), key=lambda f: rank[f["name"]])
    result = list(flavors)
    for at, flavor in zip(places, ordered, strict=True):
        result[at] = flavor
    return result


def flavor_resources(flavor: Mapping[str, Any], covered: list[str], keys: GpuKeys) -> list[Any]:
    """One flavor's resources in the group's order: the managed pairs set to their targets,
    a covered resource the flavor lacks at nominalQuota 0, the rest as they are."""
    name = flavor.get("name")
    existing = {r.get("name"): r for r in flavor.get("resources") or ()}
    resources = []
    for resource in covered:
        entry = dict(existing.get(resource) or {"name": resource})
        if keys.manages(name, resource):
            entry = _quota_entry(entry, keys.targets.get((str(name), resource)))
        elif "nominalQuota" not in entry:
            entry["nominalQuota"] = "0"
        resources.append(entry)
    return resources


def desired_resource_groups(
    groups: list[Any],
    policy: TenantPolicy,
    quotas: Mapping[str, ResourceQuota],
    tenant: Tenant | None = None,
) -> list[Any]:
    """The resourceGroups list with the GPU group set to the targets (`quotas` by class name),
    its flavors in the order the tenant's lists (`to: [h100, a100]`) ask Kueue to try them."""
    groups = copy.deepcopy(groups)
    keys = GpuKeys.of(policy, quotas, tenant)
    found = gpu_groups(groups, keys)
    if len(found) <= 1:
        if not found:
            groups.append({"coveredResources": [], "flavors": []})
            found = [groups[-1]]
        grow_group(found[0], [g for g in groups if g is not found[0]], keys)
    for group in found:
        covered = list(group.get("coveredResources") or ())
        for flavor in group.get("flavors") or ():
            flavor["resources"] = flavor_resources(flavor, covered, keys)
        if keys.preferred and isinstance(group.get("flavors"), list):
            group["flavors"] = in_preferred_order(group["flavors"], keys.preferred)
    return groups


# The old name of MayStopSearch per field: v1beta2 knows only the new name, v1beta1 servers
# from before it know only the old one (and every v1beta1 server still takes it).
_OLD_STOP = {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"}


def flavor_fungibility(
    current: Mapping[str, Any], wanted: FlavorFungibility, api_version: str
) -> JsonObject:
    """`spec.flavorFungibility` as the tenant asks for it, spelt for the served API."""
    found = dict(current)
    for field, value in (
        ("whenCanBorrow", wanted.when_can_borrow),
        ("whenCanPreempt", wanted.when_can_preempt),
    ):
        old = _OLD_STOP[field]
        stops = value in ("MayStopSearch", old)
        found[field] = (
            value if not stops else old if api_version.endswith("/v1beta1") else "MayStopSearch"
        )
    if not (wanted.borrow_next and wanted.preempt_next):
        found.pop("preference", None)  # Kueue allows it only when both try the next flavor
    return found


def desired_spec(
    spec: Mapping[str, Any],
    policy: TenantPolicy,
    *,
    api_version: str,
    quotas: Mapping[str, ResourceQuota],
    weight: float | None,
    weight_tolerance: float = 0.0,
    tenant: Tenant | None = None,
) -> JsonObject:
    """The whole ClusterQueue spec to write (pure; `spec` is not modified).

    `weight_tolerance`: a relative change of the fair-sharing weight up to this is not made.
    `tenant`: its lists order the GPU flavors, its `flavorFungibility` is written when set.
    """
    desired = copy.deepcopy(dict(spec))
    desired["resourceGroups"] = desired_resource_groups(
        list(spec.get("resourceGroups") or ()), policy, quotas, tenant
    )
    if tenant is not None and tenant.flavor_fungibility is not None:
        current = desired.get("flavorFungibility")
        desired["flavorFungibility"] = flavor_fungibility(
            current if isinstance(current, dict) else {}, tenant.flavor_fungibility, api_version
        )
    desired[cohort_field(api_version)] = policy.cohort
    fair_sharing = dict(desired.get("fairSharing") or {})
    if weight is not None and not _close_enough(
        fair_sharing.get("weight"), weight, weight_tolerance
    ):
        fair_sharing["weight"] = format_weight(weight)
        desired["fairSharing"] = fair_sharing
    return desired


def owned_spec(
    desired: Mapping[str, Any], *, api_version: str, tenant: Tenant | None = None
) -> JsonObject:
    """What quotaguard applies of a built spec: resourceGroups (an atomic list in Kueue's
    schema, so the whole list, the groups and fields it does not manage copied as they are),
    the cohort, the fair-sharing weight, and the flavor fungibility when `tenant` sets it.
    Every other field is left to its manager."""
    owned: JsonObject = {"resourceGroups": copy.deepcopy(list(desired.get("resourceGroups") or ()))}
    cohort = cohort_field(api_version)
    if desired.get(cohort) is not None:
        owned[cohort] = desired[cohort]
    if tenant is not None and tenant.flavor_fungibility is not None:
        owned["flavorFungibility"] = copy.deepcopy(desired.get("flavorFungibility"))
    weight = (desired.get("fairSharing") or {}).get("weight")
    if weight is not None:
        owned["fairSharing"] = {"weight": weight}
    return owned


def _close_enough(current: object, weight: float, tolerance: float) -> bool:
    """Decayed usage moves weights a little every interval; small moves are not worth a write."""
    if current is None:
        return False
    try:
        have = float(parse_quantity(current))
    except QuantityError:
        return False
    return abs(have - weight) <= tolerance * max(abs(have), 1e-9)


def _quantity(value: object) -> object:
    try:
        return parse_quantity(value)
    except QuantityError:
        return value


def canonical(value: Any, key: str = "") -> Any:
    """A spec with quantities as exact numbers: the API server stores `1.5` as `1500m`, and a
    write that only changes how a number is spelled is no change."""
    if isinstance(value, dict):
        return {k: canonical(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [canonical(v, key) for v in value]
    if key in (*QUOTA_FIELDS, "weight"):
        return _quantity(value)
    return value


def same_spec(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    return bool(canonical(dict(current)) == canonical(dict(desired)))


def quota_changes(current: Mapping[str, Any], desired: Mapping[str, Any]) -> list[str]:
    """Human-readable lines of what a write changes (for Events and logs)."""
    before, after = _pairs(current), _pairs(desired)
    lines = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old != new:
            lines.append(f"{key[0]}/{key[1]} {key[2]} {_show(old)} -> {_show(new)}")
    for name in ("cohortName", "cohort"):
        if current.get(name) != desired.get(name) and name in desired:
            lines.append(f"{name} {current.get(name) or '-'} -> {desired.get(name)}")
    old_weight = (current.get("fairSharing") or {}).get("weight")
    new_weight = (desired.get("fairSharing") or {}).get("weight")
    if _quantity(old_weight) != _quantity(new_weight):
        lines.append(f"weight {_show(old_weight)} -> {_show(new_weight)}")
    return lines


def _pairs(spec: Mapping[str, Any]) -> dict[tuple[str, str, str], object]:
    found: dict[tuple[str, str, str], object] = {}
    for group in spec.get("resourceGroups") or ():
        for flavor in group.get("flavors") or ():
            for resource in flavor.get("resources") or ():
                for field in QUOTA_FIELDS:
                    if field in resource:
                        key = (str(flavor.get("name")), str(resource.get("name")), field)
                        found[key] = _quantity(resource[field])
    return found


def _show(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, Fraction):
        return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"
    return str(value)
