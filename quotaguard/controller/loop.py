"""The quota controller: every `rebalance.interval`, watch caches -> plan -> diff -> write.

One interval:
  1. `off`: nothing at all.
  2. Stale view (the API server does not answer discovery, or a watch is not synced): nothing
     changes; logged and exported as `quotaguard_controller_stale`.
  3. Parse the caches into capacity, demand and the queues now, and take one planning step
     (`quotaguard.quota.step`: smoothed demand, usage history, weights, plan): all pure.
  4. For each tenant, the queue spec the plan calls for is built from the cached spec and
     compared with it (pure); only queues that differ are written, and only by the leader, and
     only in `apply` mode. `recommend` puts the targets in the report and metrics only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from quotaguard.controller import kueue, volcano
from quotaguard.controller.apply import FieldConflict
from quotaguard.controller.kube import (
    KUEUE_GROUP,
    VOLCANO_GROUP,
    VOLCANO_VERSION,
    KubeClients,
    ServedGroups,
    discover,
)
from quotaguard.controller.layouts import NodeWrite, apply_updates
from quotaguard.controller.leader import (
    LEASE_NAME,
    KubeLeaseStore,
    LeaderElector,
    default_identity,
    default_namespace,
)
from quotaguard.controller.sources import Source, wanted_sources
from quotaguard.controller.watch import JsonObject, Watch, WatchSettings, collector_paused
from quotaguard.controller.write import (
    QueueApi,
    QueueWriter,
    SpecRules,
    WriteOutcome,
    WriteResult,
    emit_event,
    event_body,
)
from quotaguard.geometry import operatorconfigs
from quotaguard.geometry.apply import next_updates
from quotaguard.geometry.capacity import plan_capacity
from quotaguard.geometry.nodes import NodeView, node_views
from quotaguard.geometry.planner import LayoutPlan
from quotaguard.geometry.report import layout_rows
from quotaguard.kube.values import utc_timestamp
from quotaguard.policy.model import Mode, TenantPolicy
from quotaguard.quota.cluster import ClusterSnapshot, ParsedObjects, ResourceQuota, parse_objects
from quotaguard.quota.demand import activity_of, demand_of
from quotaguard.quota.diff import QueueChange, QueueWrite, writes_for
from quotaguard.quota.planner import Plan, TenantPlan
from quotaguard.quota.queues import QueueState, current_state
from quotaguard.quota.report import build_report
from quotaguard.quota.showback import Ledger, advance, holdings_of
from quotaguard.quota.showback_report import ledger_showback
from quotaguard.quota.step import WEIGHT_HOLD_FRACTION, PlanState, observe, plan_observed
from quotaguard.reports.history import QuotaHistory, points_for_span
from quotaguard.reports.metrics import (
    CONTROLLER_INTERVALS,
    CONTROLLER_LEADER,
    CONTROLLER_STALE,
    PLAN_CPU,
    WATCH_SERIES,
    leadership_changed,
    publish_report,
    record_writes,
)
from quotaguard.telemetry.client import PrometheusClient, TelemetryError
from quotaguard.telemetry.facts import GpuFacts, judge, no_telemetry
from quotaguard.telemetry.health import HealthMemory
from quotaguard.telemetry.series import GpuMetrics

log = logging.getLogger("quotaguard.controller")

PolicySource = Callable[[], TenantPolicy]

# Queue writes in flight at once within one pass (the cuts, then the raises): the API server
# answers them in parallel; the client's pool holds more connections than this plus watches.
WRITES_IN_FLIGHT = 8
KUEUE_CREATE_TEMPLATE: Mapping[str, Any] = {"namespaceSelector": {}}
VOLCANO_CREATE_TEMPLATE: Mapping[str, Any] = {"reclaimable": True}


@dataclass
class ControllerSettings:
    mode: Mode | None = None  # overrides the policy's rebalance.mode
    interval: float | None = None  # overrides the policy's rebalance.interval (seconds)
    leader_election: bool = True
    lease_namespace: str | None = None  # default: the pod's namespace
    identity: str | None = None  # default: hostname + random suffix
    # a weight's moves up to this fraction are held: plan and queue keep the one it last moved to
    weight_tolerance: float = WEIGHT_HOLD_FRACTION
    # A write starts only while the Lease is ours for at least this long, and gives up after
    # it: so it cannot land after another replica could have taken over. It must stay below
    # the elector's renew_deadline - renew_period (5 s), or no write could ever start.
    write_timeout: float = 4.0
    watch_settings: Callable[[], WatchSettings] = WatchSettings
    # GPU telemetry (dcgm-exporter's series) from this Prometheus server; None: none
    prometheus_url: str | None = None
    prometheus_timeout: float = 10.0
    # where the GPU operator keeps default-mig-parted-config (configs the policy names only)
    gpu_operator_namespace: str = operatorconfigs.DEFAULT_NAMESPACE


@dataclass
class ControllerStatus:
    """What the controller did so far: read by reports, tests and the e2e suite."""

    mode: str = "recommend"
    intervals: int = 0
    planned: int = 0
    stale: int = 0
    stale_reason: str | None = None
    errors: int = 0
    last_error: str | None = None
    writes: dict[str, int] = field(default_factory=dict)
    last_outcomes: tuple[WriteOutcome, ...] = ()
    last_report: dict[str, Any] | None = None
    last_planned_at: float | None = None
    served: ServedGroups | None = None
    node_writes: tuple[NodeWrite, ...] = ()  # the last interval's layout patches

    @property
    def written(self) -> int:
        return self.writes.get("updated", 0) + self.writes.get("created", 0)


def policy_source(policy: Any) -> PolicySource:
    """A TenantPolicy, anything with a `.policy` (the PolicyStore), or a callable."""
    if isinstance(policy, TenantPolicy):
        return lambda: policy
    if hasattr(policy, "policy"):
        return lambda: policy.policy
    if callable(policy):
        source: PolicySource = policy
        return source
    raise TypeError(f"not a policy source: {policy!r}")


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
        self.policy = policy_source(policy)
        self.clients = clients
        self.settings = settings or ControllerSettings()
        self.clock = clock
        self.status = ControllerStatus()
        self.history = QuotaHistory()
        self.watches: dict[str, Watch] = {}
        self.leader: LeaderElector | None = None
        self._watch_configs: dict[str, object] = {}
        self._state = PlanState()  # carried from one planning step to the next
        self._parsed = ParsedObjects()  # the cache parsed last interval: only changes re-read
        self._health = HealthMemory()  # faulty GPUs' quiet periods, carried the same way
        self._last_changes: dict[tuple[str, str], dict[str, Any]] = {}
        self._last_targets: dict[tuple[str, str], int] = {}
        self._managed_generation: object = None
        self._conflicts: dict[str, tuple[FieldConflict, ...]] = {}  # reported once each
        self._layouts = LayoutPlan(mode="off")
        self._layout_views: list[NodeView] = []
        self._last_config_problem: str | None = None  # about the GPU operator's ConfigMap
        self._showback = Ledger()  # GPU-hours counted since this controller started

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
        return {
            **report,
            "controller": {
                "mode": self.status.mode,
                "leader": self.is_leader(),
                "stale": self.status.stale_reason,
                "intervals": self.status.intervals,
                "lastPlannedAt": utc_timestamp(self.status.last_planned_at)
                if self.status.last_planned_at
                else None,
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
            # the kubernetes client is synchronous: its calls run in a worker thread so the
            # loop keeps serving the webhook, probes and metrics meanwhile
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

    def _sticky(self, served: ServedGroups) -> ServedGroups:
        """A group that was served and no longer shows up in discovery (an API server starting
        up lists CRDs late) keeps its watches; were it really gone they fail and go unsynced."""
        before = self.status.served
        if before is None:
            return served
        return ServedGroups(
            kueue=served.kueue or before.kueue, volcano=served.volcano or before.volcano
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
        objects = [obj for watch in self.watches.values() for obj in watch.objects()]
        # Off the loop: a Prometheus query (blocking HTTP), planning (CPU, seconds on a large
        # cluster), writes and node changes (the synchronous kubernetes client).
        policy = await asyncio.to_thread(self._operator_configs, policy)
        metrics = await asyncio.to_thread(self._gpu_metrics, policy, now)
        the_plan, current, report = await asyncio.to_thread(
            self._plan, policy, mode, objects, now, metrics
        )
        outcomes: list[WriteOutcome] = []
        if mode == "apply" and self.is_leader():
            outcomes = await asyncio.to_thread(self._write_all, policy, the_plan, current)
        if self.is_leader():  # after the quota cuts: a node leaves capacity once quotas fit
            self.status.node_writes = await asyncio.to_thread(self._change_layouts, policy, now)
        self._record(the_plan, current, report, outcomes, mode, now)
        publish_report(
            report, policy, leader=self.is_leader(), at=now, interval=self.interval(policy)
        )
        CONTROLLER_INTERVALS.labels(outcome="planned").inc()
        return "planned"

    async def _staleness(self, policy: TenantPolicy) -> str | None:
        try:
            served = await asyncio.to_thread(discover, self.clients)  # synchronous client
        except Exception as exc:
            return f"API server unreachable: {type(exc).__name__}: {exc}"
        self.status.served = served = self._sticky(served)
        self._sync_watches(policy, served)
        unsynced = sorted(name for name, watch in self.watches.items() if not watch.synced)
        if unsynced:
            return f"watch not synced: {', '.join(unsynced)}"
        return None

    def _operator_configs(self, policy: TenantPolicy) -> TenantPolicy:
        """The policy with the GPU operator's definitions of the configs its pools name but it
        does not define (read every interval; unreadable: the built-in ones, said once)."""
        if not operatorconfigs.undefined_configs(policy):
            return policy
        namespace = self.settings.gpu_operator_namespace
        where = f"ConfigMap {namespace}/{operatorconfigs.CONFIGMAP}"
        try:
            found = self.clients.core.read_namespaced_config_map(
                operatorconfigs.CONFIGMAP, namespace, _request_timeout=self.settings.write_timeout
            )
        except Exception as exc:
            status = getattr(exc, "status", None)
            self._config_problem(f"cannot read {where} ({status or type(exc).__name__})")
            return policy
        read = operatorconfigs.from_configmap(policy, found.data)
        if read is None:
            self._config_problem(f"{where} has no key {operatorconfigs.CONFIG_KEY}")
            return policy
        merged, problems = read
        self._config_problem(f"{where}: {'; '.join(problems)}" if problems else None)
        return merged

    def _config_problem(self, problem: str | None) -> None:
        if problem is not None and problem != self._last_config_problem:
            log.warning("%s; the configs it lacks are planned as built in, if they are", problem)
        self._last_config_problem = problem

    def _gpu_metrics(self, policy: TenantPolicy, now: float) -> GpuMetrics | str:
        """GPU telemetry from Prometheus, or why there is none (blocking; a worker thread).
        Never raises: without telemetry the controller plans as it would without the flag."""
        url = self.settings.prometheus_url
        if url is None:
            return "no --prometheus-url given"
        try:
            client = PrometheusClient(url, timeout=self.settings.prometheus_timeout)
            metrics = client.gpu_metrics(policy.spec.rebalance, now=now)
        except TelemetryError as exc:
            log.warning("planning without GPU telemetry: %s", exc)
            return str(exc)
        if metrics.note:
            log.warning("GPU telemetry: %s", metrics.note)
        return metrics

    def _gpu_facts(
        self, policy: TenantPolicy, metrics: GpuMetrics | str, snapshot: ClusterSnapshot, now: float
    ) -> GpuFacts:
        if isinstance(metrics, str):
            return no_telemetry(metrics, self.settings.prometheus_url)
        facts, self._health = judge(
            metrics,
            nodes=[node.name for node in snapshot.nodes],
            rebalance=policy.spec.rebalance,
            memory=self._health,
            now=now,
            pods=[(pod.namespace, pod.name) for pod in snapshot.pods],
        )
        if facts.warnings:
            log.warning("GPU telemetry: series skipped: %s", dict(facts.warnings))
        return facts

    def _plan(
        self,
        policy: TenantPolicy,
        mode: Mode,
        objects: list[JsonObject],
        now: float,
        metrics: GpuMetrics | str = "no --prometheus-url given",
    ) -> tuple[Plan, dict[str, QueueState], dict[str, Any]]:
        """The pure part, with the state carried between intervals (runs in a worker thread).

        With the garbage collector paused: a plan at 50,000 pods allocates hundreds of thousands
        of small objects (no cycles among them), and the collections they set off walk the
        whole watch cache each time — a third of the plan's CPU (bench/README.md)."""
        started = time.thread_time()
        try:
            with collector_paused():
                return self._plan_now(policy, mode, objects, now, metrics)
        finally:
            PLAN_CPU.inc(time.thread_time() - started)

    def _plan_now(
        self,
        policy: TenantPolicy,
        mode: Mode,
        objects: list[JsonObject],
        now: float,
        metrics: GpuMetrics | str,
    ) -> tuple[Plan, dict[str, QueueState], dict[str, Any]]:
        snapshot = parse_objects(objects, gpu_resources=policy.gpu_resources, memo=self._parsed)
        facts = self._gpu_facts(policy, metrics, snapshot, now)
        observed = demand_of(policy, snapshot, activity=facts.activity)
        seen = observe(
            policy, observed, now, self._state, weight_tolerance=self.settings.weight_tolerance
        )
        # Layouts first: quotas are planned on the capacity they leave (changing nodes at 0).
        self._layouts, capacity = plan_capacity(
            policy,
            snapshot.nodes,
            snapshot.pods,
            seen.demand,
            now=now,
            weights=seen.weights,
            faulty_gpus=facts.faulty,
        )
        self._layout_views = (
            node_views(policy, snapshot.nodes, snapshot.pods, now) if self._layouts.nodes else []
        )
        current = current_state(policy, snapshot)
        step = plan_observed(
            policy, capacity, seen, current=current, from_previous=mode == "recommend"
        )
        self._state = step.state
        the_plan = step.plan
        if the_plan.mode != mode:
            the_plan = _with_mode(the_plan, mode)
        report = build_report(
            the_plan,
            current=current,
            generated_at=datetime.fromtimestamp(now, UTC),
            activity=activity_of(policy, snapshot, facts.activity),
            telemetry=facts.summary(),
        )
        report["nodes"] = layout_rows(self._layouts)
        held = holdings_of(policy, snapshot, facts.activity)
        self._showback = advance(self._showback, held, now, max_gap=2 * self.interval(policy))
        report["showback"] = ledger_showback(self._showback, policy.spec.showback)
        return the_plan, current, report

    # -- writing -----------------------------------------------------------------------------

    def _change_layouts(self, policy: TenantPolicy, now: float) -> tuple[NodeWrite, ...]:
        """Move the nodes the layout plan starts and the changes in progress one step (only in
        geometry mode apply; blocking, runs in a worker thread)."""
        updates = next_updates(policy, self._layouts, self._layout_views, now)
        if not updates:
            return ()
        cache = self.watches.get("nodes")
        cached = {obj["metadata"]["name"]: obj for obj in (cache.objects() if cache else [])}
        identity = self.leader.identity if self.leader is not None else "quotaguard"
        return tuple(
            apply_updates(
                self.clients.core,
                updates,
                cached,
                may_write=lambda: self.is_leader(self.settings.write_timeout),
                identity=identity,
                request_timeout=self.settings.write_timeout,
            )
        )

    def _queue_api(self, policy: TenantPolicy) -> QueueApi | None:
        served = self.status.served
        if policy.spec.backend == "volcano":
            if served is None or not served.volcano:
                return None
            return QueueApi(VOLCANO_GROUP, VOLCANO_VERSION, "queues", "Queue")
        if served is None or served.kueue is None:
            return None
        return QueueApi(KUEUE_GROUP, served.kueue, "clusterqueues", "ClusterQueue")

    def _rules(
        self,
        policy: TenantPolicy,
        api: QueueApi,
        tenant: TenantPlan,
        quotas: Mapping[str, ResourceQuota],
    ) -> SpecRules:
        """How to build the tenant's queue spec with `quotas`."""
        if api.group == VOLCANO_GROUP:
            return SpecRules(
                build=functools.partial(
                    volcano.desired_spec, policy=policy, quotas=quotas, weight=tenant.weight
                ),
                same=volcano.same_spec,
                describe=volcano.queue_changes,
                owned=functools.partial(volcano.owned_spec, policy=policy),
            )
        return SpecRules(
            build=functools.partial(
                kueue.desired_spec,
                policy=policy,
                api_version=api.api_version,
                quotas=quotas,
                weight=tenant.weight,
                weight_tolerance=self.settings.weight_tolerance,
                tenant=policy.tenants_by_name.get(tenant.name),
            ),
            same=kueue.same_spec,
            describe=kueue.quota_changes,
            owned=functools.partial(
                kueue.owned_spec,
                api_version=api.api_version,
                tenant=policy.tenants_by_name.get(tenant.name),
            ),
        )

    def _write_all(
        self,
        policy: TenantPolicy,
        the_plan: Plan,
        current: Mapping[str, QueueState],
    ) -> list[WriteOutcome]:
        """Carry out `writes_for(the_plan, current)` (blocking; runs in a worker thread): what
        to write and in which order is decided there; here each write is built against the
        cached queue and sent, up to WRITES_IN_FLIGHT at once within a pass, and the second
        pass (raises) starts only when every write of the first (cuts) has landed."""
        api = self._queue_api(policy)
        if api is None:
            return []
        cache = self.watches.get("queues" if api.group == VOLCANO_GROUP else "clusterqueues")
        cached = {obj["metadata"]["name"]: obj for obj in (cache.objects() if cache else [])}
        manage = policy.spec.rebalance.manage_queues
        if manage:
            self._ensure_managed_objects(policy, api)
        writer = QueueWriter(
            self.clients.custom,
            api,
            may_write=lambda: self.is_leader(self.settings.write_timeout),
            request_timeout=self.settings.write_timeout,
            force_conflicts=policy.spec.rebalance.force_conflicts,
        )
        template = VOLCANO_CREATE_TEMPLATE if api.group == VOLCANO_GROUP else KUEUE_CREATE_TEMPLATE
        shell = _Writing(writer, cached, template if manage else None)
        outcomes: list[WriteOutcome] = []
        with ThreadPoolExecutor(WRITES_IN_FLIGHT, thread_name_prefix="queue-write") as pool:
            for writes in writes_for(the_plan, current):
                done = self._write_pass(pool, shell, policy, api, writes)
                for outcome in done:
                    if outcome.written is not None:
                        if cache is not None:
                            cache.upsert(outcome.written)
                        cached[outcome.queue] = outcome.written
                    self._note_conflicts(outcome)
                    _log_failure(outcome)
                outcomes += done
                if any(outcome.result.failed for outcome in outcomes):
                    break  # a cut that did not land: raising others now could overcommit
        _log_interval(outcomes)
        return outcomes

    def _write_pass(
        self,
        pool: ThreadPoolExecutor,
        shell: _Writing,
        policy: TenantPolicy,
        api: QueueApi,
        writes: Sequence[QueueWrite],
    ) -> list[WriteOutcome]:
        """One pass's writes, concurrently; returns when every one of them has ended."""

        def one(write: QueueWrite) -> WriteOutcome | None:
            outcome = shell.execute(
                write.queue, self._rules(policy, api, write.tenant, write.quotas)
            )
            if outcome is not None and outcome.written is not None:
                self._announce(outcome, write.change)
            return outcome

        futures = [pool.submit(one, write) for write in writes]
        # None: only a weight move within tolerance, no request at all
        return [outcome for future in futures if (outcome := future.result()) is not None]

    def _announce(self, outcome: WriteOutcome, change: QueueChange) -> None:
        """Log the write; a QuotaUpdated Event on the queue when the write is material (a
        quota, the cohort or the parent moved, or the queue was created): a fair-share weight
        alone moving is logged and counted, not announced on the queue."""
        reasons = "; ".join(f"{q.class_name}: {q.reason}" for q in change.quotas)
        if change.weight is not None and not reasons:
            reasons = "fair-share weight follows decayed usage"
        message = f"{'; '.join(outcome.changes) or 'queue created'}. Why: {reasons or 'policy'}"
        log.info(
            "queue %s %s",
            outcome.queue,
            outcome.result,
            extra={
                "queue": outcome.queue,
                "tenant": change.tenant,
                "changes": list(outcome.changes),
            },
        )
        identity = self.leader.identity if self.leader is not None else "quotaguard"
        if outcome.written is not None and _material(outcome):
            body = event_body(
                outcome.written, reason="QuotaUpdated", message=message, instance=identity
            )
            emit_event(self.clients.core, body)

    def _note_conflicts(self, outcome: WriteOutcome) -> None:
        """A Warning Event when a queue's conflicts appear or change (not every interval)."""
        if outcome.result != WriteResult.CONFLICT:
            self._conflicts.pop(outcome.queue, None)
            return
        if not outcome.conflicts or self._conflicts.get(outcome.queue) == outcome.conflicts:
            return
        self._conflicts[outcome.queue] = outcome.conflicts
        if outcome.seen is None:
            return
        identity = self.leader.identity if self.leader is not None else "quotaguard"
        body = event_body(
            outcome.seen,
            reason="QuotaConflict",
            message=f"quotas {outcome.detail}",
            instance=identity,
            warning=True,
        )
        emit_event(self.clients.core, body)

    def _ensure_managed_objects(self, policy: TenantPolicy, api: QueueApi) -> None:
        from quotaguard.controller.manage import ensure_kueue_objects, ensure_volcano_objects

        key = (id(policy), api)
        if self._managed_generation == key:
            return
        if api.group == KUEUE_GROUP:
            done = ensure_kueue_objects(self.clients, policy, api.version)
        else:
            done = ensure_volcano_objects(self.clients, policy)
        if done:
            self._managed_generation = key

    # -- bookkeeping -------------------------------------------------------------------------

    def _record(
        self,
        the_plan: Plan,
        current: Mapping[str, QueueState],
        report: dict[str, Any],
        outcomes: list[WriteOutcome],
        mode: Mode,
        now: float,
    ) -> None:
        written = {o.queue for o in outcomes if o.result.wrote}
        for outcome in outcomes:
            self.status.writes[outcome.result] = self.status.writes.get(outcome.result, 0) + 1
        record_writes(outcomes, at=now)
        for tenant in the_plan.tenants:
            state = current.get(tenant.name)
            for row in tenant.classes:
                key = (tenant.name, row.class_name)
                if mode == "apply":
                    if tenant.queue not in written:
                        continue
                    before_quota = state.quotas.get(row.class_name) if state else None
                    before = before_quota.nominal if before_quota else None
                    if before == row.nominal:
                        continue
                    applied = True
                else:
                    before = self._last_targets.get(key)
                    if before is None or before == row.nominal:
                        self._last_targets[key] = row.nominal
                        continue
                    applied = False
                self._last_targets[key] = row.nominal
                self._last_changes[key] = {
                    "at": utc_timestamp(now),
                    "from": before,
                    "to": row.nominal,
                    "reason": row.reason,
                    "applied": applied,
                }
        _mark_conflicts(report, outcomes)
        for tenant_row in report["tenants"]:
            for row in tenant_row["classes"]:
                row["lastChange"] = self._last_changes.get((tenant_row["name"], row["class"]))
        self.status.planned += 1
        self.status.last_outcomes = tuple(outcomes)
        self.status.last_report = report
        self.status.last_planned_at = now
        self.history.record(report, now)


