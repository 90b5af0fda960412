"""Fair-share weights from usage history decayed with `usageHalfLife`.

Usage is counted in whole-GPU equivalents (a class unit is slices/7 of a GPU, divided by its
replicas when shared). The history of tenant t is its usage decayed exponentially:

    U_t(now) = U_t(then) x 2^(-dt/H) + u_t x H/ln2 x (1 - 2^(-dt/H))

(H = usageHalfLife; the second term is the exact integral of the usage u_t held over dt,
decayed). A first observation starts the history as if u_t had always been held (u_t x H/ln2).

The weight written to the tenant's queue is

    entitlement_t = max(base_t / sum(base), guaranteed_t / sum(guaranteed))
    share_t       = U_t / sum(U)
    weight_t      = base_t x clamp((entitlement_t / share_t) ** K, 1/F, F)

with K = 1/2 (so a tenant using four times its entitlement gets half its base weight) and
F = rebalance.maxWeightFactor (default 2). A tenant that used nothing gets F x base; with no
usage anywhere every weight is its base weight.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.demand import Demand

EXPONENT = 0.5
WEIGHT_DECIMALS = 3


def usage_in_gpus(policy: TenantPolicy, demand: Demand) -> dict[str, float]:
    """Tenant -> admitted or running usage in whole-GPU equivalents, over all classes."""
    classes = policy.classes_by_name
    return {
        tenant: sum(
            row.usage * float(classes[name].gpu_equivalent)
            for name, row in rows.items()
            if name in classes
        )
        for tenant, rows in demand.items()
    }


@dataclass(frozen=True, slots=True)
class UsageHistory:
    """Decayed usage per tenant in GPU-equivalent seconds, as of `at` (state in, state out)."""

    at: float | None = None
    decayed: Mapping[str, float] = field(default_factory=dict)

    def record(self, usage: Mapping[str, float], now: float, half_life: float) -> UsageHistory:
        """The history after `usage` (GPU equivalents per tenant) was held until `now`."""
        steady = half_life / math.log(2)
        if self.at is None:
            return UsageHistory(now, {t: max(0.0, u) * steady for t, u in sorted(usage.items())})
        elapsed = max(0.0, now - self.at)
        kept = 0.5 ** (elapsed / half_life)
        decayed = {}
        for tenant in sorted(usage.keys() | self.decayed.keys()):
            held = max(0.0, usage.get(tenant, 0.0))
            decayed[tenant] = self.decayed.get(tenant, 0.0) * kept + held * steady * (1 - kept)
        return UsageHistory(now, decayed)


def _guaranteed_gpus(policy: TenantPolicy) -> dict[str, float]:
    classes = policy.classes_by_name
    return {
        tenant.name: sum(
            quota.guaranteed * float(classes[name].gpu_equivalent)
            for name, quota in tenant.quota.items()
            if name in classes
        )
        for tenant in policy.spec.tenants
    }


def fair_share_weights(policy: TenantPolicy, history: UsageHistory) -> dict[str, float]:
    """Tenant -> weight adjusted by its decayed usage (see the module docstring)."""
    tenants = policy.spec.tenants
    base = {tenant.name: tenant.weight for tenant in tenants}
    total_usage = sum(max(0.0, history.decayed.get(name, 0.0)) for name in base)
    if total_usage <= 0:
        return dict(base)
    factor_bound = policy.spec.rebalance.max_weight_factor
    total_base = sum(base.values())
    guaranteed = _guaranteed_gpus(policy)
    total_guaranteed = sum(guaranteed.values())
    weights = {}
    for name, weight in base.items():
        entitlement = weight / total_base
        if total_guaranteed > 0:
            entitlement = max(entitlement, guaranteed[name] / total_guaranteed)
        share = max(0.0, history.decayed.get(name, 0.0)) / total_usage
        factor = factor_bound if share <= 0 else (entitlement / share) ** EXPONENT
        factor = min(max(factor, 1 / factor_bound), factor_bound)
        adjusted = weight * factor
        # Rounded for stable output, unless rounding would make a tiny weight zero.
        weights[name] = round(adjusted, WEIGHT_DECIMALS) or adjusted
    return weights


def held_weights(
    held: Mapping[str, float] | None, weights: Mapping[str, float], tolerance: float
) -> dict[str, float]:
    """`weights`, except that a tenant whose weight moved by at most `tolerance` (relative)
    from the one `held` keeps the held one. Decayed usage moves every weight a little every
    interval, and quotas are shared by weight: without this every such move would move every
    tenant's quota by a unit or two, interval after interval (and write every queue)."""
    if not held or tolerance <= 0:
        return dict(weights)
    kept = {}
    for name, weight in weights.items():
        before = held.get(name)
        close = before is not None and abs(weight - before) <= tolerance * max(abs(before), 1e-9)
        kept[name] = before if close and before is not None else weight
    return kept
