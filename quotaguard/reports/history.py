"""Quota over time: a bounded ring buffer of compact points taken from each interval's report."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_SPAN_SECONDS = 24 * 3600.0
MAX_POINTS = 5000


@dataclass(frozen=True, slots=True)
class ClassPoint:
    guaranteed: int
    nominal: int
    usage: int
    pending: int
    current: int | None = None  # the queue's nominal when the point was taken (None: no queue)


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    at: float  # Unix time
    # tenant -> class -> values
    tenants: Mapping[str, Mapping[str, ClassPoint]]


def points_for_span(interval: float, span: float = DEFAULT_SPAN_SECONDS) -> int:
    """How many points keep `span` seconds at one point per interval (bounded)."""
    return max(2, min(MAX_POINTS, int(span / max(interval, 1e-3)) + 1))


def _current_nominal(row: Mapping[str, Any]) -> int | None:
    current = row.get("current")
    if not current or current.get("nominal") is None:
        return None
    return int(current["nominal"])


def point_of(report: Mapping[str, Any], at: float) -> HistoryPoint:
    tenants: dict[str, dict[str, ClassPoint]] = {}
    for tenant in report.get("tenants", ()):
        tenants[tenant["name"]] = {
            row["class"]: ClassPoint(
                int(row.get("guaranteed") or 0),
                int(row.get("nominal") or 0),
                int(row.get("usage") or 0),
                int(row.get("pending") or 0),
                _current_nominal(row),
            )
            for row in tenant.get("classes", ())
        }
    return HistoryPoint(at, tenants)


class QuotaHistory:
    """Thread-safe: the controller appends on its loop, HTTP handlers read a copy."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self._points: deque[HistoryPoint] = deque(maxlen=max_points)
        self._lock = threading.Lock()

    @property
    def max_points(self) -> int:
        return self._points.maxlen or 0

    def resize(self, max_points: int) -> None:
        with self._lock:
            if max_points != self._points.maxlen:
                self._points = deque(self._points, maxlen=max_points)

    def append(self, point: HistoryPoint) -> None:
        with self._lock:
            self._points.append(point)

    def record(self, report: Mapping[str, Any], at: float) -> None:
        self.append(point_of(report, at))

    def points(self) -> list[HistoryPoint]:
        with self._lock:
            return list(self._points)

    def __len__(self) -> int:
        return len(self._points)
