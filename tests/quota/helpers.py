"""Small policies and capacities written out by hand for worked examples."""

from __future__ import annotations

from typing import Any

from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.class_capacity import ClassCapacity
from tests import policies


def policy(tenants: list[dict[str, Any]], **rebalance: Any) -> TenantPolicy:
    """One h100 class; `rebalance` fields by their YAML names."""
    return policies.policy(tenants, rebalance=rebalance)


def h100(distributable: int) -> dict[str, ClassCapacity]:
    return {"h100": ClassCapacity("h100", "nvidia.com/gpu", distributable, 0, distributable)}
