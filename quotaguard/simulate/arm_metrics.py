"""What one arm of a simulation achieved, overall and per tenant.

* `utilization`: GPU-equivalent time allocated / capacity time (whole-GPU equivalents of every
  class, over the simulated span; work running past the end counts up to the end). Time spent
  on runs that preemption later threw away is allocated time too: it is counted here and,
  separately, in `gpuHoursLost`.
* `meanWait`, `p95Wait`: seconds from arrival to admission (p95 by nearest rank); for a
  preempted workload, to its last admission (the run that counts). Workloads still waiting at
  the end count with the wait they had so far. Workloads that can never be admitted (bigger
  than their queue could ever be admitted with in that arm: `Setup.never_fits`) are left out
  and counted in `neverFits`.
* `jainFairness`: Jain's index (sum x)^2 / (n sum x^2) over tenants with demand, where x is the
  share of a tenant's demand served: GPU-equivalent time of useful work it ran (not thrown
  away) / GPU-equivalent time it asked for (each workload's run time, cut at the end of the
  span). 1 is perfectly even.
* `denied`: workloads admission refused.
* `preempted`: evictions by preemption (a workload evicted twice counts twice);
  `gpuHoursLost`: GPU-equivalent hours those evicted runs had done, thrown away because the
  workload starts over (or, with `checkpointEvery`, since its last checkpoint). Work kept by a
  checkpoint is useful work and allocated time, not lost.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from quotaguard.simulate.arm_replay import ArmRun, Setup
from quotaguard.simulate.arms import ARMS, never_fits
from quotaguard.simulate.arrivals import Arrival
from quotaguard.simulate.guarantees import GuaranteeFigures, guarantee_figures


@dataclass(frozen=True, slots=True)
class Outcome:
    """Figures of one group of workloads (a tenant, or all of them)."""

    workloads: int  # arrived within the span
    admitted: int
    waiting: int  # still waiting at the end
    denied: int
    never_fits: int
    mean_wait: float
    p95_wait: float
    gpu_seconds: float  # GPU-equivalent seconds allocated within the span (lost ones too)
    demand_gpu_seconds: float  # GPU-equivalent seconds asked for within the span
    utilization: float  # gpu_seconds / capacity time
    preempted: int = 0  # evictions
    lost_gpu_seconds: float = 0.0  # allocated to runs that preemption threw away
    busy_gpu_seconds: float = 0.0  # kept busy (allocated x uses) by runs that counted
    useful_utilization: float = 0.0  # busy_gpu_seconds / capacity time
    unplaceable: int = 0  # admitted by quota, then waited for nodes

    @property
    def useful_gpu_seconds(self) -> float:
        return self.gpu_seconds - self.lost_gpu_seconds

    @property
    def served(self) -> float:
        if not self.demand_gpu_seconds:
            return 1.0
        return self.useful_gpu_seconds / self.demand_gpu_seconds


@dataclass(frozen=True, slots=True)
class ArmMetrics:
    name: str
    overall: Outcome
    jain_fairness: float
    tenants: Mapping[str, Outcome]
    unmanaged: int  # GPU workloads in namespaces of no tenant (or exempt): not queued
    plans: int
    # where the idle GPU-equivalent seconds were (engine.IDLE_KINDS), sampled every interval
    idle: Mapping[str, float] = field(default_factory=dict)
    # node layout changes started (None: the arm never changes a layout)
    layout_changes: int | None = None
    # what the tenants' guarantees were worth (guarantees.py)
    guarantees: GuaranteeFigures = field(default_factory=GuaranteeFigures)

    @property
    def fragmented_gpu_seconds(self) -> float:
        return self.idle.get("fragmented", 0.0)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted values (0 for none)."""
    if not values:
        return 0.0
    rank = max(1, math.ceil(fraction * len(values)))
    return values[rank - 1]


