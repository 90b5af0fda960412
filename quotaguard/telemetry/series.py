"""Telemetry as plain data: series of (time, value) points with their labels, and the counted
warnings about what was skipped on the way in."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

XID = "DCGM_FI_DEV_XID_ERRORS"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
UNCORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
ECC_DBE_VOLATILE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio 0..1, reported for MIG instances too
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent 0..100, whole GPUs only
HEALTH_METRICS = frozenset({XID, ROW_REMAP_FAILURE, UNCORRECTABLE_REMAPPED_ROWS, ECC_DBE_VOLATILE})
ACTIVITY_METRICS = frozenset({GR_ENGINE_ACTIVE, GPU_UTIL})
METRICS = HEALTH_METRICS | ACTIVITY_METRICS

# dcgm-exporter says Hostname (newer builds hostname); Prometheus relabelling often adds node.
NODE_LABELS = ("Hostname", "hostname", "node", "kubernetes_node")
# In kubernetes mode the exporter adds namespace/pod/container. A scrape whose target has such
# labels of its own (a ServiceMonitor without honorLabels: the exporter pod's namespace and name)
# keeps the target's and renames the exporter's exported_*: those name the workload, so they win.
NAMESPACE_LABELS = ("exported_namespace", "namespace")
POD_LABELS = ("exported_pod", "pod")
CONTAINER_LABELS = ("exported_container", "container")

# Bounds on what one source may hand in; past them the rest is skipped with a warning.
MAX_SERIES = 100_000
MAX_POINTS = 2_000_000
TOO_MANY_POINTS = "too many points"


@dataclass(frozen=True, slots=True)
class Series:
    metric: str
    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]  # (unix seconds, value), oldest first, no NaN

    def label(self, *names: str) -> str | None:
        """The first of `names` that the series has, non-empty."""
        for name in names:
            value = self.labels.get(name)
            if value:
                return value
        return None


@dataclass(frozen=True, slots=True)
class GpuMetrics:
    """Telemetry from one source at one moment."""

    source: str
    series: tuple[Series, ...]
    at: float  # the evaluation time: the latest sample (or when it was read)
    # one sample per series (a scrape): idleness is judged on that sample alone
    single_sample: bool
    # what was skipped, by kind ("not a number", "missing labels", ...) -> count
    warnings: Mapping[str, int] = field(default_factory=dict)
    # how the source was read, when not as asked (a range query refused, an instant one read)
    note: str | None = None

    def of(self, *metrics: str) -> Iterable[Series]:
        wanted = frozenset(metrics)
        return (s for s in self.series if s.metric in wanted)


def merge_warnings(*counts: Mapping[str, int]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for count in counts:
        total.update(count)
    return dict(sorted(total.items()))


class SeriesBuilder:
    """Collects series up to the bounds, counting what it skips."""

    def __init__(self) -> None:
        self.series: list[Series] = []
        self.warnings: Counter[str] = Counter()
        self.points = 0

    def warn(self, kind: str, count: int = 1) -> None:
        self.warnings[kind] += count

    def add(self, metric: str, labels: Mapping[str, str], points: Iterable[object]) -> None:
        if metric not in METRICS:
            return
        if len(self.series) >= MAX_SERIES:
            self.warn("too many series")
            return
        kept: list[tuple[float, float]] = []
        for point in points:
            parsed = _point(point)
            if parsed is None:
                self.warn("not a number")
                continue
            kept.append(parsed)
        if not kept:
            return
        if self.points + len(kept) > MAX_POINTS:
            self.warn(TOO_MANY_POINTS)
            return
        self.points += len(kept)
        kept.sort()
        self.series.append(Series(metric, dict(labels), tuple(kept)))

    def build(
        self, source: str, *, at: float | None, single_sample: bool, fallback: float = 0.0
    ) -> GpuMetrics:
        """`at`: the evaluation time when known, else the latest sample's (else `fallback`)."""
        latest = max((s.points[-1][0] for s in self.series), default=None)
        moment = at if at is not None else latest if latest is not None else fallback
        return GpuMetrics(
            source=source,
            series=tuple(self.series),
            at=moment,
            single_sample=single_sample,
            warnings=dict(sorted(self.warnings.items())),
        )


def _point(point: object) -> tuple[float, float] | None:
    if not isinstance(point, tuple | list) or len(point) != 2:
        return None
    try:
        at, value = float(point[0]), float(point[1])
    except (TypeError, ValueError):
        return None
    if at != at or value != value or value in (float("inf"), float("-inf")):
        return None
    return at, value
