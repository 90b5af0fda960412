"""The Volcano Queue spec (scheduling.volcano.sh/v1beta1) a tenant's targets call for.

Volcano keys quotas by resource name only, so classes sharing a resource add up:
  spec.deserved[r]          = sum of nominal targets             (the computed target)
  spec.guarantee.resource[r] = sum of nominal - lendingLimit      (= guaranteed)
  spec.capability[r]        = sum of nominal + borrowingLimit    (= max; absent when unbounded)
  spec.weight               = the adjusted weight rounded, at least 1 (Volcano wants an integer)
  spec.parent               = the policy's cohort, when it names one (hierarchical queues)
Other resources in those lists (cpu, memory) and every other field stay as they are.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from quotaguard.kube.quantity import QuantityError, parse_quantity
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.cluster import ResourceQuota
from quotaguard.quota.diff import volcano_weight

JsonObject = dict[str, Any]


def _resource_totals(
    policy: TenantPolicy, quotas: Mapping[str, ResourceQuota]
) -> tuple[dict[str, int], dict[str, int], dict[str, int | None]]:
    deserved: dict[str, int] = {}
    guaranteed: dict[str, int] = {}
    capability: dict[str, int | None] = {}
    for gpu_class in policy.spec.gpu_classes:
        resource = gpu_class.resource
        target = quotas.get(gpu_class.name)
        nominal = target.nominal if target else 0
        lending = target.lending_limit if target else None
        borrowing = target.borrowing_limit if target else None
        deserved[resource] = deserved.get(resource, 0) + nominal
        guaranteed[resource] = guaranteed.get(resource, 0) + (
            nominal - lending if lending is not None else 0
        )
        before = capability.get(resource, 0)
        bound = None if borrowing is None or target is None else nominal + borrowing
        capability[resource] = None if before is None or bound is None else before + bound
    return deserved, guaranteed, capability


def _with(resources: object, values: Mapping[str, int | None]) -> JsonObject:
    updated = dict(resources) if isinstance(resources, Mapping) else {}
    for resource, amount in values.items():
        if amount is None:
            updated.pop(resource, None)
        else:
            updated[resource] = str(amount)
    return updated


def desired_spec(
    spec: Mapping[str, Any],
    policy: TenantPolicy,
    *,
    quotas: Mapping[str, ResourceQuota],
    weight: float | None,
) -> JsonObject:
    """The whole Queue spec to write (pure; `spec` is not modified)."""
    desired = copy.deepcopy(dict(spec))
    deserved, guaranteed, capability = _resource_totals(policy, quotas)
    desired["deserved"] = _with(spec.get("deserved"), deserved)
    desired["capability"] = _with(spec.get("capability"), capability)
    if not desired["capability"]:
        desired.pop("capability")
    guarantee = dict(spec.get("guarantee") or {})
    guarantee["resource"] = _with(guarantee.get("resource"), guaranteed)
    desired["guarantee"] = guarantee
    if weight is not None:
        desired["weight"] = volcano_weight(weight)
    if policy.volcano_parent:
        desired["parent"] = policy.volcano_parent
    return desired


def owned_spec(desired: Mapping[str, Any], policy: TenantPolicy) -> JsonObject:
    """What quotaguard applies of a built spec: the class resources of deserved, capability
    and guarantee.resource (maps: other resources stay with their managers), the weight, and
    the parent when the policy names one."""
    resources = {c.resource for c in policy.spec.gpu_classes}

    def only(values: object) -> JsonObject:
        found = dict(values) if isinstance(values, Mapping) else {}
        return {name: amount for name, amount in found.items() if name in resources}

    owned: JsonObject = {
        "deserved": only(desired.get("deserved")),
        "guarantee": {"resource": only((desired.get("guarantee") or {}).get("resource"))},
    }
    capability = only(desired.get("capability"))
    if capability:
        owned["capability"] = capability
    if "weight" in desired:
        owned["weight"] = desired["weight"]
    if policy.volcano_parent:
        owned["parent"] = policy.volcano_parent
    return owned


def queue_changes(current: Mapping[str, Any], desired: Mapping[str, Any]) -> list[str]:
    """Human-readable lines of what a write changes (for Events and logs)."""
    lines = []
    sections = {
        "deserved": (current.get("deserved"), desired.get("deserved")),
        "capability": (current.get("capability"), desired.get("capability")),
        "guarantee": (
            (current.get("guarantee") or {}).get("resource"),
            (desired.get("guarantee") or {}).get("resource"),
        ),
    }
    for section, (old, new) in sections.items():
        old, new = dict(old or {}), dict(new or {})
        for resource in sorted(old.keys() | new.keys()):
            if str(old.get(resource)) != str(new.get(resource)):
                lines.append(
                    f"{section}[{resource}] {old.get(resource, '-')} -> {new.get(resource, '-')}"
                )
    if current.get("weight") != desired.get("weight"):
        lines.append(f"weight {current.get('weight', '-')} -> {desired.get('weight')}")
    if current.get("parent") != desired.get("parent"):
        lines.append(f"parent {current.get('parent', '-')} -> {desired.get('parent')}")
    return lines


def _canonical_list(resources: object) -> dict[str, object]:
    found: dict[str, object] = {}
    for name, amount in dict(resources or {}).items() if isinstance(resources, Mapping) else ():
        try:
            found[name] = parse_quantity(amount)
        except QuantityError:
            found[name] = amount
    return found


def same_spec(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Equal up to how quantities are spelled (the API server may store `1000m` for `1`)."""

    def canonical(spec: Mapping[str, Any]) -> dict[str, Any]:
        normal = dict(spec)
        for section in ("deserved", "capability"):
            if section in normal:
                normal[section] = _canonical_list(normal[section])
        guarantee = dict(normal.get("guarantee") or {})
        if "resource" in guarantee:
            guarantee["resource"] = _canonical_list(guarantee["resource"])
            normal["guarantee"] = guarantee
        return normal

    return canonical(current) == canonical(desired)