def jain(values: Iterable[float]) -> float:
    found = list(values)
    if not found:
        return 1.0
    squares = sum(x * x for x in found)
    if squares == 0:
        return 1.0
    return sum(found) ** 2 / (len(found) * squares)


class _Tally:
    def __init__(self) -> None:
        self.workloads = 0
        self.admitted = 0
        self.waiting = 0
        self.denied = 0
        self.never_fits = 0
        self.waits: list[float] = []
        self.gpu_seconds = 0.0
        self.demand = 0.0
        self.preempted = 0
        self.lost = 0.0
        self.busy = 0.0
        self.unplaceable = 0

    def outcome(self, capacity_seconds: float) -> Outcome:
        self.waits.sort()
        return Outcome(
            workloads=self.workloads,
            admitted=self.admitted,
            waiting=self.waiting,
            denied=self.denied,
            never_fits=self.never_fits,
            mean_wait=sum(self.waits) / len(self.waits) if self.waits else 0.0,
            p95_wait=percentile(self.waits, 0.95),
            gpu_seconds=self.gpu_seconds,
            demand_gpu_seconds=self.demand,
            utilization=self.gpu_seconds / capacity_seconds if capacity_seconds else 0.0,
            preempted=self.preempted,
            lost_gpu_seconds=self.lost,
            busy_gpu_seconds=self.busy,
            useful_utilization=self.busy / capacity_seconds if capacity_seconds else 0.0,
            unplaceable=self.unplaceable,
        )


def _count(shared: Setup, run: ArmRun, arrival: Arrival, tallies: list[_Tally], fits: bool) -> None:
    horizon = shared.horizon
    verdict = ARMS[run.name].verdict(arrival) if run.name in ARMS else arrival.verdict
    for tally in tallies:
        tally.workloads += 1
    if not verdict.allowed:
        for tally in tallies:
            tally.denied += 1
        return
    demand = verdict.gpus * min(arrival.duration, horizon - arrival.at)
    start = run.admitted_at.get(arrival.id)
    gpus, busy = run.rates.get(arrival.id, (verdict.gpus, verdict.gpus))
    kept = run.kept.get(arrival.id, 0.0)
    last_run = arrival.duration - kept
    seconds = kept + (0.0 if start is None else min(start + last_run, horizon) - start)
    lost = run.lost.get(arrival.id, 0.0)
    preempted = run.preempted.get(arrival.id, 0)
    unplaceable = arrival.id in run.unplaceable
    for tally in tallies:
        tally.demand += demand
        tally.gpu_seconds += gpus * seconds + lost
        tally.busy += busy * seconds
        tally.lost += lost
        tally.preempted += preempted
        tally.unplaceable += unplaceable
        if not fits:
            tally.never_fits += 1
        elif start is None:
            tally.waiting += 1
            tally.waits.append(horizon - arrival.at)
        else:
            tally.admitted += 1
            tally.waits.append(start - arrival.at)


def _kind(shared: Setup, arrival: Arrival) -> str:
    """What an arrival is to the GPU queues: queued, denied (outside every tenant),
    unmanaged, or nothing (late, or no GPUs)."""
    verdict = arrival.verdict
    if arrival.at >= shared.horizon:
        return "late"
    asks = bool(verdict.request or verdict.unknown)
    if arrival.tenant is None:
        if not verdict.allowed:
            return "denied"
        return "unmanaged" if asks else "none"
    return "queued" if asks or not verdict.allowed else "none"


