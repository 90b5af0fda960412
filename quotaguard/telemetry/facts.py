"""Both judgements at once, into the facts the quota planner takes: faulty GPUs (capacity) and
pod activity (idle demand), with what the report says about the source."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from quotaguard.policy.model import Rebalance
from quotaguard.telemetry.health import FaultyGpu, HealthMemory, judge_health
from quotaguard.telemetry.idle import PodActivity, PodKey, judge_idle
from quotaguard.telemetry.series import GpuMetrics, merge_warnings

SINGLE_SAMPLE_NOTE = "idleness judged on a single sample per series, not over idleFor"


@dataclass(frozen=True, slots=True)
class GpuFacts:
    source: str | None
    available: bool
    # why there is no telemetry, or how it was judged; None when there is nothing to say
    note: str | None = None
    faulty: tuple[FaultyGpu, ...] = ()
    activity: Mapping[PodKey, PodActivity] = field(default_factory=dict)
    warnings: Mapping[str, int] = field(default_factory=dict)
    at: float | None = None

    @property
    def idle_pods(self) -> frozenset[PodKey]:
        return frozenset(key for key, pod in self.activity.items() if pod.idle)

    def summary(self) -> dict[str, Any]:
        """The report's `telemetry` object."""
        return {
            "source": self.source,
            "available": self.available,
            "note": self.note,
            "faultyGpus": len(self.faulty),
            "idlePods": len(self.idle_pods),
            "warnings": dict(self.warnings),
        }


def _note(metrics: GpuMetrics) -> str | None:
    said = [metrics.note] if metrics.note else []
    if metrics.single_sample and metrics.series:
        said.append(SINGLE_SAMPLE_NOTE)
    return "; ".join(said) or None


def no_telemetry(reason: str, source: str | None = None) -> GpuFacts:
    """Plans go on as without telemetry, and the report says why."""
    return GpuFacts(source=source, available=False, note=f"no GPU telemetry: {reason}")


def judge(
    metrics: GpuMetrics,
    *,
    nodes: Collection[str],
    rebalance: Rebalance,
    memory: HealthMemory | None = None,
    now: float | None = None,
    pods: Collection[PodKey] | None = None,
) -> tuple[GpuFacts, HealthMemory]:
    """Faulty GPUs and pod activity on the known `nodes`; the memory goes to the next call.

    With `pods` (the cluster's), activity of any other pod is dropped without a warning: a pod
    that has just ended, or — under a scrape that does not honour the exporter's labels — the
    exporter's own pod named on every GPU nobody holds."""
    known = frozenset(nodes)
    health, memory = judge_health(
        metrics, nodes=known, settings=rebalance.gpu_health, memory=memory, now=now
    )
    activity = judge_idle(
        metrics,
        idle_below=rebalance.idle_below,
        idle_for=rebalance.idle_for,
        nodes=known,
        now=now,
    )
    if pods is not None:
        known_pods = frozenset(pods)
        activity = {key: pod for key, pod in activity.items() if key in known_pods}
    facts = GpuFacts(
        source=metrics.source,
        available=True,
        note=_note(metrics),
        faulty=health.faulty,
        activity=activity,
        warnings=merge_warnings(metrics.warnings, health.warnings),
        at=metrics.at if now is None else now,
    )
    return facts, memory
