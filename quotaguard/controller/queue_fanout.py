"""The queue writes of one plan (`quota.diff.writes_for`: the cuts, then the raises), sent
from worker threads up to WRITES_IN_FLIGHT at once and awaited on the event loop; the second
pass starts only when every write of the first has landed, and not at all when one of them
failed (raising others then could overcommit). A QuotaUpdated Event on each queue a write
moved materially, a QuotaConflict Warning when a queue's conflicts appear or change.

`QueueFanout` keeps what it must remember between intervals (the conflicts said, the managed
objects made); only the event loop touches it, the workers get what they need as arguments."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from quotaguard.controller import kueue, volcano
from quotaguard.controller.kube_clients import (
    KUEUE_GROUP,
    VOLCANO_GROUP,
    VOLCANO_VERSION,
    KubeClients,
    ServedGroups,
)
from quotaguard.controller.managed_objects import ensure_kueue_objects, ensure_volcano_objects
from quotaguard.controller.queue_writer import (
    QueueApi,
    QueueWriter,
    SpecRules,
    WriteOutcome,
    WriteResult,
    emit_event,
    event_body,
)
from quotaguard.controller.server_side_apply import FieldConflict
from quotaguard.controller.watch import JsonObject, Watch
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.cluster import ResourceQuota
from quotaguard.quota.diff import QueueChange, QueueWrite, writes_for
from quotaguard.quota.queues import QueueState
from quotaguard.quota.quota_planner import Plan, TenantPlan

log = logging.getLogger("quotaguard.controller")

# Queue writes in flight at once within one pass (the cuts, then the raises): the API server
# answers them in parallel; the client's pool holds more connections than this plus watches.
WRITES_IN_FLIGHT = 8
KUEUE_CREATE_TEMPLATE: Mapping[str, Any] = {"namespaceSelector": {}}
VOLCANO_CREATE_TEMPLATE: Mapping[str, Any] = {"reclaimable": True}


def queue_api(policy: TenantPolicy, served: ServedGroups | None) -> QueueApi | None:
    """The queues the policy's backend writes, when the API server serves them."""
    if policy.spec.backend == "volcano":
        if served is None or not served.volcano:
            return None
        return QueueApi(VOLCANO_GROUP, VOLCANO_VERSION, "queues", "Queue")
    if served is None or served.kueue is None:
        return None
    return QueueApi(KUEUE_GROUP, served.kueue, "clusterqueues", "ClusterQueue")


@dataclass(frozen=True)
class QueueTarget:
    """Where and how one interval writes its queues."""

    clients: KubeClients
    api: QueueApi
    policy: TenantPolicy
    may_write: Callable[[], bool]  # the Lease is ours for long enough
    identity: str  # the Events' reporting instance
    request_timeout: float
    weight_tolerance: float

    def rules(self, tenant: TenantPlan, quotas: Mapping[str, ResourceQuota]) -> SpecRules:
        """How to build the tenant's queue spec with `quotas`."""
        policy, api = self.policy, self.api
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
                weight_tolerance=self.weight_tolerance,
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


