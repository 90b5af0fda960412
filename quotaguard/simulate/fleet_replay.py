"""A fleet replayed: one single-cluster replay per worker (`arm_replay`'s queues, placement,
preemption and samples) on one clock, with MultiKueue's dispatch from the manager between them.

Event order at one instant, as for one cluster: completions on every worker, then arrivals (a
workload with `cluster` is created on that worker, one without waits on the manager), then the
fleet controller's tick (planned arm), then an admission pass on every worker, then dispatch,
then placement on every worker. Dispatch takes the manager's waiting workloads by priority, then
arrival, and gives each to the first worker (in the trace's order) whose ClusterQueue admits it
now, else to the first whose nominal quota for the tenant has room for it beside what it runs
and what waits there (Kueue there reclaims what it lent). A worker whose API server is down
gets nothing, admits and binds nothing (what runs there runs on); a workload created on it
waits until it answers.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from quotaguard.planning.fleet_split import WorkerState
from quotaguard.quota.class_capacity import class_capacity
from quotaguard.simulate.arm_replay import ArmRun, Setup, _Replay
from quotaguard.simulate.arms import Arm
from quotaguard.simulate.arrivals import Arrival
from quotaguard.simulate.cohort import CohortConfig
from quotaguard.simulate.fleet_quotas import (
    Split,
    nominal_quotas,
    planned_quotas,
    static_split,
    worker_cohort,
)
from quotaguard.simulate.fleet_trace import TraceCluster
from quotaguard.simulate.preemption import Preemption
from quotaguard.simulate.queueing import QueueModel
from quotaguard.simulate.trace import Trace

FleetArmName = Literal["static", "planned"]
Key = tuple[int, float, int]  # (-priority, arrival time, id): the manager's order
Shape = tuple[str | None, int]  # what an arrival asks for (`_shape`)
FLEET_ARMS: tuple[FleetArmName, ...] = ("static", "planned")


@dataclass(frozen=True)
class FleetSetup:
    """What both fleet arms share: the single-cluster setup of each worker and where each
    arrival is submitted."""

    shared: Setup  # the fleet as one cluster: policy, arrivals, horizon, interval
    clusters: tuple[TraceCluster, ...]
    workers: Mapping[str, Setup]  # cluster -> its own nodes, capacity and every arrival
    submitted_to: Mapping[int, str]  # arrival id -> cluster, for those created on a worker
    split: Split  # the static split (and the planned arm's ceilings)

    @cached_property
    def queued(self) -> list[Arrival]:
        """The arrivals that enter a tenant's queue within the span, in arrival order."""
        shared = self.shared
        return [a for a in shared.arrivals if shared.queued(a) and a.at < shared.horizon]


def fleet_setup(shared: Setup, trace: Trace) -> FleetSetup:
    """Each worker's setup from the fleet's (`shared`: the fleet's nodes as one cluster)."""
    policy = shared.policy
    workers = {
        cluster.name: dataclasses.replace(
            shared,
            nodes=cluster.nodes,
            pods=cluster.pods,
            capacity=class_capacity(policy, cluster.nodes, cluster.pods),
        )
        for cluster in trace.clusters
    }
    cluster_of = {entry.index: entry.cluster for entry in trace.workloads}
    submitted = {
        arrival.id: named
        for arrival in shared.arrivals
        if (named := cluster_of.get(arrival.entry)) is not None
    }
    capacity = {name: distributable(setup) for name, setup in workers.items()}
    return FleetSetup(
        shared, trace.clusters, workers, submitted, static_split(shared.policy, capacity)
    )


def distributable(setup: Setup) -> dict[str, int]:
    return {name: row.distributable for name, row in setup.capacity.items()}


@dataclass
class FleetRun:
    """One fleet arm's outcome: each worker's run, where each arrival went, what the manager
    still held at each sample."""

    arm: FleetArmName
    workers: dict[str, ArmRun]
    ran_on: dict[int, str] = field(default_factory=dict)  # arrival id -> worker
    on_manager: set[int] = field(default_factory=set)  # never dispatched by the end
    held: set[int] = field(default_factory=set)  # created on a worker still down at the end
    # tenant -> class -> units waiting on the manager, per sample
    manager_waiting: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    plans: int = 0


