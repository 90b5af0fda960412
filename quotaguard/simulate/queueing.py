"""A Kueue-style queue model: ClusterQueues in one cohort, quota per GPU class, no I/O.

What it follows (Kueue "Cluster Queue", "Preemption" and fair sharing documentation):

* **Quota.** Each queue has, per class (one ResourceFlavor and resource), a `nominal` quota,
  an optional `borrowing_limit` (None: may borrow everything the cohort lends) and an optional
  `lending_limit` (None: lends all its unused nominal). The part `nominal - lending_limit` is
  the queue's own and is never lent. The cohort may hold quota of its own (`pool`, as a Kueue
  Cohort object with resourceGroups does), lendable to every queue.
* **Fit.** A workload fits its queue when, for every class it requests, the units fit in what
  the queue may still use: its unused own part plus what the cohort can still lend
  (sum over queues of min(lendingLimit, unused nominal), plus the pool's unused part), and no
  more than `nominal + borrowing_limit` in total. Using more than `nominal` is borrowing.
* **Physical fit.** The units must also be free on the cluster. Capacity is counted per class
  in aggregate, not per node: a workload whose units are free in total but scattered over
  nodes is taken to fit (no fragmentation is modelled).
* **Order.** BestEffortFIFO per queue (Kueue's default): the oldest workload that fits is the
  queue's candidate; an older one that does not fit does not block it. StrictFIFO: only the
  oldest is a candidate. Across queues, as Kueue's scheduler sorts its heads: workloads that
  fit within nominal quota first, then (fair sharing) the lowest dominant resource share the
  queue would have after admitting the workload, divided by the queue's fairSharing weight,
  then the oldest. The share of a resource is what the queue uses above nominal over what the
  cohort can lend of it; the dominant share is the largest over resources.
* **No preemption.** Admitted workloads run to completion; lowering a quota below usage evicts
  nothing (as in Kueue), the queue simply admits nothing more until usage drains.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Request = tuple[tuple[str, int], ...]  # (class, units), sorted by class
Strategy = Literal["BestEffortFIFO", "StrictFIFO"]
INFINITE = float("inf")


@dataclass(frozen=True, slots=True)
class Quota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @property
    def own(self) -> int:
        """The part of nominal that is never lent."""
        if self.lending_limit is None:
            return 0
        return max(0, self.nominal - self.lending_limit)

    @property
    def lendable(self) -> int:
        return self.nominal - self.own

    @property
    def ceiling(self) -> float:
        return INFINITE if self.borrowing_limit is None else self.nominal + self.borrowing_limit


@dataclass(frozen=True, slots=True)
class QueueConfig:
    name: str
    quotas: Mapping[str, Quota]  # class -> quota; a class not listed cannot be used
    weight: float = 1.0
    strategy: Strategy = "BestEffortFIFO"


@dataclass(frozen=True, slots=True)
class CohortConfig:
    queues: tuple[QueueConfig, ...]
    # class -> resource name, to take the dominant share over resources (as Kueue does)
    resources: Mapping[str, str]
    # class -> quota the cohort itself holds, lendable to every queue
    pool: Mapping[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class QueuedWorkload:
    id: int
    queue: str
    request: Request
    arrival: float
    admitted_at: float | None = None


def request_of(units: Mapping[str, int]) -> Request:
    return tuple(sorted((name, count) for name, count in units.items() if count > 0))


class _Queue:
    __slots__ = ("config", "limits", "pending", "pending_count", "pending_units", "usage")

    def __init__(self, config: QueueConfig) -> None:
        self.config = config
        # class -> (nominal, own part, ceiling): the quota in the form admission reads it
        self.limits: dict[str, tuple[int, int, float]] = {}
        self.usage: dict[str, int] = {}
        # request shape -> the workloads of that shape, oldest first; FIFO across shapes is
        # the order of (arrival, id) of the shapes' heads
        self.pending: dict[Request, deque[QueuedWorkload]] = {}
        self.pending_units: dict[str, int] = {}
        self.pending_count = 0


class QueueModel:
    """The cohort's queues, their usage and pending workloads, and the cluster's free units.

    Deterministic: the same calls in the same order give the same admissions.
    """

    def __init__(self, cohort: CohortConfig, capacity: Mapping[str, int]) -> None:
        self._queues: dict[str, _Queue] = {q.name: _Queue(q) for q in cohort.queues}
        self._capacity = dict(capacity)
        self._allocated: dict[str, int] = dict.fromkeys(capacity, 0)
        self._cohort = cohort
        self._lendable: dict[str, int] = {}
        self._lendable_by_resource: dict[str, int] = {}
        self._lent: dict[str, int] = {}
        self._changed = True
        self.configure(cohort)

    # -- configuration -------------------------------------------------------------------

    def configure(self, cohort: CohortConfig) -> None:
        """New quotas and weights (queues keep their usage and pending workloads)."""
        self._cohort = cohort
        for config in cohort.queues:
            queue = self._queues.get(config.name)
            if queue is None:
                queue = self._queues[config.name] = _Queue(config)
            queue.config = config
            queue.limits = {
                name: (quota.nominal, quota.own, quota.ceiling)
                for name, quota in config.quotas.items()
            }
        classes = set(cohort.pool) | {c for q in cohort.queues for c in q.quotas}
        self._lendable = {
            name: cohort.pool.get(name, 0)
            + sum(q.quotas[name].lendable for q in cohort.queues if name in q.quotas)
            for name in classes
        }
        self._lendable_by_resource = {}
        for name, amount in self._lendable.items():
            resource = cohort.resources.get(name, name)
            self._lendable_by_resource[resource] = (
                self._lendable_by_resource.get(resource, 0) + amount
            )
        self._lent = {name: 0 for name in classes}
        for queue in self._queues.values():
            for name, used in queue.usage.items():
                self._lent[name] = self._lent.get(name, 0) + self._over_own(queue, name, used)
        self._changed = True

    @property
    def cohort(self) -> CohortConfig:
        return self._cohort

    @staticmethod
    def _over_own(queue: _Queue, name: str, used: int) -> int:
        """What a queue draws from the cohort: its usage above its own (never lent) part."""
        limits = queue.limits.get(name)
        return max(0, used - (limits[1] if limits is not None else 0))

    # -- what is free --------------------------------------------------------------------

    def available(self, queue_name: str, class_name: str) -> float:
        """Units of a class the queue may still be admitted (quota only, not the cluster)."""
        queue = self._queues[queue_name]
        limits = queue.limits.get(class_name)
        if limits is None:
            return 0
        _, own, ceiling = limits
        used = queue.usage.get(class_name, 0)
        cohort_free = self._lendable.get(class_name, 0) - self._lent.get(class_name, 0)
        free = (own - used if own > used else 0) + cohort_free
        return min(free, ceiling - used)

    def free(self, class_name: str) -> int:
        """Units of a class free on the cluster."""
        return self._capacity.get(class_name, 0) - self._allocated.get(class_name, 0)

    def fits(self, queue_name: str, request: Request) -> bool:
        for name, units in request:
            if units > self.free(name) or units > self.available(queue_name, name):
                return False
        return True

    def borrows(self, queue_name: str, request: Request) -> bool:
        queue = self._queues[queue_name]
        limits = queue.limits
        return any(
            queue.usage.get(name, 0) + units > limits.get(name, (0, 0, 0.0))[0]
            for name, units in request
        )

    def share(self, queue_name: str, request: Request = ()) -> float:
        """Weighted dominant resource share of the queue with `request` admitted."""
        queue = self._queues[queue_name]
        extra = dict(request)
        borrowed: dict[str, int] = {}
        resources = self._cohort.resources
        for name, quota in queue.config.quotas.items():
            above = queue.usage.get(name, 0) + extra.get(name, 0) - quota.nominal
            if above > 0:
                resource = resources.get(name, name)
                borrowed[resource] = borrowed.get(resource, 0) + above
        dominant = 0.0
        for resource, amount in borrowed.items():
            lendable = self._lendable_by_resource.get(resource, 0)
            dominant = max(dominant, amount / lendable if lendable > 0 else INFINITE)
        weight = queue.config.weight
        if weight <= 0:
            return INFINITE
        return dominant / weight

    # -- workloads -----------------------------------------------------------------------

    def submit(self, workload: QueuedWorkload) -> None:
        queue = self._queues[workload.queue]
        queue.pending.setdefault(workload.request, deque()).append(workload)
        queue.pending_count += 1
        for name, units in workload.request:
            queue.pending_units[name] = queue.pending_units.get(name, 0) + units
        self._changed = True

    def _candidate(self, queue: _Queue) -> QueuedWorkload | None:
        best: QueuedWorkload | None = None
        strict = queue.config.strategy == "StrictFIFO"
        for shape, waiting in queue.pending.items():
            head = waiting[0]
            if best is not None and (head.arrival, head.id) >= (best.arrival, best.id):
                continue
            if strict or self.fits(queue.config.name, shape):
                best = head
        if strict and best is not None and not self.fits(queue.config.name, best.request):
            return None
        return best

    def admit(self, now: float) -> list[QueuedWorkload]:
        """Admit every workload that can be admitted now, in Kueue's order."""
        if not self._changed:
            return []
        admitted: list[QueuedWorkload] = []
        while True:
            chosen: QueuedWorkload | None = None
            chosen_key: tuple[bool, float, float, int] | None = None
            for name, queue in self._queues.items():
                if not queue.pending:
                    continue
                candidate = self._candidate(queue)
                if candidate is None:
                    continue
                borrowing = self.borrows(name, candidate.request)
                share = self.share(name, candidate.request) if borrowing else 0.0
                key = (borrowing, share, candidate.arrival, candidate.id)
                if chosen_key is None or key < chosen_key:
                    chosen, chosen_key = candidate, key
            if chosen is None:
                break
            self._take(chosen, now)
            admitted.append(chosen)
        self._changed = False
        return admitted

    def _take(self, workload: QueuedWorkload, now: float) -> None:
        queue = self._queues[workload.queue]
        waiting = queue.pending[workload.request]
        waiting.popleft()
        if not waiting:
            del queue.pending[workload.request]
        queue.pending_count -= 1
        for name, units in workload.request:
            queue.pending_units[name] -= units
            self._use(queue, name, units)
        workload.admitted_at = now

    def _use(self, queue: _Queue, name: str, units: int) -> None:
        used = queue.usage.get(name, 0)
        after = used + units
        queue.usage[name] = after
        self._lent[name] = (
            self._lent.get(name, 0)
            + self._over_own(queue, name, after)
            - self._over_own(queue, name, used)
        )
        self._allocated[name] = self._allocated.get(name, 0) + units

    def finish(self, workload: QueuedWorkload) -> None:
        """An admitted workload ended: its quota and units are free again."""
        queue = self._queues[workload.queue]
        for name, units in workload.request:
            self._use(queue, name, -units)
        self._changed = True

    # -- observations --------------------------------------------------------------------

    def queue_names(self) -> Iterable[str]:
        return self._queues.keys()

    def usage(self, queue_name: str) -> Mapping[str, int]:
        return self._queues[queue_name].usage

    def pending_units(self, queue_name: str) -> Mapping[str, int]:
        return self._queues[queue_name].pending_units

    def pending_count(self, queue_name: str) -> int:
        return self._queues[queue_name].pending_count

    def pending(self, queue_name: str) -> list[QueuedWorkload]:
        """The queue's pending workloads, oldest first."""
        queue = self._queues[queue_name]
        found = [w for waiting in queue.pending.values() for w in waiting]
        return sorted(found, key=lambda w: (w.arrival, w.id))
