"""The most utilisation any arm could reach on a trace: limited by demand, capacity and what
each workload may run on.

A fluid model with no quotas and no nodes: every GPU-equivalent of a class serves any workload
that some arm placed on that class (its admitted options, its pods as written), so a workload
that may only run on H100s never fills an idle A100 (`flowbound.flow_bound`). A workload may
run from its arrival (rounded down to the sampling interval, which only loosens the bound) at
up to its GPU equivalents (the largest any arm gives it), and it asks for its run time plus
whatever any arm threw away by preemption and ran again. Capacity goes first to the workloads
with the most remaining run time at full rate, which gets the most work done by a common end.
No arm can allocate more: each of its schedules is one of this model's.

With the geometry arm among the runs, the fluid cluster has what the nodes could offer at once
with each node in the layout of its pool that offers the most GPU equivalents
(`geometry_arm.widest_gpus`): no layout the arm chooses gives more, so the bound holds for it
too, and each class has the most units any layout of each node gives it. Utilisation stays over
the cluster as the trace lays it out, the same for every arm.

`fluid_bound`, the same model where any GPU serves any workload, is kept beside it: the JSON's
`bound.fluid`, which says how much of the gap between an arm and the fluid figure is only
workloads that may not run where GPUs are idle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from quotaguard.simulate.arm_replay import ArmRun
from quotaguard.simulate.arms import ARMS
from quotaguard.simulate.flowbound import FlowJob, flow_bound
from quotaguard.simulate.geometry_arm import widest_capacity, widest_gpus
from quotaguard.simulate.setup import Setup


def _jobs(shared: Setup, runs: Mapping[str, ArmRun]) -> list[FlowJob]:
    """Every workload some arm queued: its arrival, the most GPU equivalents any arm gave it,
    the GPU-seconds it asked of the arm that asked most, and every class any arm offered it."""
    jobs = []
    for arrival in shared.arrivals:
        if arrival.tenant is None or arrival.at >= shared.horizon:
            continue
        rate = 0.0
        extra = 0.0
        classes: set[str] = set()
        for name, run in runs.items():
            arm = ARMS.get(name)
            verdict = arm.verdict(arrival) if arm is not None else arrival.verdict
            if not verdict.allowed or not verdict.request:
                continue
            rate = max(rate, verdict.gpus, *verdict.option_gpus)
            extra = max(extra, run.evicted_seconds.get(arrival.id, 0.0))
            for request in (verdict.request, *verdict.options):
                classes.update(class_name for class_name, _ in request)
        if rate > 0:
            work = rate * (arrival.duration + extra)
            jobs.append(FlowJob(arrival.at, rate, work, frozenset(classes)))
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


@dataclass(frozen=True, slots=True)
class Bound:
    utilization: float  # respecting what each workload may run on (`bound.utilization`)
    fluid: float  # any GPU serving any workload (`bound.fluid`), never below `utilization`
    # per arm, the bound of the arms that run the pods as it does (`bound.arms`): what the
    # arm itself is measured against
    arms: Mapping[str, float] = field(default_factory=dict)


def bound_utilization(shared: Setup, runs: Mapping[str, ArmRun]) -> Bound:
    """The most any of these arms could reach (`bound` of the JSON): arms that run the pods as
    written and arms that run them as admitted ask for different classes, so each kind is
    bounded on its own and the larger figure bounds them all."""
    capacity = shared.capacity_gpus
    if capacity <= 0 or shared.horizon <= 0:
        return Bound(0.0, 0.0, {name: 0.0 for name in runs})
    kinds: dict[str, dict[str, ArmRun]] = {}
    for name, run in runs.items():
        arm = ARMS.get(name)
        kinds.setdefault(arm.requests if arm is not None else "admitted", {})[name] = run
    found = {kind: _bound_of(shared, same) for kind, same in kinds.items()}
    arms = {name: found[kind].utilization for kind, same in kinds.items() for name in same}
    return Bound(
        max((bound.utilization for bound in found.values()), default=0.0),
        max((bound.fluid for bound in found.values()), default=0.0),
        {name: arms[name] for name in runs},
    )


def _bound_of(shared: Setup, runs: Mapping[str, ArmRun]) -> Bound:
    capacity = shared.capacity_gpus
    geometry = "geometry" in runs
    total = widest_gpus(shared) if geometry else capacity
    jobs = _jobs(shared, runs)
    fluid = fluid_bound(
        ((job.at, job.rate, job.work) for job in jobs), total, shared.horizon, shared.interval
    )
    classes = shared.policy.classes_by_name
    rows = widest_capacity(shared) if geometry else shared.capacity
    per_class = {
        name: row.capacity * float(classes[name].gpu_equivalent)
        for name, row in rows.items()
        if name in classes
    }
    flow = flow_bound(jobs, per_class, total, shared.horizon, shared.interval)
    whole = capacity * shared.horizon
    # each is an upper bound of these arms; the flow is the tighter one but for float noise
    return Bound(min(1.0, min(flow, fluid) / whole), min(1.0, fluid / whole))
