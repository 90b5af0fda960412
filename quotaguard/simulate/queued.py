"""A workload in the queue model: what it requests (one option per flavor it may take), its
priority and arrival, and, once preempted, its eviction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Request = tuple[tuple[str, int], ...]  # (class, units), sorted by class


@dataclass(slots=True)
class QueuedWorkload:
    id: int
    queue: str
    request: Request
    arrival: float
    priority: int = 0
    admitted_at: float | None = None
    # flavor fungibility: the requests Kueue tries in order (one class per resource each);
    # empty: `request` only. Admitted, `request` is the one that fit.
    options: tuple[Request, ...] = ()

    def queue_key(self) -> tuple[int, float, int]:
        """Order within a queue: highest priority first, then oldest."""
        return (-self.priority, self.arrival, self.id)


@dataclass(frozen=True, slots=True)
class Eviction:
    """An admitted workload preempted: it ran from `started` until `at`, for nothing."""

    workload: QueuedWorkload
    started: float
    at: float
    preemptor: QueuedWorkload


def request_of(units: Mapping[str, int]) -> Request:
    return tuple(sorted((name, count) for name, count in units.items() if count > 0))
