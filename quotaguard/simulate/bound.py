"""The most utilisation any arm could reach on a trace: limited by demand and capacity only.

A fluid model with no quotas and no nodes: every GPU-equivalent of the cluster serves any
workload, a workload may run from its arrival (rounded down to the sampling interval, which
only loosens the bound) at up to its GPU equivalents (the largest any arm gives it), and it
asks for its run time plus whatever any arm threw away by preemption and ran again. Capacity
goes first to the workloads with the most remaining run time at full rate, which gets the
most work done by a common end. No arm can allocate more: each of its schedules is one of
this model's.

With the geometry arm among the runs, the fluid cluster has what the nodes could offer at once
with each node in the layout of its pool that offers the most GPU equivalents
(`geometry_arm.widest_gpus`): no layout the arm chooses gives more, so the bound holds for it
too. Utilisation stays over the cluster as the trace lays it out, the same for every arm.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from quotaguard.simulate.arm_replay import ArmRun
from quotaguard.simulate.arms import ARMS
from quotaguard.simulate.geometry_arm import widest_gpus
from quotaguard.simulate.setup import Setup


def _jobs(shared: Setup, runs: Mapping[str, ArmRun]) -> list[tuple[float, float, float]]:
    """(arrival, GPU equivalents, GPU-seconds asked) of every workload some arm queued."""
    jobs = []
    for arrival in shared.arrivals:
        if arrival.tenant is None or arrival.at >= shared.horizon:
            continue
        rate = 0.0
        extra = 0.0
        for name, run in runs.items():
            arm = ARMS.get(name)
            verdict = arm.verdict(arrival) if arm is not None else arrival.verdict
            if not verdict.allowed or not verdict.request:
                continue
            rate = max(rate, verdict.gpus, *verdict.option_gpus)
            extra = max(extra, run.evicted_seconds.get(arrival.id, 0.0))
        if rate > 0:
            jobs.append((arrival.at, rate, rate * (arrival.duration + extra)))
    return jobs


def fluid_bound(
    jobs: Iterable[tuple[float, float, float]], capacity: float, horizon: float, step: float
) -> float:
    """GPU-equivalent seconds a fluid cluster of `capacity` could serve by `horizon`."""
    if capacity <= 0 or horizon <= 0:
        return 0.0
    step = max(step, horizon / 20_000)
    steps = math.ceil(horizon / step)
    arrivals: dict[int, list[list[float]]] = {}
    for at, rate, work in jobs:
        arrivals.setdefault(int(at // step), []).append([rate, work])
    active: list[list[float]] = []
    served = 0.0
    for index in range(steps):
        active.extend(arrivals.get(index, ()))
        if not active:
            continue
        length = min(step, horizon - index * step)
        room = capacity * length
        demand = sum(min(rate * length, work) for rate, work in active)
        if demand > room:
            active.sort(key=lambda job: -job[1] / job[0])
        for job in active:
            if room <= 0:
                break
            take = min(job[0] * length, job[1], room)
            job[1] -= take
            room -= take
            served += take
        active = [job for job in active if job[1] > 1e-9]
    return served


def bound_utilization(shared: Setup, runs: Mapping[str, ArmRun]) -> float:
    """The most any of these arms could reach (`bound.utilization` of the JSON)."""
    capacity = shared.capacity_gpus
    if capacity <= 0 or shared.horizon <= 0:
        return 0.0
    fluid = widest_gpus(shared) if "geometry" in runs else capacity
    served = fluid_bound(_jobs(shared, runs), fluid, shared.horizon, shared.interval)
    return min(1.0, served / (capacity * shared.horizon))