def arm_metrics(shared: Setup, run: ArmRun) -> ArmMetrics:
    capacity_seconds = shared.capacity_gpus * shared.horizon
    overall = _Tally()
    tenants = {tenant.name: _Tally() for tenant in shared.policy.spec.tenants}
    unmanaged = 0
    arm = ARMS.get(run.name)
    bounds = arm.bounds(shared) if arm is not None else None
    fits_cache: dict[tuple[str, int], bool] = {}
    for arrival in shared.arrivals:
        kind = _kind(shared, arrival)
        if kind == "denied":
            overall.workloads += 1
            overall.denied += 1
        unmanaged += kind == "unmanaged"
        if kind != "queued" or arrival.tenant is None:
            continue
        key = (arrival.tenant, arrival.entry)
        fits = fits_cache.get(key)
        if fits is None:
            fits = arm is None or bounds is None or not never_fits(shared, arm, bounds, arrival)
            fits_cache[key] = fits
        _count(shared, run, arrival, [overall, tenants[arrival.tenant]], fits)
    shares = [(t.gpu_seconds - t.lost) / t.demand for t in tenants.values() if t.demand > 0]
    return ArmMetrics(
        name=run.name,
        overall=overall.outcome(capacity_seconds),
        jain_fairness=jain(shares),
        tenants={name: tally.outcome(capacity_seconds) for name, tally in tenants.items()},
        unmanaged=unmanaged,
        plans=run.plans,
        idle=dict(run.series.idle),
        layout_changes=len(run.layout_changes) if run.name == "geometry" else None,
        guarantees=guarantee_figures(
            shared, run, arm.verdict if arm is not None else lambda arrival: arrival.verdict
        ),
    )


def _outcome_json(outcome: Outcome) -> dict[str, Any]:
    return {
        "utilization": round(outcome.utilization, 4),
        "meanWait": round(outcome.mean_wait, 1),
        "p95Wait": round(outcome.p95_wait, 1),
        "denied": outcome.denied,
        "workloads": outcome.workloads,
        "admitted": outcome.admitted,
        "waiting": outcome.waiting,
        "neverFits": outcome.never_fits,
        "served": round(outcome.served, 4),
        "gpuHours": round(outcome.gpu_seconds / 3600, 2),
        "preempted": outcome.preempted,
        "gpuHoursLost": round(outcome.lost_gpu_seconds / 3600, 2),
        "usefulUtilization": round(outcome.useful_utilization, 4),
        "unplaceable": outcome.unplaceable,
    }


def metrics_json(metrics: ArmMetrics) -> dict[str, Any]:
    """The `M` of `{"static": M, "dynamic": M}` (cli.md), with a few extra fields."""
    overall = _outcome_json(metrics.overall)
    return {
        "utilization": overall.pop("utilization"),
        "meanWait": overall.pop("meanWait"),
        "p95Wait": overall.pop("p95Wait"),
        "jainFairness": round(metrics.jain_fairness, 4),
        "denied": overall.pop("denied"),
        **overall,
        "unmanaged": metrics.unmanaged,
        "fragmentedGpuHours": round(metrics.fragmented_gpu_seconds / 3600, 2),
        "idleGpuHours": {kind: round(seconds / 3600, 2) for kind, seconds in metrics.idle.items()},
        **({} if metrics.layout_changes is None else {"layoutChanges": metrics.layout_changes}),
        **guarantees_json(metrics.guarantees),
        "tenants": {
            name: {
                **_outcome_json(row),
                "fairGpuHours": round(
                    metrics.guarantees.tenant_fair_gpu_seconds.get(name, 0.0) / 3600, 2
                ),
            }
            for name, row in sorted(metrics.tenants.items())
        },
    }


def guarantees_json(figures: GuaranteeFigures) -> dict[str, Any]:
    return {
        "guarantees": round(figures.kept, 4),
        "guaranteeRestore": {
            "p50": round(figures.restore_p50, 1),
            "p95": round(figures.restore_p95, 1),
            "episodes": figures.episodes,
        },
        "guaranteedWait": {
            "mean": round(figures.guaranteed_mean_wait, 1),
            "p95": round(figures.guaranteed_p95_wait, 1),
            "workloads": figures.guaranteed_workloads,
        },
        "lentGpuHours": round(figures.lent_gpu_seconds / 3600, 2),
        "weightedFairness": round(figures.weighted_fairness, 4),
        "fairGpuHours": round(figures.fair_gpu_seconds / 3600, 2),
    }
