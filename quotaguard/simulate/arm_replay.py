"""The discrete-event simulation of one arm: arrivals, admission, placement, completions and
quota-controller ticks on one clock.

Kueue admits a workload by quota (`queueing.QueueModel`); then kube-scheduler must place
every pod of it on a node (`placement.Cluster`). A workload admitted but not placeable holds
its quota and waits, retried whenever GPUs are freed; its run starts when it is placed. So
waiting times run from arrival to placement.

Every arm runs with the same preemption setting on every queue (see `preemption.py`); an
evicted workload leaves its nodes, is requeued and, admitted and placed again, runs from its
last checkpoint (`checkpointEvery` in the trace) or, without checkpoints, its full duration
again.

Event order at one instant: completions, then arrivals, then the controller tick, then one
admission pass, then one placement pass. The run stops at the trace's end; workloads still
waiting then are reported with the wait they had so far.

Every interval the engine also samples where idle GPUs are (`Series.idle`, GPU-equivalent
seconds), per class: idle while a waiting workload that needs the class would fit into the
idle total but onto no node (`fragmented`); idle while work for the class waits for quota
or for more than is idle (`waiting`); idle while only work for other classes waits
(`wrongSize`: slices, shared GPUs or models nobody waiting can use); idle with nothing
waiting at all (`noDemand`). `heldIdle` is allocated but not kept busy (`uses` below 1).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from quotaguard.quota.showback import Totals, accumulate
from quotaguard.simulate.arm_controller import ArmController, planned_cohort
from quotaguard.simulate.arm_showback import HeldNow
from quotaguard.simulate.arms import (
    ARMS,
    Arm,
    dynamic_bounds,
    static_cohort,
)
from quotaguard.simulate.arrivals import Arrival, Verdict
from quotaguard.simulate.geometry_arm import LayoutChange
from quotaguard.simulate.placement import Assignment, Cluster, Gang
from quotaguard.simulate.placing import Placing
from quotaguard.simulate.queued import QueuedWorkload
from quotaguard.simulate.queueing import QueueModel
from quotaguard.simulate.setup import Setup, StaticBaseline, setup

__all__ = [
    "ARMS",
    "ArmController",
    "ArmName",
    "ArmRun",
    "Series",
    "Setup",
    "StaticBaseline",
    "dynamic_bounds",
    "planned_cohort",
    "run_arm",
    "setup",
    "static_cohort",
]

ArmName = str  # a key of ARMS
Progress = Callable[[float], None]
IDLE_KINDS = ("fragmented", "waiting", "wrongSize", "noDemand", "heldIdle")


@dataclass
class Series:
    """Samples every interval, for charts."""

    times: list[float] = field(default_factory=list)
    capacity: list[float] = field(default_factory=list)  # whole-GPU equivalents
    allocated: dict[str, list[float]] = field(default_factory=dict)  # tenant -> GPU equivalents
    useful: list[float] = field(default_factory=list)  # GPU equivalents kept busy, all tenants
    pending: dict[str, list[int]] = field(default_factory=dict)  # tenant -> workloads waiting
    nominal: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # tenant -> class
    usage: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # tenant -> class
    waiting_units: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    weight: dict[str, list[float]] = field(default_factory=dict)
    # kind (IDLE_KINDS) -> GPU-equivalent seconds, sampled every interval
    idle: dict[str, float] = field(default_factory=lambda: dict.fromkeys(IDLE_KINDS, 0.0))


@dataclass
class ArmRun:
    name: ArmName
    # arrival id -> when its last run started (placed on nodes; absent: denied, not queued,
    # or still waiting at the end); with preemption, earlier runs were thrown away
    admitted_at: dict[int, float]
    series: Series
    plans: int = 0
    preempted: dict[int, int] = field(default_factory=dict)  # arrival id -> times evicted
    lost: dict[int, float] = field(default_factory=dict)  # arrival id -> GPU-seconds thrown away
    # arrival id -> seconds of work kept from evicted runs (checkpoints): the last run is
    # that much shorter than the workload's duration
    kept: dict[int, float] = field(default_factory=dict)
    # admitted by quota, then waited for nodes at least once
    unplaceable: set[int] = field(default_factory=set)
    # arrival id -> seconds its evicted runs held GPUs (lost and kept), for the bound
    evicted_seconds: dict[int, float] = field(default_factory=dict)
    # arrival id -> (GPU equivalents, of which kept busy) of its last run
    rates: dict[int, tuple[float, float]] = field(default_factory=dict)
    # the nodes' layout changes, in the order they started (the geometry arm's)
    layout_changes: tuple[LayoutChange, ...] = ()
    # GPU-hours per simulated day, tenant, class and GPU model (quotaguard.quota.showback)
    showback: Totals = field(default_factory=dict)


@dataclass(slots=True)
class _Running:
    assignment: Assignment
    start: float
    gpus: float
    useful: float


class _Replay:
    """One arm's run: the queue model, the nodes, and what is waiting, placing or running."""

    def __init__(self, shared: Setup, arm: Arm) -> None:
        self.shared, self.arm = shared, arm
        self.model = QueueModel(arm.queues(shared), shared.units)
        self.cluster: Cluster = shared.cluster()
        controller = arm.controller
        self.controller = controller(shared, self.cluster) if controller is not None else None
        self.queued = [a for a in shared.arrivals if shared.queued(a) and a.at < shared.horizon]
        self.by_id: dict[int, Arrival] = {a.id: a for a in self.queued}
        self.verdicts: dict[int, Verdict] = {a.id: arm.verdict(a) for a in self.queued}
        self.run = ArmRun(arm.name, {}, Series())
        self.allocated: dict[str, float] = {}
        self.useful = 0.0
        self.held = HeldNow(shared.policy, self.cluster.labels)  # for the showback
        self.running: dict[int, _Running] = {}
        self.placing = Placing()  # admitted, waiting for nodes
        self.waiting: dict[int, Gang] = {}  # id -> the pods it waits to run
        self.gangs: dict[Gang, int] = {}  # how many wait with each gang
        # (end, id, start): an entry whose start is no longer the workload's is stale
        self.completions: list[tuple[float, int, float]] = []
        self.workloads: dict[int, QueuedWorkload] = {}
        self.ever: dict[Gang, bool] = {}

    # -- what waits ----------------------------------------------------------------------

    def _wait(self, ident: int, gang: Gang) -> None:
        self._unwait(ident)
        self.waiting[ident] = gang
        self.gangs[gang] = self.gangs.get(gang, 0) + 1

    def _unwait(self, ident: int) -> None:
        gang = self.waiting.pop(ident, None)
        if gang is not None:
            left = self.gangs[gang] - 1
            if left:
                self.gangs[gang] = left
            else:
                del self.gangs[gang]

    # -- events --------------------------------------------------------------------------

    def complete(self, now: float) -> None:
        while self.completions and self.completions[0][0] <= now:
            _, ident, started = heapq.heappop(self.completions)
            running = self.running.get(ident)
            if running is None or running.start != started:
                continue  # preempted since
            self._stop(ident)
            self.model.finish(self.workloads[ident])

    def arrive(self, arrival: Arrival) -> None:
        assert arrival.tenant is not None
        verdict = self.verdicts[arrival.id]
        workload = QueuedWorkload(
            arrival.id,
            arrival.tenant,
            verdict.request,
            arrival.at,
            priority=arrival.priority,
            options=verdict.options if len(verdict.options) > 1 else (),
        )
        self.workloads[arrival.id] = workload
        self.model.submit(workload)
        self._wait(arrival.id, verdict.gang_of(verdict.request))

    def _stop(self, ident: int) -> _Running:
        running = self.running.pop(ident)
        self.cluster.release(running.assignment)
        tenant = self.by_id[ident].tenant
        assert tenant is not None
        self.allocated[tenant] -= running.gpus
        self.useful -= running.useful
        self.held.stop(ident)
        return running

    def admit(self, now: float) -> bool:
        """One admission pass; whether anything was admitted."""
        admitted = self.model.admit(now)
        run = self.run
        for eviction in self.model.evictions():
            victim = eviction.workload
            ident = victim.id
            run.preempted[ident] = run.preempted.get(ident, 0) + 1
            run.admitted_at.pop(ident, None)
            self.placing.remove(ident)
            if ident in self.running:
                running = self._stop(ident)
                ran = eviction.at - running.start
                saved = self.by_id[ident].kept_of(ran)
                run.kept[ident] = run.kept.get(ident, 0.0) + saved
                run.lost[ident] = run.lost.get(ident, 0.0) + running.gpus * (ran - saved)
                run.evicted_seconds[ident] = run.evicted_seconds.get(ident, 0.0) + ran
            verdict = self.verdicts[ident]
            self._wait(ident, verdict.gang_of(verdict.options[0] if verdict.options else ()))
        for workload in admitted:
            if workload.admitted_at != now:
                continue  # admitted and preempted within this pass: pending again
            gang = self.verdicts[workload.id].gang_of(workload.request)
            self._wait(workload.id, gang)
            self.placing.add(workload, gang)
        return bool(admitted)

    def place(self, now: float) -> None:
        """Place what was admitted (see `placing.Placing.place`)."""
        for workload, assignment in self.placing.place(self.cluster, self.run.unplaceable):
            self._unwait(workload.id)
            self._start(workload, assignment, now)

    def _start(self, workload: QueuedWorkload, assignment: Assignment, now: float) -> None:
        arrival, verdict = self.by_id[workload.id], self.verdicts[workload.id]
        gpus = verdict.gpus_of(workload.request)
        written = arrival.written.gpus or gpus
        useful = min(gpus, arrival.uses * written)
        self.running[workload.id] = _Running(assignment, now, gpus, useful)
        self.allocated[workload.queue] = self.allocated.get(workload.queue, 0.0) + gpus
        self.useful += useful
        self.held.start(workload.id, workload.queue, assignment, useful / gpus if gpus else 0.0)
        self.run.admitted_at[workload.id] = now
        self.run.rates[workload.id] = (gpus, useful)
        end = now + arrival.duration - self.run.kept.get(workload.id, 0.0)
        heapq.heappush(self.completions, (end, workload.id, now))

    # -- samples -------------------------------------------------------------------------

    def sample(self, now: float) -> None:
        series, model = self.run.series, self.model
        series.times.append(now)
        series.capacity.append(self.shared.capacity_gpus)
        series.useful.append(self.useful)
        weights = {queue.name: queue.weight for queue in model.cohort.queues}
        quotas = {queue.name: queue.quotas for queue in model.cohort.queues}
        for tenant in model.queue_names():
            series.allocated.setdefault(tenant, []).append(self.allocated.get(tenant, 0.0))
            series.pending.setdefault(tenant, []).append(
                model.pending_count(tenant) + self.placing.count(tenant)
            )
            series.weight.setdefault(tenant, []).append(weights.get(tenant, 0.0))
            nominal = series.nominal.setdefault(tenant, {})
            usage = series.usage.setdefault(tenant, {})
            waiting = series.waiting_units.setdefault(tenant, {})
            used, pending = model.usage(tenant), model.pending_units(tenant)
            for name, quota in quotas.get(tenant, {}).items():
                nominal.setdefault(name, []).append(quota.nominal)
                usage.setdefault(name, []).append(used.get(name, 0))
                waiting.setdefault(name, []).append(pending.get(name, 0))
        self._idle()
        self._showback(now)

    def _showback(self, now: float) -> None:
        """What the running workloads hold now counts for the interval that starts."""
        seconds = min(self.shared.interval, self.shared.horizon - now)
        rates = self.held.rates()
        self.run.showback = accumulate(self.run.showback, rates, start=now, seconds=seconds)

    def _ever_placeable(self, gang: Gang) -> bool:
        """Whether the gang fits the empty cluster (one that never does is not held back by
        fragmentation: no node is big enough)."""
        found = self.ever.get(gang)
        if found is None:
            found = self.ever[gang] = self.shared.empty.placeable(gang)
        return found

    def tick(self, now: float) -> None:
        """The controller's pass, if the arm has one: the queues it writes."""
        if self.controller is not None:
            queues = self.controller.tick(self.model, now)
            if queues is not None:
                self.model.configure(queues)

    def quiet(self, arrivals_left: bool) -> bool:
        """Whether nothing can change any more: no arrival to come, nothing running or
        waiting for nodes, and either nothing queued or no controller to move quotas (the
        last admission pass admitted all it ever will)."""
        if arrivals_left or self.completions or self.placing:
            return False
        return self.controller is None or not self.waiting

    def rest(self, samples: int) -> None:
        """Count `samples` more intervals of the quiet state without replaying them: the
        replay's cost follows the trace's content, not its span. A controller would have
        run at each of them, planning for no demand."""
        if samples <= 0:
            return
        self._idle(samples)
        if self.controller is not None:
            self.controller.runs += samples

    def _idle(self, samples: int = 1) -> None:
        """Where the idle GPUs are now, for `samples` intervals (see the module docstring)."""
        interval, idle = self.shared.interval * samples, self.run.series.idle
        wanted: set[str] = set()
        fragmented: set[str] = set()
        cluster = self.cluster
        for gang in self.gangs:
            classes = {name for need in gang for name, _ in need.units}
            wanted |= classes
            if classes - fragmented and cluster.fits_in_total(gang) and not cluster.placeable(gang):
                fragmented |= classes
        for name, gpu_class in self.shared.policy.classes_by_name.items():
            free = cluster.free_units(name)
            if not free:
                continue
            seconds = free * float(gpu_class.gpu_equivalent) * interval
            if name in fragmented:
                idle["fragmented"] += seconds
            elif name in wanted:
                idle["waiting"] += seconds
            elif wanted:
                idle["wrongSize"] += seconds
            else:
                idle["noDemand"] += seconds
        held = sum(self.allocated.values()) - self.useful
        idle["heldIdle"] += max(0.0, held) * interval


