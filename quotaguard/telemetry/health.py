"""Faulty GPUs from DCGM telemetry, per GPU (a MIG instance's fault is its GPU's), with a quiet
period before a GPU counts again. State in, state out: `HealthMemory` carries the last fault of
each GPU and the last remapped-row counts between intervals.

A GPU is faulty at `now` when one of its samples within the quiet period shows
  - `DCGM_FI_DEV_XID_ERRORS` (the last XID) in the critical set (policy `gpuHealth`),
  - `DCGM_FI_DEV_ROW_REMAP_FAILURE` above 0,
  - `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL` above 0 (exported only where enabled),
  - `DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS` higher than the sample before it,
or the memory says it was faulty less than the quiet period ago.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from quotaguard.policy.model import GpuHealth
from quotaguard.telemetry.series import (
    ECC_DBE_VOLATILE,
    HEALTH_METRICS,
    NODE_LABELS,
    ROW_REMAP_FAILURE,
    UNCORRECTABLE_REMAPPED_ROWS,
    XID,
    GpuMetrics,
    Series,
)

GpuKey = tuple[str, str]  # (node, gpu index or UUID)


@dataclass(frozen=True, slots=True)
class FaultyGpu:
    node: str
    gpu: str
    uuid: str | None
    reason: str
    last_fault_at: float
    # MIG profile -> instances seen on this GPU (empty: not partitioned, or not seen)
    mig_instances: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HealthMemory:
    """What one interval hands the next."""

    last_fault: Mapping[GpuKey, tuple[float, str]] = field(default_factory=dict)
    remapped_rows: Mapping[GpuKey, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HealthVerdict:
    faulty: tuple[FaultyGpu, ...]
    warnings: Mapping[str, int]


def gpu_key(series: Series) -> GpuKey | None:
    node = series.label(*NODE_LABELS)
    gpu = series.label("gpu", "UUID")
    return None if node is None or gpu is None else (node, gpu)


def _faults(
    series: Series, settings: GpuHealth, rows_before: float | None
) -> list[tuple[float, str]]:
    found: list[tuple[float, str]] = []
    previous = rows_before
    for at, value in series.points:
        if series.metric == XID and value == int(value) and settings.critical_xid(int(value)):
            found.append((at, f"XID {int(value)}"))
        elif series.metric == ROW_REMAP_FAILURE and value > 0:
            found.append((at, "row remapping failed"))
        elif series.metric == ECC_DBE_VOLATILE and value > 0:
            found.append((at, f"{value:g} double-bit ECC errors"))
        elif series.metric == UNCORRECTABLE_REMAPPED_ROWS:
            if previous is not None and value > previous:
                found.append((at, f"uncorrectable remapped rows grew to {value:g}"))
            previous = value
    return found


@dataclass(slots=True)
class _Scan:
    """What one pass over the series finds, per GPU."""

    uuids: dict[GpuKey, str] = field(default_factory=dict)
    instances: dict[GpuKey, dict[str, str]] = field(default_factory=dict)
    current: dict[GpuKey, str] = field(default_factory=dict)  # faults in a latest sample
    warnings: Counter[str] = field(default_factory=Counter)

    def known_gpu(self, series: Series, known: frozenset[str]) -> GpuKey | None:
        """The series' GPU on a known node, noting its UUID and MIG instance; else counted."""
        key = gpu_key(series)
        if key is None:
            self.warnings["missing labels"] += 1
            return None
        if key[0] not in known:
            self.warnings["unknown node"] += 1
            return None
        uuid = series.labels.get("UUID")
        if uuid:
            self.uuids[key] = uuid
        profile, instance = series.labels.get("GPU_I_PROFILE"), series.labels.get("GPU_I_ID")
        if profile and instance:
            self.instances.setdefault(key, {})[instance] = profile
        return key


def _remember(
    last_fault: dict[GpuKey, tuple[float, str]],
    key: GpuKey,
    faults: list[tuple[float, str]],
    moment: float,
) -> None:
    for at, reason in faults:
        if at <= moment and (key not in last_fault or at >= last_fault[key][0]):
            last_fault[key] = (at, reason)


def judge_health(
    metrics: GpuMetrics,
    *,
    nodes: Collection[str],
    settings: GpuHealth,
    memory: HealthMemory | None = None,
    now: float | None = None,
) -> tuple[HealthVerdict, HealthMemory]:
    """Faulty GPUs on known nodes at `now` (default: the metrics' time), and the next memory.

    Series without a node or GPU label, or for a node not in `nodes`, are skipped and counted.
    """
    memory = memory or HealthMemory()
    moment = metrics.at if now is None else now
    quiet = settings.quiet_period
    known = frozenset(nodes)
    scan = _Scan()
    last_fault = dict(memory.last_fault)
    rows = dict(memory.remapped_rows)
    for series in metrics.series:
        key = scan.known_gpu(series, known)
        if key is None or series.metric not in HEALTH_METRICS:
            continue
        faults = _faults(series, settings, rows.get(key))
        if series.metric == UNCORRECTABLE_REMAPPED_ROWS:
            rows[key] = series.points[-1][1]
        if faults and faults[-1][0] == series.points[-1][0]:
            scan.current[key] = faults[-1][1]
        _remember(last_fault, key, faults, moment)
    faulty = []
    for key, (at, reason) in sorted(last_fault.items()):
        if moment - at >= quiet:
            del last_fault[key]
            continue
        if key[0] not in known:
            continue
        shown = (
            scan.current.get(key) or f"{reason}, {quiet - (moment - at):.0f}s of quiet period left"
        )
        profiles = Counter(scan.instances.get(key, {}).values())
        faulty.append(
            FaultyGpu(
                key[0], key[1], scan.uuids.get(key), shown, at, dict(sorted(profiles.items()))
            )
        )
    verdict = HealthVerdict(tuple(faulty), dict(sorted(scan.warnings.items())))
    return verdict, HealthMemory(last_fault, rows)
