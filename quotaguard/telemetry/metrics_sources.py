"""Where telemetry comes from (the I/O edge): one interface, `TelemetrySource`, in two forms —
the Prometheus HTTP API (`PrometheusClient`) and a file (`MetricsFile`).

Every read is bounded in time (`timeout`) and size (`max_bytes`); anything unusable raises a
`TelemetryError` with one line, which callers turn into "no telemetry" — never into a failed
plan.
"""

from __future__ import annotations

import math
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from quotaguard.kube.documents import (
    STDIN,
    DocumentError,
    Limits,
    load_json,
    read_stdin,
    source_name,
)
from quotaguard.policy.model import Rebalance
from quotaguard.telemetry.exposition import parse_exposition
from quotaguard.telemetry.promjson import QueryRefused, TelemetryError, parse_query_response
from quotaguard.telemetry.series import MAX_POINTS, METRICS, TOO_MANY_POINTS, GpuMetrics

MAX_BYTES = 64 * 1024 * 1024
DEFAULT_TIMEOUT = 10.0
# Range queries look back this far at most, in about this many steps (Prometheus refuses more
# than 11,000 points per series).
MAX_WINDOW = 6 * 3600.0
STEPS = 120
CHUNK = 1 << 16
QUERY = '{__name__=~"' + "|".join(sorted(METRICS)) + '"}'

__all__ = [
    "MetricsFile",
    "PrometheusClient",
    "TelemetryError",
    "TelemetrySource",
    "read_metrics_file",
]


class TelemetrySource(Protocol):
    """GPU telemetry as of `now` (default: the present), over the window `rebalance` needs
    where the source has history; a `TelemetryError` when there is none to be had."""

    @property
    def name(self) -> str: ...

    def gpu_metrics(self, rebalance: Rebalance, *, now: float | None = None) -> GpuMetrics: ...