def _static_queues(
    split: Mapping[str, Mapping[str, tuple[int, int | None]]], preemption: Preemption
) -> Callable[[Setup], CohortConfig]:
    """A worker's queues as it starts: the static split (the planned arm's first tick replans)."""

    def queues(setup: Setup) -> CohortConfig:
        return worker_cohort(setup.policy, split, preemption)

    return queues


class _FleetReplay:
    def __init__(self, fleet: FleetSetup, arm: FleetArmName) -> None:
        self.fleet, self.arm = fleet, arm
        self.replays: dict[str, _Replay] = {}
        preemption = fleet.shared.preemption
        for cluster in fleet.clusters:
            queues = _static_queues(fleet.split.get(cluster.name, {}), preemption)
            spec = Arm(
                f"fleet-{arm}",
                f"a worker of the fleet, {arm} quotas",
                "admitted",
                queues=queues,
                bounds=queues,
            )
            self.replays[cluster.name] = _Replay(fleet.workers[cluster.name], spec)
        self.run = FleetRun(arm, {name: r.run for name, r in self.replays.items()})
        # what waits on the manager, by what it asks for (`_shape`): (-priority, at, id) in
        # dispatch order
        self.waiting: dict[Shape, list[Key]] = {}
        self.units: dict[str, dict[str, int]] = {}  # tenant -> class -> units waiting there
        self.changed = False  # whether a worker may take more than at the last dispatch
        self.held: list[Arrival] = []  # created on a worker that is down
        self.by_id = {a.id: a for a in fleet.queued}

    def _answers(self, now: float) -> list[TraceCluster]:
        return [cluster for cluster in self.fleet.clusters if cluster.answers(now)]

    def arrive(self, arrival: Arrival, now: float) -> None:
        named = self.fleet.submitted_to.get(arrival.id)
        if named is None:
            key = (-arrival.priority, arrival.at, arrival.id)
            bisect.insort(self.waiting.setdefault(_shape(arrival), []), key)
            self._count(arrival, 1)
            self.changed = True
        elif not next(c for c in self.fleet.clusters if c.name == named).answers(now):
            self.held.append(arrival)
        else:
            self._create(named, arrival)

    def _create(self, cluster: str, arrival: Arrival) -> None:
        self.replays[cluster].arrive(arrival)
        self.run.ran_on[arrival.id] = cluster

    def release_held(self, now: float) -> None:
        answering = {c.name for c in self._answers(now)}
        still = []
        for arrival in self.held:
            named = self.fleet.submitted_to[arrival.id]
            if named in answering:
                self._create(named, arrival)
            else:
                still.append(arrival)
        self.held = still

    def tick(self, now: float) -> None:
        """The fleet controller's cycle (planned arm): every worker that answers gets the
        nominal quotas planned for it."""
        if self.arm != "planned":
            return
        self.run.plans += 1
        policy, answering = self.fleet.shared.policy, {c.name for c in self._answers(now)}
        states = [
            _worker_state(name, replay.model, self.fleet.workers[name], name in answering)
            for name, replay in self.replays.items()
        ]
        planned = planned_quotas(policy, states, self.units)
        self.changed = True
        for name in answering:
            replay = self.replays[name]
            cohort = worker_cohort(
                policy,
                self.fleet.split.get(name, {}),
                self.fleet.shared.preemption,
                planned.get(name, {}),
            )
            if cohort != replay.model.cohort:
                replay.model.configure(cohort)

    def _count(self, arrival: Arrival, sign: int) -> None:
        assert arrival.tenant is not None
        row = self.units.setdefault(arrival.tenant, {})
        for name, amount in arrival.verdict.request:
            row[name] = row.get(name, 0) + sign * amount

    def dispatch(self, now: float) -> None:
        """Give what waits on the manager to the workers, in its order (see the module
        docstring). A request no worker took is not tried again in the same pass: dispatching
        only takes room; so each pass walks the heads of the requests that wait."""
        if not self.changed:
            return
        self.changed = False
        answering = self._answers(now)
        heads = [(keys[0], shape) for shape, keys in self.waiting.items() if keys]
        heapq.heapify(heads)
        while heads:
            key, shape = heapq.heappop(heads)
            arrival = self.by_id[key[2]]
            target = _target(self.replays, answering, arrival)
            if target is None:
                continue
            keys = self.waiting[shape]
            keys.pop(0)
            if keys:
                heapq.heappush(heads, (keys[0], shape))
            self._create(target, arrival)
            self._count(arrival, -1)
            self.replays[target].admit(now)

    def sample(self, now: float) -> None:
        for replay in self.replays.values():
            replay.sample(now)
        units = self.units
        for tenant in (t.name for t in self.fleet.shared.policy.spec.tenants):
            row = self.run.manager_waiting.setdefault(tenant, {})
            for gpu_class in self.fleet.shared.policy.spec.gpu_classes:
                amount = units.get(tenant, {}).get(gpu_class.name, 0)
                row.setdefault(gpu_class.name, []).append(amount)

    def step(self, now: float, queued: Sequence[Arrival], position: int, *, ticking: bool) -> int:
        """Everything at one instant (the module docstring's order); the arrivals' position."""
        completion = self.next_completion()
        if completion is not None and completion <= now:
            self.changed = True
        for worker in self.replays.values():
            worker.complete(now)
        self.release_held(now)
        while position < len(queued) and queued[position].at <= now:
            self.arrive(queued[position], now)
            position += 1
        if ticking:
            self.tick(now)
        # a worker whose API server is down admits and binds nothing; what runs there runs on
        answering = [self.replays[cluster.name] for cluster in self._answers(now)]
        for worker in answering:
            worker.admit(now)
        self.dispatch(now)
        for worker in answering:
            if worker.placing:
                worker.place(now)
        if ticking:
            self.sample(now)
        return position

    def next_completion(self) -> float | None:
        ends = [r.completions[0][0] for r in self.replays.values() if r.completions]
        return min(ends) if ends else None


