"""Showback in the simulator: the GPU-hours each tenant's running workloads held, kept busy and
held idle per simulated day, sampled every controller interval as the engine samples its other
series, and their cost at the policy's prices.

Every arm counts its own; the report shows the arm that stands for the policy as written: the
`geometry` arm when the policy has `spec.geometry` pools (layouts that follow demand), else
the `dynamic` arm (quotaguard's quotas), else the last arm run. Busy is the trace's `uses`: the
simulator knows what every workload keeps busy, so nothing is unobserved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from quotaguard.policy.model import TenantPolicy
from quotaguard.policy.prices import model_of
from quotaguard.quota.showback import Holding, Hours, Key, Totals, rates_of
from quotaguard.quota.showback_report import showback_json, simulated_day
from quotaguard.simulate.placement import Assignment


class HeldNow:
    """GPUs the running workloads hold now, per tenant, class and GPU model, kept up to date as
    they start and stop: a sample then costs the number of keys, not of running workloads."""

    def __init__(self, policy: TenantPolicy, labels: Sequence[Mapping[str, str]]) -> None:
        self._share = {name: float(c.gpu_equivalent) for name, c in policy.classes_by_name.items()}
        self._labels = labels  # the cluster's, by node index (a relayout replaces an entry)
        self._models: dict[int, tuple[Mapping[str, str], str]] = {}
        self._held: dict[int, list[tuple[Key, float, float]]] = {}  # id -> (key, GPUs, busy)
        self._sums: dict[Key, list[float]] = {}  # key -> [GPUs, busy, workloads holding]

    def _model(self, node: int) -> str:
        labels = self._labels[node] if node < len(self._labels) else {}
        cached = self._models.get(node)
        if cached is None or cached[0] is not labels:
            cached = self._models[node] = (labels, model_of(labels))
        return cached[1]

    def start(self, ident: int, tenant: str, assignment: Assignment, busy_share: float) -> None:
        """A workload placed: `busy_share` of its GPUs kept busy."""
        held = self._held.setdefault(ident, [])
        for node, class_name, units in assignment:
            share = self._share.get(class_name)
            if share is None:
                continue
            key = (tenant, class_name, self._model(node))
            gpus = share * units
            held.append((key, gpus, gpus * busy_share))
            found = self._sums.setdefault(key, [0.0, 0.0, 0])
            found[0] += gpus
            found[1] += gpus * busy_share
            found[2] += 1

    def stop(self, ident: int) -> None:
        for key, gpus, busy in self._held.pop(ident, ()):
            found = self._sums[key]
            found[0] -= gpus
            found[1] -= busy
            found[2] -= 1
            if not found[2]:  # nothing left: no rounding residue either
                del self._sums[key]

    def rates(self) -> dict[Key, Hours]:
        return rates_of(Holding(*key, gpus, busy) for key, (gpus, busy, _) in self._sums.items())


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
