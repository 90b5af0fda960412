"""Idle allocations: pods whose every GPU (or MIG instance) was below `idleBelow` percent busy
for at least `idleFor`, from dcgm-exporter's kubernetes-mode labels (namespace, pod).

Activity is `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (a ratio; reported for MIG instances too), or
`DCGM_FI_DEV_GPU_UTIL` (percent) for a GPU without it. With a single sample per series (a
scrape), idleness is judged on that sample alone, and the result says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quotaguard.telemetry.series import (
    CONTAINER_LABELS,
    GPU_UTIL,
    GR_ENGINE_ACTIVE,
    NAMESPACE_LABELS,
    NODE_LABELS,
    POD_LABELS,
    GpuMetrics,
    Series,
)

PodKey = tuple[str, str]  # (namespace, pod)
_DeviceKey = tuple[str, str, str, str]  # (node, gpu, MIG instance, container)


@dataclass(frozen=True, slots=True)
class PodActivity:
    namespace: str
    pod: str
    node: str
    idle: bool
    mean_percent: float  # mean activity over the window, over the pod's GPUs
    idle_seconds: float  # how long every GPU of the pod has been below the threshold
    devices: int  # GPUs or MIG instances seen for the pod
    single_sample: bool


def _percent(series: Series, value: float) -> float:
    return value * 100.0 if series.metric == GR_ENGINE_ACTIVE else value


def _activity_series(metrics: GpuMetrics) -> dict[PodKey, dict[_DeviceKey, Series]]:
    """One activity series per pod device: GR engine activity wins over GPU utilisation."""
    found: dict[PodKey, dict[_DeviceKey, Series]] = {}
    for series in metrics.of(GR_ENGINE_ACTIVE, GPU_UTIL):
        namespace, pod = series.label(*NAMESPACE_LABELS), series.label(*POD_LABELS)
        node, gpu = series.label(*NODE_LABELS), series.label("gpu", "UUID")
        if not (namespace and pod and node and gpu):
            continue  # a GPU nobody holds, or unlabelled (counted by the health judgement)
        container = series.label(*CONTAINER_LABELS) or ""
        device = (node, gpu, series.labels.get("GPU_I_ID", ""), container)
        devices = found.setdefault((namespace, pod), {})
        if device not in devices or series.metric == GR_ENGINE_ACTIVE:
            devices[device] = series
    return found


def _idle_run(series: Series, below: float, now: float) -> float:
    """Seconds from the first sample of the trailing run below the threshold up to `now`;
    0 when the latest sample is busy, and 0 for a run of one sample (a single scrape)."""
    start: float | None = None
    for at, value in reversed(series.points):
        if at > now:
            continue
        if _percent(series, value) >= below:
            break
        start = at
    return 0.0 if start is None else max(0.0, now - start)


def _step(series: Series) -> float:
    gaps = sorted(b[0] - a[0] for a, b in zip(series.points, series.points[1:], strict=False))
    return gaps[len(gaps) // 2] if gaps else 0.0


def judge_idle(
    metrics: GpuMetrics,
    *,
    idle_below: float,
    idle_for: float,
    nodes: Mapping[str, object] | frozenset[str],
    now: float | None = None,
) -> dict[PodKey, PodActivity]:
    """Activity of every pod the telemetry names on a known node, idle or not."""
    moment = metrics.at if now is None else now
    result: dict[PodKey, PodActivity] = {}
    for key, devices in sorted(_activity_series(metrics).items()):
        node = next(iter(devices))[0]
        if node not in nodes:
            continue
        window_start = moment - idle_for
        means: list[float] = []
        idle_seconds: list[float] = []
        all_idle = True
        for series in devices.values():
            recent = [
                _percent(series, v) for at, v in series.points if window_start <= at <= moment
            ]
            if not recent:  # nothing within the window: the allocation is not seen at all
                all_idle = False
                continue
            means.append(sum(recent) / len(recent))
            if metrics.single_sample:
                idle_seconds.append(0.0)
                all_idle &= recent[-1] < idle_below
                continue
            run = _idle_run(series, idle_below, moment)
            idle_seconds.append(run)
            all_idle &= run + _step(series) >= idle_for and run > 0
        if not means:
            continue
        result[key] = PodActivity(
            namespace=key[0],
            pod=key[1],
            node=node,
            idle=all_idle,
            mean_percent=round(sum(means) / len(means), 2),
            idle_seconds=min(idle_seconds) if all_idle else 0.0,
            devices=len(devices),
            single_sample=metrics.single_sample,
        )
    return result