class QueueFanout:
    """Writes plans to the queues, interval after interval (see the module docstring)."""

    def __init__(self) -> None:
        self._conflicts: dict[str, tuple[FieldConflict, ...]] = {}  # said once each
        self._managed: object = None  # the policy and API the managed objects were made for

    async def write(
        self,
        target: QueueTarget,
        the_plan: Plan,
        current: Mapping[str, QueueState],
        cache: Watch | None,
    ) -> list[WriteOutcome]:
        """Bring the queues from `current` to `the_plan`; `cache`: the queues' watch, which
        takes each written queue at once."""
        cached = {obj["metadata"]["name"]: obj for obj in (cache.objects() if cache else [])}
        manage = target.policy.spec.rebalance.manage_queues
        if manage:
            await self._ensure_managed_objects(target)
        writer = QueueWriter(
            target.clients.custom,
            target.api,
            may_write=target.may_write,
            request_timeout=target.request_timeout,
            force_conflicts=target.policy.spec.rebalance.force_conflicts,
        )
        volcano_api = target.api.group == VOLCANO_GROUP
        template = VOLCANO_CREATE_TEMPLATE if volcano_api else KUEUE_CREATE_TEMPLATE
        shell = _Writing(writer, cached, template if manage else None)
        outcomes: list[WriteOutcome] = []
        pool = ThreadPoolExecutor(WRITES_IN_FLIGHT, thread_name_prefix="queue-write")
        try:
            for writes in writes_for(the_plan, current):
                done = await _write_pass(pool, target, shell, writes)
                for outcome in done:
                    if outcome.written is not None:
                        if cache is not None:
                            cache.upsert(outcome.written)
                        cached[outcome.queue] = outcome.written
                    _log_failure(outcome)
                await self._say_conflicts(target, done)
                outcomes += done
                if any(outcome.result.failed for outcome in outcomes):
                    break  # a cut that did not land: raising others now could overcommit
        finally:
            pool.shutdown(wait=False)
        _log_interval(outcomes)
        return outcomes

    async def _ensure_managed_objects(self, target: QueueTarget) -> None:
        key = (id(target.policy), target.api)
        if self._managed == key:
            return
        if target.api.group == KUEUE_GROUP:
            call = functools.partial(
                ensure_kueue_objects, target.clients, target.policy, target.api.version
            )
        else:
            call = functools.partial(ensure_volcano_objects, target.clients, target.policy)
        if await asyncio.to_thread(call):
            self._managed = key

    async def _say_conflicts(self, target: QueueTarget, outcomes: Sequence[WriteOutcome]) -> None:
        """A Warning Event when a queue's conflicts appear or change (not every interval)."""
        bodies = []
        for outcome in outcomes:
            if outcome.result != WriteResult.CONFLICT:
                self._conflicts.pop(outcome.queue, None)
                continue
            if not outcome.conflicts or self._conflicts.get(outcome.queue) == outcome.conflicts:
                continue
            self._conflicts[outcome.queue] = outcome.conflicts
            if outcome.seen is not None:
                bodies.append(
                    event_body(
                        outcome.seen,
                        reason="QuotaConflict",
                        message=f"quotas {outcome.detail}",
                        instance=target.identity,
                        warning=True,
                    )
                )
        if bodies:
            await asyncio.to_thread(_emit_all, target.clients.core, bodies)


async def _write_pass(
    pool: ThreadPoolExecutor,
    target: QueueTarget,
    shell: _Writing,
    writes: Sequence[QueueWrite],
) -> list[WriteOutcome]:
    """One pass's writes, concurrently; returns when every one of them has ended."""
    loop = asyncio.get_running_loop()
    done = await asyncio.gather(
        *(loop.run_in_executor(pool, _write_one, target, shell, write) for write in writes)
    )
    # None: only a weight move within tolerance, no request at all
    return [outcome for outcome in done if outcome is not None]


def _write_one(target: QueueTarget, shell: _Writing, write: QueueWrite) -> WriteOutcome | None:
    """One queue written (blocking; a worker thread), and said."""
    outcome = shell.execute(write.queue, target.rules(write.tenant, write.quotas))
    if outcome is not None and outcome.written is not None:
        _announce(target, outcome, write.change)
    return outcome


def _announce(target: QueueTarget, outcome: WriteOutcome, change: QueueChange) -> None:
    """Log the write; a QuotaUpdated Event on the queue when the write is material (a quota,
    the cohort or the parent moved, or the queue was created): a fair-share weight alone
    moving is logged and counted, not announced on the queue."""
    reasons = "; ".join(f"{q.class_name}: {q.reason}" for q in change.quotas)
    if change.weight is not None and not reasons:
        reasons = "fair-share weight follows decayed usage"
    message = f"{'; '.join(outcome.changes) or 'queue created'}. Why: {reasons or 'policy'}"
    log.info(
        "queue %s %s",
        outcome.queue,
        outcome.result,
        extra={"queue": outcome.queue, "tenant": change.tenant, "changes": list(outcome.changes)},
    )
    if outcome.written is not None and _material(outcome):
        body = event_body(
            outcome.written, reason="QuotaUpdated", message=message, instance=target.identity
        )
        emit_event(target.clients.core, body)


def _emit_all(core: Any, bodies: Sequence[JsonObject]) -> None:
    for body in bodies:
        emit_event(core, body)


@dataclass(frozen=True)
class _Writing:
    """Executes queue writes against the cached queues (one interval's copy, changed only
    between passes, on the loop); `template`: create missing queues from it (manageQueues),
    else report them missing."""

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