class _Progress:
    """Reports the share of the span done, at whole percents."""

    def __init__(self, progress: Progress | None, horizon: float) -> None:
        self.progress, self.horizon, self.reported = progress, horizon, -1

    def __call__(self, now: float) -> None:
        if self.progress is not None and int(100 * now / self.horizon) != self.reported:
            self.reported = int(100 * now / self.horizon)
            self.progress(now / self.horizon)


def run_arm(shared: Setup, arm: ArmName | Arm, *, progress: Progress | None = None) -> ArmRun:
    """Replay the arrivals against one arm; deterministic. Once nothing can change any more
    (`_Replay.quiet`), the rest of the span is counted, not replayed."""
    spec = ARMS[arm] if isinstance(arm, str) else arm
    replay = _Replay(shared, spec)
    report = _Progress(progress, shared.horizon)
    queued, horizon, interval = replay.queued, shared.horizon, shared.interval
    next_tick, position = 0.0, 0
    while True:
        now = next_tick
        if position < len(queued):
            now = min(now, queued[position].at)
        if replay.completions:
            now = min(now, replay.completions[0][0])
        if now >= horizon:
            break
        replay.complete(now)
        while position < len(queued) and queued[position].at <= now:
            replay.arrive(queued[position])
            position += 1
        ticking = next_tick <= now
        if ticking:
            replay.tick(now)
        replay.admit(now)
        if replay.placing:
            replay.place(now)
        if ticking:
            replay.sample(now)
            next_tick += interval
            report(now)
            if replay.quiet(position < len(queued)):
                replay.rest(math.ceil((horizon - next_tick) / interval))
                break
    report(horizon)
    replay.run.plans = replay.controller.runs if replay.controller else 0
    if isinstance(replay.controller, ArmController):
        replay.run.layout_changes = tuple(replay.controller.changes)
    return replay.run
