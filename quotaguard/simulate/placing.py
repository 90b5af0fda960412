"""Admitted workloads waiting for nodes, and the placement pass that tries them.

The pass (`Placing.place`) tries the waiting workloads highest priority first, then in
admission order; a gang that found no nodes is not tried again in the same pass (placing
others only takes GPUs away), and a workload that failed is not tried again until GPUs are
freed (`Cluster.released` moves).

Kept by gang, each gang's workloads in that order, so a pass costs the number of distinct
gangs and of workloads placed, not of workloads waiting: after a pass every workload still
waiting failed at the `released` of that pass, so the next pass either retries them all
(something was freed: the gangs merged by their first workload, a failed gang dropped with
all its followers at once) or only those admitted since (nothing was freed).
`PlainPlacing` is the plain pass over every workload, kept for the tests to compare.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator

from quotaguard.simulate.placement import Assignment, Cluster, Gang
from quotaguard.simulate.queued import QueuedWorkload

PlaceKey = tuple[int, float, int]  # (-priority, admitted at, id): the order of a pass
Placed = list[tuple[QueuedWorkload, Assignment]]


def place_key(workload: QueuedWorkload) -> PlaceKey:
    return (-workload.priority, workload.admitted_at or 0.0, workload.id)


class Placing:
    """The admitted workloads waiting for nodes, each with the gang it waits to place."""

    def __init__(self) -> None:
        self._workloads: dict[int, QueuedWorkload] = {}
        self._gang_of: dict[int, Gang] = {}
        self._by_gang: dict[Gang, list[tuple[PlaceKey, int]]] = {}
        self._per_queue: dict[str, int] = {}
        self._fresh: dict[int, None] = {}  # added since the last pass, in order
        self._passed_at: int | None = None  # `Cluster.released` at the last pass
        # id -> `released` when it last failed, for one taken out (evicted) while waiting:
        # admitted again before anything is freed, it is not tried
        self._failed_before: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._workloads)

    def __contains__(self, ident: object) -> bool:
        return ident in self._workloads

    def __iter__(self) -> Iterator[QueuedWorkload]:
        return iter(self._workloads.values())

    def count(self, queue: str) -> int:
        """How many of the queue's workloads wait for nodes."""
        return self._per_queue.get(queue, 0)

    def add(self, workload: QueuedWorkload, gang: Gang) -> None:
        ident = workload.id
        self._workloads[ident] = workload
        self._gang_of[ident] = gang
        bisect.insort(self._by_gang.setdefault(gang, []), (place_key(workload), ident))
        self._per_queue[workload.queue] = self._per_queue.get(workload.queue, 0) + 1
        self._fresh[ident] = None

    def remove(self, ident: int) -> None:
        """A waiting workload leaves (evicted); nothing when it does not wait."""
        if ident not in self._workloads:
            return
        if ident not in self._fresh and self._passed_at is not None:
            self._failed_before[ident] = self._passed_at  # it failed in the last pass
        self._drop(ident)

    def _drop(self, ident: int) -> None:
        workload = self._workloads.pop(ident)
        gang = self._gang_of.pop(ident)
        members = self._by_gang[gang]
        del members[bisect.bisect_left(members, (place_key(workload), ident))]
        if not members:
            del self._by_gang[gang]
        self._per_queue[workload.queue] -= 1
        self._fresh.pop(ident, None)

    def place(self, cluster: Cluster, unplaceable: set[int]) -> Placed:
        """One pass: the workloads placed, in the order they were; those that failed are added
        to `unplaceable`."""
        released = cluster.released
        if released != self._passed_at:
            placed = self._place_all(cluster)
        else:
            placed = self._place_fresh(cluster, released)
        for workload, _ in placed:
            self._failed_before.pop(workload.id, None)
            self._drop(workload.id)
        unplaceable.update(self._fresh)
        self._fresh.clear()
        self._passed_at = released
        return placed

    def _place_all(self, cluster: Cluster) -> Placed:
        """Every waiting workload may fit again: the gangs in turn by their first workload; a
        gang's placed workloads are always its first ones."""
        heap = [(members[0][0], gang) for gang, members in self._by_gang.items()]
        heapq.heapify(heap)  # keys are unique: gangs are never compared
        tried: dict[Gang, int] = {}
        placed: Placed = []
        while heap:
            _, gang = heapq.heappop(heap)
            assignment = cluster.place(gang)
            if assignment is None:
                continue
            members = self._by_gang[gang]
            position = tried.get(gang, 0)
            placed.append((self._workloads[members[position][1]], assignment))
            tried[gang] = position + 1
            if position + 1 < len(members):
                heapq.heappush(heap, (members[position + 1][0], gang))
        return placed

    def _place_fresh(self, cluster: Cluster, released: int) -> Placed:
        """Nothing freed since the last pass: only the workloads added since are tried."""
        failed_before = self._failed_before
        order = sorted(
            (place_key(self._workloads[ident]), ident)
            for ident in self._fresh
            if failed_before.get(ident) != released
        )
        failed: set[Gang] = set()
        placed: Placed = []
        for _, ident in order:
            gang = self._gang_of[ident]
            assignment = None if gang in failed else cluster.place(gang)
            if assignment is None:
                failed.add(gang)
            else:
                placed.append((self._workloads[ident], assignment))
        return placed


class PlainPlacing:
    """The plain pass `Placing` must equal, for the tests: every waiting workload not failed
    since the last release, sorted, tried in turn."""

    def __init__(self) -> None:
        self._waiting: dict[int, tuple[QueuedWorkload, Gang]] = {}
        self._failed_at: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def __iter__(self) -> Iterator[QueuedWorkload]:
        return iter([workload for workload, _ in self._waiting.values()])

    def count(self, queue: str) -> int:
        return sum(workload.queue == queue for workload, _ in self._waiting.values())

    def add(self, workload: QueuedWorkload, gang: Gang) -> None:
        self._waiting[workload.id] = (workload, gang)

    def remove(self, ident: int) -> None:
        self._waiting.pop(ident, None)

    def place(self, cluster: Cluster, unplaceable: set[int]) -> Placed:
        released = cluster.released
        order = sorted(
            (place_key(workload), ident)
            for ident, (workload, _) in self._waiting.items()
            if self._failed_at.get(ident) != released
        )
        failed: set[Gang] = set()
        placed: Placed = []
        for _, ident in order:
            workload, gang = self._waiting[ident]
            assignment = None if gang in failed else cluster.place(gang)
            if assignment is None:
                failed.add(gang)
                self._failed_at[ident] = released
                unplaceable.add(ident)
                continue
            del self._waiting[ident]
            self._failed_at.pop(ident, None)
            placed.append((workload, assignment))
        return placed