@dataclass(frozen=True)
class _Writing:
    """Executes queue writes against the cached queues (one interval's copy, read only while
    writes are in flight); `template`: create missing queues from it (manageQueues), else
    report them missing."""

    writer: QueueWriter
    cached: Mapping[str, JsonObject]
    template: Mapping[str, Any] | None

    def execute(self, queue: str, rules: SpecRules) -> WriteOutcome | None:
        existing = self.cached.get(queue)
        if existing is None and self.template is None:
            return WriteOutcome(queue, WriteResult.MISSING)
        if existing is not None and _within_tolerance(rules, existing):
            return None
        return self.writer.write(queue, rules, template=self.template, cached=existing)


def _material(outcome: WriteOutcome) -> bool:
    """Whether a write moved more than the fair-share weight (what a QuotaUpdated Event is
    for: quotas, cohort, parent, a new queue)."""
    return outcome.result == WriteResult.CREATED or any(
        not line.startswith("weight ") for line in outcome.changes
    )


def _log_interval(outcomes: Sequence[WriteOutcome]) -> None:
    """One line per interval that wrote: how many queues, and how many of them only moved
    their weight (those have no Event of their own)."""
    wrote = [outcome for outcome in outcomes if outcome.result.wrote]
    if not wrote:
        return
    weight_only = sum(not _material(outcome) for outcome in wrote)
    failed = sum(outcome.result.failed for outcome in outcomes)
    log.info(
        "wrote %d queues (%d only their fair-share weight), %d failed",
        len(wrote),
        weight_only,
        failed,
        extra={"written": len(wrote), "weight_only": weight_only, "failed": failed},
    )


def _mark_conflicts(report: dict[str, Any], outcomes: list[WriteOutcome]) -> None:
    """Each tenant row's `conflicts`: the queue fields another manager applied (not written)."""
    conflicts = {o.queue: o.conflicts for o in outcomes if o.conflicts}
    for tenant_row in report["tenants"]:
        tenant_row["conflicts"] = [
            {"field": c.field, "manager": c.manager} for c in conflicts.get(tenant_row["queue"], ())
        ]


def _log_failure(outcome: WriteOutcome) -> None:
    if outcome.result in (WriteResult.ERROR, WriteResult.CONFLICT):
        log.warning(
            "writing queue %s failed: %s",
            outcome.queue,
            outcome.detail,
            extra={"queue": outcome.queue, "result": outcome.result},
        )


def _within_tolerance(rules: SpecRules, existing: JsonObject) -> bool:
    spec = existing.get("spec") or {}
    return rules.same(spec, rules.build(spec))


def _with_mode(the_plan: Plan, mode: Mode) -> Plan:
    import dataclasses

    return dataclasses.replace(the_plan, mode=mode)
