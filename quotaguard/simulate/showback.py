"""Showback in the simulator: the GPU-hours each tenant's running workloads held, kept busy and
held idle per simulated day, sampled every controller interval as the engine samples its other
series, and their cost at the policy's prices.

Every arm counts its own; the report shows the arm that stands for the policy as written: the
`geometry` arm when the policy has `spec.geometry` pools (layouts that follow demand), else
the `dynamic` arm (quotaguard's quotas), else the last arm run. Busy is the trace's `uses`: the
simulator knows what every workload keeps busy, so nothing is unobserved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from quotaguard.policy.model import TenantPolicy
from quotaguard.policy.prices import model_of
from quotaguard.quota.showback import Holding, Totals
from quotaguard.quota.showback_report import showback_json, simulated_day
from quotaguard.simulate.placement import Assignment

# (tenant, where its pods were placed, share of its GPUs kept busy)
Running = tuple[str, Assignment, float]


def running_holdings(
    policy: TenantPolicy, labels: Sequence[Mapping[str, str]], running: Iterable[Running]
) -> list[Holding]:
    """What the running workloads hold, by class and the GPU model of each node."""
    classes = policy.classes_by_name
    found = []
    for tenant, assignment, busy_share in running:
        for node, class_name, units in assignment:
            gpu_class = classes.get(class_name)
            if gpu_class is None:
                continue
            gpus = float(gpu_class.gpu_equivalent) * units
            model = model_of(labels[node]) if node < len(labels) else model_of({})
            found.append(Holding(tenant, class_name, model, gpus, gpus * busy_share))
    return found


def showback_arm(policy: TenantPolicy, arms: Sequence[str]) -> str | None:
    """The arm whose showback the report shows (see the module docstring)."""
    geometry = policy.spec.geometry
    if geometry is not None and geometry.pools and "geometry" in arms:
        return "geometry"
    if "dynamic" in arms:
        return "dynamic"
    return arms[-1] if arms else None


def simulation_showback(policy: TenantPolicy, arms: Mapping[str, Totals]) -> dict[str, Any]:
    """The `showback` object of `simulate -o json`, from each arm's GPU-hours."""
    arm = showback_arm(policy, tuple(arms))
    totals = arms[arm] if arm is not None else {}
    return showback_json(
        totals, policy.spec.showback, basis="simulated", day_label=simulated_day, arm=arm
    )
