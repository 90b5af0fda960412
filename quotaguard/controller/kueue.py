"""The ClusterQueue spec a tenant's targets call for, built from the spec the queue has now.

Only what quotaguard manages changes: in the resource group that covers the GPU class
resources, the quota of every (flavor, resource) pair of the policy's classes; `cohortName`
(`cohort` in v1beta1); `fairSharing.weight`. Every other resource group (cpu, memory, ...),
every other field, and the order of what is already there stay exactly as they are. Kueue
requires each flavor of a group to list every covered resource in the group's order, so a pair
without a target is written with nominalQuota 0 rather than left out.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Any

from quotaguard.kube.quantity import QuantityError, parse_quantity
from quotaguard.policy.model import TenantPolicy
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


def desired_resource_groups(
    groups: list[Any], policy: TenantPolicy, quotas: Mapping[str, ResourceQuota]
) -> list[Any]:
    """The resourceGroups list with the GPU group set to the targets (`quotas` by class name)."""
    groups = copy.deepcopy(groups)
    targets = {(c.flavor, c.resource): quotas.get(c.name) for c in policy.spec.gpu_classes}
    class_resources = _unique(c.resource for c in policy.spec.gpu_classes)
    class_flavors = _unique(c.flavor for c in policy.spec.gpu_classes)
    gpu_groups = [
        group
        for group in groups
        if isinstance(group, dict)
        and set(group.get("coveredResources") or ()) & set(class_resources)
    ]
    if len(gpu_groups) <= 1:
        # The one GPU group may grow to cover every class resource and flavor, except those
        # another group already has (a resource or flavor may belong to one group only).
        chosen = {id(g) for g in gpu_groups}
        others = [g for g in groups if isinstance(g, dict) and id(g) not in chosen]
        taken_resources = {r for g in others for r in g.get("coveredResources") or ()}
        taken_flavors = {f.get("name") for g in others for f in g.get("flavors") or ()}
        if not gpu_groups:
            new_group: JsonObject = {"coveredResources": [], "flavors": []}
            groups.append(new_group)
            gpu_groups = [new_group]
        group = gpu_groups[0]
        covered = list(group.get("coveredResources") or ())
        covered += [r for r in class_resources if r not in covered and r not in taken_resources]
        group["coveredResources"] = covered
        flavors = list(group.get("flavors") or ())
        present = {f.get("name") for f in flavors}
        flavors += [
            {"name": name, "resources": []}
            for name in class_flavors
            if name not in present and name not in taken_flavors
        ]
        group["flavors"] = flavors
    for group in gpu_groups:
        covered = list(group.get("coveredResources") or ())
        for flavor in group.get("flavors") or ():
            name = flavor.get("name")
            existing = {r.get("name"): r for r in flavor.get("resources") or ()}
            resources = []
            for resource in covered:
                entry = dict(existing.get(resource) or {"name": resource})
                if name in class_flavors and resource in class_resources:
                    entry = _quota_entry(entry, targets.get((name, resource)))
                elif "nominalQuota" not in entry:
                    entry["nominalQuota"] = "0"
                resources.append(entry)
            flavor["resources"] = resources
    return groups


def desired_spec(
    spec: Mapping[str, Any],
    policy: TenantPolicy,
    *,
    api_version: str,
    quotas: Mapping[str, ResourceQuota],
    weight: float | None,
    weight_tolerance: float = 0.0,
) -> JsonObject:
    """The whole ClusterQueue spec to write (pure; `spec` is not modified).

    `weight_tolerance`: a relative change of the fair-sharing weight up to this is not made.
    """
    desired = copy.deepcopy(dict(spec))
    desired["resourceGroups"] = desired_resource_groups(
        list(spec.get("resourceGroups") or ()), policy, quotas
    )
    desired[cohort_field(api_version)] = policy.cohort
    fair_sharing = dict(desired.get("fairSharing") or {})
    if weight is not None and not _close_enough(
        fair_sharing.get("weight"), weight, weight_tolerance
    ):
        fair_sharing["weight"] = format_weight(weight)
        desired["fairSharing"] = fair_sharing
    return desired


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
