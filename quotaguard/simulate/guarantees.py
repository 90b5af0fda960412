"""What a tenant's guarantee was worth in one arm: the figures where quotas that follow demand
can differ from a hand-written pool even when utilisation is the same.

All are read from the samples every interval (`Series`), so their resolution is the interval:

* restore time (`guaranteeRestore`): an episode starts at a sample where a tenant has work
  waiting for a class while its usage of the class is below its guarantee, and ends at the
  first sample where it is not (usage reached the guarantee, or nothing waits any more); one
  still open at the end lasts until the end. `guarantees` is the share of episodes that ended
  by the next sample: restored within one interval.
* `guaranteedWait`: the waits of the workloads that arrived within their tenant's guarantee
  (the last sample's usage plus the workload's request at most the guarantee, in every class
  it asks for).
* `lentGpuHours`: guaranteed capacity its tenant left unused that others ran on: per class
  and sample, what the tenants above their guarantees use beyond the capacity nobody is
  guaranteed, at most what the tenants below theirs leave unused.
* `weightedFairness`: per day (or the whole span if shorter), each tenant's fair GPU-hours
  are the weighted max-min share of the capacity given its demand (what it ran plus what
  waited, both sampled): water-filling by the policy's weights, no tenant above its demand.
  The index is Jain's over (GPU-hours run / fair GPU-hours) of the tenants with demand,
  averaged over the days; `fairGpuHours` is the GPU-hours run within each tenant's fair share.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from quotaguard.simulate.arm_replay import ArmRun, Setup
from quotaguard.simulate.arrivals import Arrival, Verdict

DAY = 86400.0
EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class GuaranteeFigures:
    episodes: int = 0
    restored_in_interval: int = 0
    restore_p50: float = 0.0
    restore_p95: float = 0.0
    guaranteed_workloads: int = 0
    guaranteed_mean_wait: float = 0.0
    guaranteed_p95_wait: float = 0.0
    lent_gpu_seconds: float = 0.0
    weighted_fairness: float = 1.0
    fair_gpu_seconds: float = 0.0  # run within the fair share, all tenants
    tenant_fair_gpu_seconds: Mapping[str, float] = field(default_factory=dict)

    @property
    def kept(self) -> float:
        """Share of the episodes restored within one interval (1 when there were none)."""
        return self.restored_in_interval / self.episodes if self.episodes else 1.0


def _nearest_rank(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    values.sort()
    return values[max(1, math.ceil(fraction * len(values))) - 1]


def _durations(times: Sequence[float], horizon: float) -> list[float]:
    """Seconds each sample stands for: to the next sample, the last one to the end."""
    ends = [*times[1:], max(horizon, times[-1])] if times else []
    return [end - start for start, end in zip(times, ends, strict=True)]


def restore_episodes(
    times: Sequence[float],
    usage: Sequence[float],
    waiting: Sequence[float],
    guaranteed: float,
    horizon: float,
) -> list[tuple[float, bool]]:
    """(seconds to restore, whether it ended before the span did) per episode below the
    guarantee with work waiting."""
    found = []
    started: float | None = None
    for now, used, pending in zip(times, usage, waiting, strict=True):
        short = pending > 0 and used < guaranteed
        if short and started is None:
            started = now
        elif not short and started is not None:
            found.append((now - started, True))
            started = None
    if started is not None:
        found.append((max(0.0, horizon - started), False))
    return found


def weighted_fair_shares(
    demand: Mapping[str, float], weights: Mapping[str, float], capacity: float
) -> dict[str, float]:
    """Max-min fair shares of `capacity` in proportion to `weights`, none above its demand."""
    shares = dict.fromkeys(demand, 0.0)
    active = {name for name, asked in demand.items() if asked > EPSILON}
    left = capacity
    while active and left > EPSILON:
        total_weight = sum(weights.get(name, 1.0) for name in active)
        step = {name: left * weights.get(name, 1.0) / total_weight for name in active}
        filled = {name for name in active if shares[name] + step[name] >= demand[name] - EPSILON}
        if not filled:
            for name in active:
                shares[name] += step[name]
            break
        for name in filled:
            left -= demand[name] - shares[name]
            shares[name] = demand[name]
        active -= filled
    return shares


def jain(values: Sequence[float]) -> float:
    squares = sum(x * x for x in values)
    return sum(values) ** 2 / (len(values) * squares) if squares else 1.0


def _lent(shared: Setup, run: ArmRun, durations: Sequence[float]) -> float:
    series, lent = run.series, 0.0
    classes = shared.policy.classes_by_name
    for name, row in shared.capacity.items():
        guarantees = {
            tenant.name: float(tenant.quota[name].guaranteed)
            for tenant in shared.policy.spec.tenants
            if name in tenant.quota and name in series.usage.get(tenant.name, {})
        }
        if not guarantees:
            continue
        unguaranteed = max(0.0, row.distributable - sum(guarantees.values()))
        rows = {tenant: series.usage[tenant][name] for tenant in guarantees}
        equivalent = float(classes[name].gpu_equivalent)
        for index, seconds in enumerate(durations):
            unused = above = 0.0
            for tenant, guaranteed in guarantees.items():
                used = rows[tenant][index]
                unused += max(0.0, guaranteed - used)
                above += max(0.0, used - guaranteed)
            lent += min(unused, max(0.0, above - unguaranteed)) * equivalent * seconds
    return lent


def _tenant_demand(shared: Setup, run: ArmRun, tenant: str) -> list[float]:
    """GPU equivalents run or waiting per sample."""
    series = run.series
    classes = shared.policy.classes_by_name
    found = list(series.allocated.get(tenant, [0.0] * len(series.times)))
    for name, waiting in series.waiting_units.get(tenant, {}).items():
        equivalent = float(classes[name].gpu_equivalent) if name in classes else 1.0
        found = [total + units * equivalent for total, units in zip(found, waiting, strict=True)]
    return found


def _fairness(
    shared: Setup, run: ArmRun, durations: Sequence[float]
) -> tuple[float, dict[str, float]]:
    series = run.series
    weights = {tenant.name: tenant.weight for tenant in shared.policy.spec.tenants}
    tenants = sorted(name for name in series.allocated if name in weights)
    demand_rows = {name: _tenant_demand(shared, run, name) for name in tenants}
    days: dict[int, tuple[dict[str, float], dict[str, float], list[float]]] = {}
    for index, (now, seconds) in enumerate(zip(series.times, durations, strict=True)):
        got, asked, capacity = days.setdefault(
            int(now // DAY), (dict.fromkeys(tenants, 0.0), dict.fromkeys(tenants, 0.0), [0.0])
        )
        capacity[0] += series.capacity[index] * seconds
        for name in tenants:
            got[name] += series.allocated[name][index] * seconds
            asked[name] += demand_rows[name][index] * seconds
    indices, fair_run = [], dict.fromkeys(tenants, 0.0)
    for got, asked, capacity in days.values():
        fair = weighted_fair_shares(asked, weights, capacity[0])
        ratios = [got[name] / fair[name] for name in tenants if fair[name] > EPSILON]
        if ratios:
            indices.append(jain(ratios))
        for name in tenants:
            fair_run[name] += min(got[name], fair[name])
    return (sum(indices) / len(indices) if indices else 1.0), fair_run


def _restores(shared: Setup, run: ArmRun) -> tuple[list[float], int]:
    series, horizon = run.series, shared.horizon
    restores, within = [], 0
    for tenant in shared.policy.spec.tenants:
        usage = series.usage.get(tenant.name, {})
        waiting = series.waiting_units.get(tenant.name, {})
        for name, quota in tenant.quota.items():
            if not quota.guaranteed or name not in usage or name not in waiting:
                continue
            for seconds, ended in restore_episodes(
                series.times, usage[name], waiting[name], quota.guaranteed, horizon
            ):
                restores.append(seconds)
                within += ended and seconds <= shared.interval + EPSILON
    return restores, within


def _guaranteed_waits(
    shared: Setup, run: ArmRun, verdict_of: Callable[[Arrival], Verdict]
) -> list[float]:
    series, horizon = run.series, shared.horizon
    guarantees = {
        tenant.name: {name: quota.guaranteed for name, quota in tenant.quota.items()}
        for tenant in shared.policy.spec.tenants
    }
    waits = []
    for arrival in shared.arrivals:
        if arrival.tenant is None or arrival.at >= horizon:
            continue
        verdict = verdict_of(arrival)
        if not verdict.allowed or not verdict.request:
            continue
        sample = bisect.bisect_right(series.times, arrival.at) - 1
        usage = series.usage.get(arrival.tenant, {})
        owed = guarantees.get(arrival.tenant, {})
        if all(
            (usage[name][sample] if sample >= 0 and name in usage else 0) + units
            <= owed.get(name, 0)
            for name, units in verdict.request
        ):
            start = run.admitted_at.get(arrival.id)
            waits.append((horizon if start is None else start) - arrival.at)
    return waits


def guarantee_figures(
    shared: Setup, run: ArmRun, verdict_of: Callable[[Arrival], Verdict]
) -> GuaranteeFigures:
    """The figures above for one arm; `verdict_of` gives the request the arm's pods make."""
    series = run.series
    if not series.times:
        return GuaranteeFigures()
    durations = _durations(series.times, shared.horizon)
    restores, within = _restores(shared, run)
    waits = _guaranteed_waits(shared, run, verdict_of)
    fairness, fair_run = _fairness(shared, run, durations)
    return GuaranteeFigures(
        episodes=len(restores),
        restored_in_interval=within,
        restore_p50=_nearest_rank(restores, 0.5),
        restore_p95=_nearest_rank(restores, 0.95),
        guaranteed_workloads=len(waits),
        guaranteed_mean_wait=sum(waits) / len(waits) if waits else 0.0,
        guaranteed_p95_wait=_nearest_rank(waits, 0.95),
        lent_gpu_seconds=_lent(shared, run, durations),
        weighted_fairness=fairness,
        fair_gpu_seconds=sum(fair_run.values()),
        tenant_fair_gpu_seconds=fair_run,
    )
