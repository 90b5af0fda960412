"""The order in which Kueue tries a tenant's flavors: what a rewrite list (`to: [h100, a100]`)
asks of the tenant's ClusterQueue.

Kueue tries the flavors of a resource group in the order the ClusterQueue lists them, one
order per ClusterQueue. A tenant's lists name the order they want; every other class keeps
the policy's order behind them.
"""

from __future__ import annotations

from collections.abc import Mapping

from quotaguard.policy.model import GpuClass, Tenant, TenantPolicy


def preferred_classes(tenant: Tenant) -> tuple[str, ...]:
    """The classes the tenant's rewrite lists name, in the order they first appear."""
    names: dict[str, None] = {}
    for rule in tenant.rewrite:
        if rule.fungible:
            names.update(dict.fromkeys(rule.classes))
    return tuple(names)


def class_order(policy: TenantPolicy, tenant: Tenant | None) -> tuple[GpuClass, ...]:
    """Every class of the policy, those the tenant's lists name first (in their order)."""
    classes = policy.classes_by_name
    first = (
        [classes[name] for name in preferred_classes(tenant) if name in classes] if tenant else []
    )
    named = {gpu_class.name for gpu_class in first}
    return (*first, *(c for c in policy.spec.gpu_classes if c.name not in named))


def flavor_order(policy: TenantPolicy, tenant: Tenant | None) -> tuple[str, ...]:
    """The ResourceFlavors of the policy's classes in the order the tenant's queue lists them."""
    return tuple(dict.fromkeys(c.flavor for c in class_order(policy, tenant)))


def compatible(gpu_class: GpuClass, selector: Mapping[str, object]) -> bool:
    """Whether a pod with this nodeSelector can run on the class's nodes (Kueue adds the
    flavor's nodeLabels; a key the pod sets otherwise rules the flavor out)."""
    return all(selector.get(key, value) == value for key, value in gpu_class.node_selector.items())


def fungible_resources(policy: TenantPolicy, tenant: Tenant) -> frozenset[str]:
    """The resources the tenant's lists leave to Kueue to pick a flavor of."""
    classes = policy.classes_by_name
    return frozenset(
        classes[rule.classes[0]].resource
        for rule in tenant.rewrite
        if rule.fungible and rule.classes[0] in classes
    )
