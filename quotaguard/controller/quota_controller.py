"""The quota controller: every `rebalance.interval`, read -> plan_cycle -> diff -> write.

One interval:
  1. `off`: nothing at all.
  2. Stale view (the API server does not answer discovery, or a watch is not synced): nothing
     changes; logged and exported as `quotaguard_controller_stale`.
  3. Read: the watch caches, the GPU operator's configs and GPU telemetry (`cluster_reads`).
  4. Plan: one planning cycle on them (`interval_planning`, `quotaguard.planning.cycle`):
     layouts, the capacity they leave, smoothed demand, weights, plan, report; all pure.
  5. Write, only as the leader: in `apply`, the queues the plan changes (`queue_fanout`, in
     the order `quota.diff.writes_for` gives), then, in geometry mode apply, the node layout
     steps (`layouts`: a node leaves capacity once the quotas fit without it). `recommend`
     puts the targets in the report and metrics only.
  6. Record: each quota's last move and the interval's report (`quota_moves`), the history,
     the metrics.

Concurrency: the controller is one coroutine on the event loop, and each blocking step of an
interval (discovery, the ConfigMap and Prometheus reads, planning, queue and node writes) runs
in a worker thread it awaits, with what it needs as arguments and what it decides as its
return value, so no state crosses threads through attributes (a pass of queue writes is up to
`WRITES_IN_FLIGHT` such workers at once; the watches stream in threads of their own into
locked caches, `watch.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from quotaguard.controller.cluster_reads import (
    ClusterOverlays,
    gpu_metrics,
)
from quotaguard.controller.interval_planning import PlanningMemory, plan_interval, with_showback
from quotaguard.controller.kube_clients import VOLCANO_GROUP, KubeClients, ServedGroups, discover
from quotaguard.controller.leader import (
    LEASE_NAME,
    KubeLeaseStore,
    LeaderElector,
    default_identity,
    default_namespace,
)
from quotaguard.controller.node_layout_writes import NodeWrite, change_layouts
from quotaguard.controller.queue_fanout import QueueFanout, QueueTarget, queue_api
from quotaguard.controller.queue_writer import WriteOutcome
from quotaguard.controller.quota_moves import QuotaMoves
from quotaguard.controller.registration_reads import RegistrationsCheck
from quotaguard.controller.settings import (
    ControllerSettings,
    ControllerStatus,
    PolicySource,
    policy_source,
)
from quotaguard.controller.watch import Watch
from quotaguard.controller.watch_sources import Source, wanted_sources
from quotaguard.kube.values import utc_timestamp
from quotaguard.metrics.controller_metrics import (
    CONTROLLER_INTERVALS,
    CONTROLLER_LEADER,
    CONTROLLER_STALE,
    WATCH_SERIES,
    leadership_changed,
    publish_report,
    record_writes,
)
from quotaguard.planning.cycle import Cycle, CycleReport, CycleSettings
from quotaguard.policy.model import Mode, TenantPolicy
from quotaguard.reports.history import QuotaHistory, points_for_span

__all__ = ["Controller", "ControllerSettings", "ControllerStatus", "policy_source"]

log = logging.getLogger("quotaguard.controller")


class Controller:
    """One controller; `run(stop)` until stopped, or `run_interval()` step by step in tests."""

    def __init__(
        self,
        policy: Any,
        clients: KubeClients,
        settings: ControllerSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy: PolicySource = policy_source(policy)
        self.clients = clients
        self.settings = settings or ControllerSettings()
        self.clock = clock
        self.status = ControllerStatus()
        self.history = QuotaHistory()
        self.watches: dict[str, Watch] = {}
        self.leader: LeaderElector | None = None
        self._watch_configs: dict[str, object] = {}
        self._memory = PlanningMemory()  # what one interval's planning leaves for the next
        self._moves = QuotaMoves()
        self._fanout = QueueFanout()
        self._overlays = ClusterOverlays(
            (self.settings.gpu_operator_namespace, self.settings.kueue_namespace),
            self.settings.write_timeout,
        )
        self._registrations = RegistrationsCheck(self.settings.write_timeout)

    # -- what others read --------------------------------------------------------------------

    def mode(self, policy: TenantPolicy | None = None) -> Mode:
        return self.settings.mode or (policy or self.policy()).spec.rebalance.mode

    def interval(self, policy: TenantPolicy | None = None) -> float:
        return self.settings.interval or (policy or self.policy()).spec.rebalance.interval

    def is_leader(self, margin: float = 0.0) -> bool:
        return self.leader is None or self.leader.is_leader(margin)

    def not_ready_reason(self) -> str:
        """Why there is no report yet (for the 503 of the reports routes)."""
        if self.status.mode == "off":
            return "the quota controller is off (mode off)"
        if self.status.stale_reason:
            return f"no plan yet: {self.status.stale_reason}"
        return "no plan yet: waiting for the first interval"

    def live_watches(self) -> tuple[Watch, ...]:
        """The watches running now, read by the watch series at scrape time. A copy: `close`
        clears the dict from a worker thread, and a scrape may come in meanwhile."""
        return tuple(self.watches.values())

    def latest_report(self) -> dict[str, Any] | None:
        """The last planned report plus the controller's live state (None before any plan)."""
        report = self.status.last_report
        if report is None:
            return None
        planned_at = self.status.last_planned_at
        return {
            **report,
            "controller": {
                "mode": self.status.mode,
                "leader": self.is_leader(),
                "stale": self.status.stale_reason,
                "intervals": self.status.intervals,
                "lastPlannedAt": utc_timestamp(planned_at) if planned_at else None,
            },
        }

    # -- running -----------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run intervals until `stop` is set (or the task is cancelled); stops watches and
        hands the Lease back on the way out."""
        stop = stop or asyncio.Event()
        elector_stop = asyncio.Event()
        elector: asyncio.Task[None] | None = None
        if self.settings.leader_election:
            self.leader = self._elector()
            elector = asyncio.create_task(self.leader.run(elector_stop), name="leader-election")
        try:
            await self._first_sync(stop)
            while not stop.is_set():
                try:
                    await self.run_interval()
                except Exception as exc:
                    self.status.errors += 1
                    self.status.last_error = f"{type(exc).__name__}: {exc}"
                    log.exception("controller interval failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.interval())
        finally:
            elector_stop.set()
            # joins the watch threads: a wait that must not hold the loop
            await asyncio.to_thread(self.close)
            if elector is not None:
                with contextlib.suppress(Exception):
                    await elector
            CONTROLLER_LEADER.set(0)

    def close(self) -> None:
        for watch in self.watches.values():
            watch.stop(join_timeout=0)
        for watch in self.watches.values():
            watch.stop()
        self.watches.clear()
        self._watch_configs.clear()

    async def _first_sync(self, stop: asyncio.Event) -> None:
        """Start the watches and give them up to one interval to list before the first plan."""
        policy = self.policy()
        if self.mode(policy) == "off":
            return
        try:
            served = await asyncio.to_thread(discover, self.clients)
        except Exception as exc:
            log.warning("API server unreachable at start: %s", exc)
            return
        self.status.served = served
        self._sync_watches(policy, served)
        deadline = time.monotonic() + self.interval(policy)
        while not stop.is_set() and time.monotonic() < deadline:
            if all(watch.synced for watch in self.watches.values()):
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=0.05)

    def _elector(self) -> LeaderElector:
        namespace = self.settings.lease_namespace or default_namespace()
        store = KubeLeaseStore(self.clients.coordination, name=LEASE_NAME, namespace=namespace)
        return LeaderElector(
            store,
            self.settings.identity or default_identity(),
            namespace=namespace,
            on_change=leadership_changed,
        )

    def _identity(self) -> str:
        return self.leader.identity if self.leader is not None else "quotaguard"

    def _may_write(self) -> bool:
        """A write may start: the Lease is ours for at least the write's timeout."""
        return self.is_leader(self.settings.write_timeout)

    def _sticky(self, served: ServedGroups) -> ServedGroups:
        """A group that was served and no longer shows up in discovery (an API server starting
        up lists CRDs late) keeps its watches; were it really gone they fail and go unsynced."""
        before = self.status.served
        if before is None:
            return served
        return ServedGroups(
            kueue=served.kueue or before.kueue,
            volcano=served.volcano or before.volcano,
            dra=served.dra or before.dra,
            device_taint_rules=served.device_taint_rules or before.device_taint_rules,
        )

    def _sync_watches(self, policy: TenantPolicy, served: ServedGroups) -> None:
        wanted: dict[str, Source] = wanted_sources(self.clients, policy, served)
        for name in list(self.watches):
            if name not in wanted or wanted[name].config != self._watch_configs.get(name):
                self.watches.pop(name).stop(join_timeout=0)
                self._watch_configs.pop(name, None)
        for name, source in wanted.items():
            if name not in self.watches:
                watch = Watch(source.kind, self.settings.watch_settings())
                self.watches[name] = watch
                self._watch_configs[name] = source.config
                watch.start()
                # one controller per process (were there more: the last to start a watch is read)
                WATCH_SERIES.read_from(self.live_watches)

    # -- one interval ------------------------------------------------------------------------

    async def run_interval(self) -> str:
        """One interval; returns its outcome: "off", "stale" or "planned"."""
        policy = self.policy()
        mode = self.mode(policy)
        self.status.mode = mode
        self.status.intervals += 1
        self.history.resize(points_for_span(self.interval(policy)))
        if mode == "off":
            if self.watches:
                await asyncio.to_thread(self.close)  # nothing reads them until mode changes
            CONTROLLER_INTERVALS.labels(outcome="off").inc()
            return "off"
        reason = await self._staleness(policy)
        if reason is not None:
            self.status.stale += 1
            self.status.stale_reason = reason
            CONTROLLER_STALE.set(1)
            CONTROLLER_INTERVALS.labels(outcome="stale").inc()
            log.warning("view of the cluster is stale; changing nothing: %s", reason)
            return "stale"
        self.status.stale_reason = None
        CONTROLLER_STALE.set(0)
        now = self.clock()
        policy, cycle = await self._plan(policy, mode, now)
        outcomes: list[WriteOutcome] = []
        if mode == "apply" and self.is_leader():
            outcomes = await self._write_queues(policy, cycle)
        if self.is_leader():  # after the quota cuts: a node leaves capacity once quotas fit
            self.status.node_writes = await self._change_layouts(policy, cycle)
        report = self._record(policy, cycle, outcomes, mode, now)
        publish_report(
            report, policy, leader=self.is_leader(), at=now, interval=self.interval(policy)
        )
        CONTROLLER_INTERVALS.labels(outcome="planned").inc()
        return "planned"

    async def _staleness(self, policy: TenantPolicy) -> str | None:
        try:
            served = await asyncio.to_thread(discover, self.clients)
        except Exception as exc:
            return f"API server unreachable: {type(exc).__name__}: {exc}"
        self.status.served = served = self._sticky(served)
        self._sync_watches(policy, served)
        unsynced = sorted(name for name, watch in self.watches.items() if not watch.synced)
        if unsynced:
            return f"watch not synced: {', '.join(unsynced)}"
        return None

    async def _plan(
        self, policy: TenantPolicy, mode: Mode, now: float
    ) -> tuple[TenantPolicy, Cycle]:
        """Read and plan: the policy with the operator's configs, and the interval's cycle."""
        settings = self.settings
        objects = [obj for watch in self.watches.values() for obj in watch.objects()]
        await asyncio.to_thread(self._registrations.check, self.clients.custom, policy)
        policy = await asyncio.to_thread(self._overlays.apply, self.clients.core, policy)
        metrics = await asyncio.to_thread(
            gpu_metrics, settings.prometheus_url, settings.prometheus_timeout, policy, now
        )
        cycle_settings = CycleSettings(
            mode=mode,
            weight_tolerance=settings.weight_tolerance,
            from_previous=mode == "recommend",  # the queues do not follow the plan
        )
        planned = await asyncio.to_thread(
            plan_interval,
            policy,
            objects,
            now,
            metrics,
            self._memory,
            cycle_settings,
            prometheus_url=settings.prometheus_url,
            showback_gap=2 * self.interval(policy),
        )
        self._memory = planned.memory
        return policy, planned.cycle

    async def _write_queues(self, policy: TenantPolicy, cycle: Cycle) -> list[WriteOutcome]:
        api = queue_api(policy, self.status.served)
        if api is None:
            return []
        target = QueueTarget(
            self.clients,
            api,
            policy,
            may_write=self._may_write,
            identity=self._identity(),
            request_timeout=self.settings.write_timeout,
            weight_tolerance=self.settings.weight_tolerance,
        )
        cache = self.watches.get("queues" if api.group == VOLCANO_GROUP else "clusterqueues")
        return await self._fanout.write(target, cycle.plan, cycle.seen.current, cache)

    async def _change_layouts(self, policy: TenantPolicy, cycle: Cycle) -> tuple[NodeWrite, ...]:
        call = functools.partial(
            change_layouts,
            self.clients.core,
            policy,
            cycle,
            self.watches.get("nodes"),
            may_write=self._may_write,
            identity=self._identity(),
            request_timeout=self.settings.write_timeout,
        )
        return await asyncio.to_thread(call)

    def _record(
        self,
        policy: TenantPolicy,
        cycle: Cycle,
        outcomes: list[WriteOutcome],
        mode: Mode,
        now: float,
    ) -> CycleReport:
        """The interval in the status, the history and the write metrics; its report."""
        record_writes(outcomes, at=now)
        self._moves.note(cycle.plan, cycle.seen.current, outcomes, mode, now)
        report = with_showback(self._moves.report(cycle.report, outcomes), self._memory, policy)
        self.status.planned_interval(report, tuple(outcomes), now)
        self.history.record(report, now)
        return report