def _decode(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TelemetryError(f"{source}: not UTF-8 text: {exc}") from exc


def _limits(max_bytes: int) -> Limits:
    # A Prometheus answer nests six deep; anything far deeper is not one (and must not
    # exhaust the parser's recursion).
    return Limits("GPU telemetry", max_bytes, max_depth=32, max_nodes=4 * MAX_POINTS)


def _load_json(text: str, source: str, max_bytes: int = MAX_BYTES) -> object:
    try:
        return load_json(text, source, _limits(max_bytes))
    except DocumentError as exc:
        raise TelemetryError(str(exc)) from exc


def parse_metrics_text(text: str, *, source: str, now: float) -> GpuMetrics:
    """A file's text: JSON of a Prometheus query (range) answer, or a text exposition scrape."""
    if text.lstrip().startswith("{"):
        return parse_query_response(_load_json(text, source), source=source)
    return parse_exposition(text, at=now, source=source)


def read_metrics_file(
    path: str | Path, *, now: float | None = None, max_bytes: int = MAX_BYTES
) -> GpuMetrics:
    source = source_name(path)
    try:
        if str(path) == STDIN:
            data = read_stdin(max_bytes + 1)
        else:
            with Path(path).open("rb") as fh:
                data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise TelemetryError(f"{source}: cannot read: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:
        raise TelemetryError(f"{source}: larger than {max_bytes} bytes; not read")
    moment = time.time() if now is None else now
    return parse_metrics_text(_decode(data, source), source=source, now=moment)


class MetricsFile:
    """A file: a dcgm-exporter scrape, or the JSON of a Prometheus query or query_range; it
    holds whatever window it holds."""

    def __init__(self, path: str | Path, *, max_bytes: int = MAX_BYTES) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes

    @property
    def name(self) -> str:
        return str(self.path)

    def gpu_metrics(self, rebalance: Rebalance, *, now: float | None = None) -> GpuMetrics:
        return read_metrics_file(self.path, now=now, max_bytes=self.max_bytes)


def query_window(rebalance: Rebalance) -> tuple[float, float]:
    """(window, step) of the range query: long enough for idleFor and the quiet period."""
    window = min(MAX_WINDOW, max(rebalance.idle_for, rebalance.gpu_health.quiet_period))
    step = max(1.0, math.ceil(window / STEPS))
    return window, step


class PrometheusClient:
    """The Prometheus HTTP API (`/api/v1/query_range`), blocking; run it off the event loop."""

    def __init__(
        self, url: str, *, timeout: float = DEFAULT_TIMEOUT, max_bytes: int = MAX_BYTES
    ) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise TelemetryError(f"{url}: not an http(s) URL of a Prometheus server")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.max_bytes = max_bytes

    def _read(self, response: Any, deadline: float) -> bytes:
        """The body, up to one byte past `max_bytes`, read by the chunk: the socket timeout
        bounds each read only, so a server trickling its answer is cut off at the deadline
        (at most one read, `timeout`, late)."""
        chunks: list[bytes] = []
        size = 0
        while size <= self.max_bytes:
            if time.monotonic() > deadline:
                raise TelemetryError(f"{self.url}: no whole answer within {self.timeout:g}s")
            chunk = response.read1(min(CHUNK, self.max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)

    def _get(self, path: str, params: dict[str, str]) -> object:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        deadline = time.monotonic() + self.timeout
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                data = self._read(response, deadline)
        except TelemetryError:
            raise
        except urllib.error.HTTPError as exc:
            # Prometheus answers 400/422/503 with a JSON error body worth showing (one read:
            # a trickled one is not waited for).
            body = exc.read1(4096).decode("utf-8", "replace")
            raise QueryRefused(f"{self.url}: HTTP {exc.code}: {body[:200]}") from exc
        except (urllib.error.URLError, OSError, ValueError, OverflowError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TelemetryError(f"{self.url}: unreachable: {reason}") from exc
        if len(data) > self.max_bytes:
            raise QueryRefused(f"{self.url}: response larger than {self.max_bytes} bytes")
        try:
            return load_json(_decode(data, self.url), self.url, _limits(self.max_bytes))
        except DocumentError as exc:
            raise TelemetryError(f"{self.url}: response is not JSON: {exc.message}") from exc

    @property
    def name(self) -> str:
        return self.url

    def gpu_metrics(self, rebalance: Rebalance, *, now: float | None = None) -> GpuMetrics:
        """Every DCGM series the judgements read, over the window the policy needs: a range
        query; when Prometheus refuses it (too many points or samples, a query timeout) or its
        answer is past `max_bytes` or MAX_POINTS (a large cluster), an instant query at the
        same moment, judged on that one sample and said so."""
        end = time.time() if now is None else now
        try:
            found = self.range_query(rebalance, end)
        except QueryRefused as exc:
            refused = str(exc).removeprefix(f"{self.url}: ")
        else:
            if TOO_MANY_POINTS not in found.warnings:
                return found
            refused = f"past {MAX_POINTS:,} points"
        instant = self.instant_query(end)
        return replace(instant, note=f"range query refused ({refused}); read an instant query")

    def range_query(self, rebalance: Rebalance, end: float) -> GpuMetrics:
        window, step = query_window(rebalance)
        document = self._get(
            "/api/v1/query_range",
            {
                "query": QUERY,
                "start": f"{end - window:.3f}",
                "end": f"{end:.3f}",
                "step": f"{step:g}",
            },
        )
        return parse_query_response(document, source=self.url, at=end)

    def query_range(self, expr: str, start: float, end: float, step: float) -> object:
        """The JSON answer of one range query of any expression; `QueryRefused` when
        Prometheus refuses it (a smaller range may be answered), `TelemetryError` otherwise."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return self._get("/api/v1/query_range", params)

    def instant_query(self, at: float) -> GpuMetrics:
        """The latest sample of every series at `at` (one point each)."""
        document = self._get("/api/v1/query", {"query": QUERY, "time": f"{at:.3f}"})
        return parse_query_response(document, source=self.url, at=at)