def _shape(arrival: Arrival) -> Shape:
    """What an arrival asks for, cheaply: its tenant and its verdict (one object per manifest
    and namespace)."""
    return arrival.tenant, id(arrival.verdict)


def _worker_state(name: str, model: QueueModel, setup: Setup, reachable: bool) -> WorkerState:
    """A worker as the fleet controller reads it: capacity, admitted usage, quotas held."""
    quotas = nominal_quotas(model.cohort)
    if not reachable:
        return WorkerState(name, False, quotas=quotas, reason="down in the trace")
    usage = {tenant: dict(model.usage(tenant)) for tenant in model.queue_names()}
    return WorkerState(name, True, capacity=distributable(setup), usage=usage, quotas=quotas)


def _target(
    replays: Mapping[str, _Replay], answering: Sequence[TraceCluster], arrival: Arrival
) -> str | None:
    """The worker MultiKueue dispatches the arrival to now (see the module docstring)."""
    tenant = arrival.tenant
    assert tenant is not None
    options = arrival.verdict.options or (arrival.verdict.request,)
    for cluster in answering:
        model = replays[cluster.name].model
        if any(model.fits(tenant, option) for option in options):
            return cluster.name
    for cluster in answering:
        model = replays[cluster.name].model
        if any(_within_nominal(model, tenant, option) for option in options):
            return cluster.name
    return None


def _within_nominal(model: QueueModel, tenant: str, request: Sequence[tuple[str, int]]) -> bool:
    """Whether the tenant's nominal quota on the worker has room for the request beside what
    it runs and what already waits there: Kueue would reclaim what it lent for it."""
    queue = next((q for q in model.cohort.queues if q.name == tenant), None)
    if queue is None:
        return False
    used, waiting = model.usage(tenant), model.pending_units(tenant)
    return all(
        name in queue.quotas
        and used.get(name, 0) + waiting.get(name, 0) + units <= queue.quotas[name].nominal
        for name, units in request
    )


def run_fleet(fleet: FleetSetup, arm: FleetArmName) -> FleetRun:
    """Replay the arrivals over the fleet with one arm's quotas; deterministic."""
    replay = _FleetReplay(fleet, arm)
    queued, horizon, interval = fleet.queued, fleet.shared.horizon, fleet.shared.interval
    next_tick, position = 0.0, 0
    while True:
        now = next_tick
        if position < len(queued):
            now = min(now, queued[position].at)
        completion = replay.next_completion()
        if completion is not None:
            now = min(now, completion)
        if now >= horizon:
            break
        ticking = next_tick <= now
        position = replay.step(now, queued, position, ticking=ticking)
        if ticking:
            next_tick += interval
    replay.run.on_manager = {key[2] for keys in replay.waiting.values() for key in keys}
    replay.run.held = {arrival.id for arrival in replay.held}
    return replay.run
