"""dcgm-exporter series written the way the exporter labels them, for the telemetry tests."""

from __future__ import annotations

from collections.abc import Sequence

from quotaguard.telemetry.series import GpuMetrics, Series


def dcgm_labels(
    node: str,
    gpu: int,
    *,
    pod: tuple[str, str] | None = None,
    mig: tuple[str, int] | None = None,
    hostname_key: str = "Hostname",
) -> dict[str, str]:
    labels = {
        "gpu": str(gpu),
        "UUID": f"GPU-{node}-{gpu}",
        "pci_bus_id": f"00000000:{7 + gpu:02X}:00.0",
        "device": f"nvidia{gpu}",
        "modelName": "NVIDIA H100 80GB HBM3",
        hostname_key: node,
    }
    if mig is not None:
        labels |= {"GPU_I_PROFILE": mig[0], "GPU_I_ID": str(mig[1])}
    if pod is not None:
        labels |= {"namespace": pod[0], "pod": pod[1], "container": "main"}
    return labels


def series(metric: str, labels: dict[str, str], *points: tuple[float, float]) -> Series:
    return Series(metric, labels, tuple(points))


def metrics(*found: Series, single_sample: bool = False, at: float | None = None) -> GpuMetrics:
    latest = max((s.points[-1][0] for s in found), default=0.0)
    return GpuMetrics("test", tuple(found), latest if at is None else at, single_sample)


def ramp(start: float, end: float, step: float, value: float) -> Sequence[tuple[float, float]]:
    count = int((end - start) / step) + 1
    return [(start + i * step, value) for i in range(count)]
