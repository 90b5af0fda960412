"""The tenant policy: its model, its catalogue of GPU hardware, its loader and its checks."""

from quotaguard.policy.model import (
    BEST_FIT,
    ClassQuota,
    GpuClass,
    Rebalance,
    RewriteCondition,
    RewriteRule,
    Tenant,
    TenantPolicy,
)

__all__ = [
    "BEST_FIT",
    "ClassQuota",
    "GpuClass",
    "Rebalance",
    "RewriteCondition",
    "RewriteRule",
    "Tenant",
    "TenantPolicy",
]
