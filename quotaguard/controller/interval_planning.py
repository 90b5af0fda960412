"""One interval's planning, off the event loop: the watch caches parsed, GPU telemetry judged
against them, and the planning cycle (`quotaguard.planning.cycle`). What one interval leaves
for the next (`PlanningMemory`) goes in as an argument and comes back in the result."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from quotaguard.controller.watch import JsonObject, collector_paused
from quotaguard.metrics.controller_metrics import PLAN_CPU
from quotaguard.planning.cycle import (
    Cycle,
    CycleReport,
    CycleSettings,
    CycleState,
    plan_cycle,
    seen_in_snapshot,
)
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.cluster import ClusterSnapshot, ParsedObjects, parse_objects
from quotaguard.quota.showback import Ledger, advance, holdings_of
from quotaguard.quota.showback_report import ledger_showback
from quotaguard.telemetry.facts import GpuFacts, judge, no_telemetry
from quotaguard.telemetry.health import HealthMemory
from quotaguard.telemetry.series import GpuMetrics

log = logging.getLogger("quotaguard.controller")


@dataclass(frozen=True)
class PlanningMemory:
    """What one interval's planning leaves for the next."""

    cycle: CycleState = field(default_factory=CycleState)
    health: HealthMemory = field(default_factory=HealthMemory)  # faulty GPUs' quiet periods
    # the caches parsed last interval, so that only changed objects are read again (a memo
    # the planning worker fills; one interval plans at a time)
    parsed: ParsedObjects = field(default_factory=ParsedObjects)
    # GPU-hours held per day, tenant, class and model since this controller started
    showback: Ledger = field(default_factory=Ledger)


@dataclass(frozen=True)
class PlannedInterval:
    cycle: Cycle
    memory: PlanningMemory


def plan_interval(
    policy: TenantPolicy,
    objects: Sequence[JsonObject],
    now: float,
    metrics: GpuMetrics | str,
    memory: PlanningMemory,
    settings: CycleSettings,
    *,
    prometheus_url: str | None = None,
    showback_gap: float = math.inf,
) -> PlannedInterval:
    """The cycle of the cached `objects` at `now` (blocking: CPU, seconds on a large cluster).

    With the garbage collector paused: a plan at 50,000 pods allocates hundreds of thousands
    of small objects (no cycles among them), and the collections they set off walk the whole
    watch cache each time — a third of the plan's CPU (bench/README.md)."""
    started = time.thread_time()
    try:
        with collector_paused():
            snapshot = parse_objects(
                list(objects), gpu_resources=policy.gpu_resources, memo=memory.parsed
            )
            facts, health = _gpu_facts(
                policy, metrics, snapshot, now, memory.health, prometheus_url
            )
            seen = seen_in_snapshot(policy, snapshot, facts)
            cycle = plan_cycle(policy, seen, now, memory.cycle, settings)
            cycle.report  # noqa: B018 (built here, off the loop, with the collector paused)
            # what is held counts for the time since the last interval, at most `showback_gap`
            held = holdings_of(policy, snapshot, facts.activity)
            ledger = advance(memory.showback, held, now, max_gap=showback_gap)
        return PlannedInterval(cycle, PlanningMemory(cycle.state, health, memory.parsed, ledger))
    finally:
        PLAN_CPU.inc(time.thread_time() - started)


def _gpu_facts(
    policy: TenantPolicy,
    metrics: GpuMetrics | str,
    snapshot: ClusterSnapshot,
    now: float,
    health: HealthMemory,
    source: str | None,
) -> tuple[GpuFacts, HealthMemory]:
    """GPU telemetry judged against the snapshot, and the health memory it leaves; `metrics`
    a string: why there is none."""
    if isinstance(metrics, str):
        return no_telemetry(metrics, source), health
    facts, health = judge(
        metrics,
        nodes=[node.name for node in snapshot.nodes],
        rebalance=policy.spec.rebalance,
        memory=health,
        now=now,
        pods=[(pod.namespace, pod.name) for pod in snapshot.pods],
    )
    if facts.warnings:
        log.warning("GPU telemetry: series skipped: %s", dict(facts.warnings))
    return facts, health


def with_showback(report: CycleReport, memory: PlanningMemory, policy: TenantPolicy) -> CycleReport:
    """The interval's report with the GPU-hours counted so far (`showback`)."""
    found = cast(dict[str, Any], {**report})
    found["showback"] = ledger_showback(memory.showback, policy.spec.showback)
    return cast(CycleReport, found)
