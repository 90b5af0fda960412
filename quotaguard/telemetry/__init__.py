"""GPU telemetry from DCGM (dcgm-exporter, usually through Prometheus), judged into plain facts:
which GPUs are faulty and which allocations are idle.

Pure modules: `series` (the data), `exposition` and `promjson` (parsers), `health` and `idle`
(judgements), `facts` (both at once). The one module with I/O is `metrics_sources` (the
Prometheus HTTP API and reading a metrics file), used by the commands and the controller.
"""

from quotaguard.telemetry.facts import GpuFacts, judge, no_telemetry
from quotaguard.telemetry.metrics_sources import (
    MetricsFile,
    PrometheusClient,
    TelemetryError,
    TelemetrySource,
)
from quotaguard.telemetry.series import GpuMetrics

__all__ = [
    "GpuFacts",
    "GpuMetrics",
    "MetricsFile",
    "PrometheusClient",
    "TelemetryError",
    "TelemetrySource",
    "judge",
    "no_telemetry",
]
