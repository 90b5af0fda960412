"""Prometheus HTTP API responses (`/api/v1/query_range` matrices, `/api/v1/query` vectors) into
series. A response that is not one of those is refused whole with a `TelemetryError`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quotaguard.telemetry.series import GpuMetrics, SeriesBuilder


class TelemetryError(ValueError):
    """The telemetry source answered something unusable; str() is one line naming it."""


class QueryRefused(TelemetryError):
    """Prometheus answered, but not usably for this query (its API's `status: error`, an HTTP
    error status, an answer too large to read): a smaller query may still be answered."""


def _result(document: object, source: str) -> tuple[str, list[Any]]:
    """(resultType, result) of a successful answer; TelemetryError for anything else."""
    if not isinstance(document, Mapping):
        raise TelemetryError(f"{source}: not a Prometheus API response (expected an object)")
    if document.get("status") != "success":
        error = document.get("error") or document.get("status") or "no status"
        raise QueryRefused(f"{source}: Prometheus answered an error: {str(error)[:200]}")
    data = document.get("data")
    if not isinstance(data, Mapping) or not isinstance(data.get("result"), list):
        raise TelemetryError(f"{source}: Prometheus response has no data.result list")
    kind = data.get("resultType")
    if kind not in ("matrix", "vector"):
        raise TelemetryError(f"{source}: resultType {kind!r} is neither matrix nor vector")
    return str(kind), data["result"]


def parse_query_response(
    document: object, *, source: str = "<prometheus>", at: float | None = None
) -> GpuMetrics:
    """The JSON of a query or query_range answer; `at` is the evaluation time when known."""
    kind, result = _result(document, source)
    builder = SeriesBuilder()
    for entry in result:
        metric = entry.get("metric") if isinstance(entry, Mapping) else None
        if not isinstance(metric, Mapping) or not isinstance(metric.get("__name__"), str):
            builder.warn("missing labels")
            continue
        labels = {
            str(k): str(v) for k, v in metric.items() if k != "__name__" and isinstance(v, str)
        }
        points: Any = entry.get("values") if kind == "matrix" else [entry.get("value")]
        if not isinstance(points, list):
            builder.warn("not a number")
            continue
        builder.add(metric["__name__"], labels, points)
    return builder.build(source, at=at, single_sample=kind == "vector")
