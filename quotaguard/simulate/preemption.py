"""Which admitted workloads Kueue's classic preemption evicts to admit a pending one.

What it follows (Kueue "Preemption" concept page and ClusterQueue `spec.preemption`):

* **Policies**, per queue: `reclaimWithinCohort` (Never | LowerPriority | Any) lets a workload
  that fits within its queue's nominal quota evict workloads of other queues of the cohort
  that are borrowing; `withinClusterQueue` (Never | LowerPriority | LowerOrNewerEqualPriority)
  lets it evict workloads of its own queue; `borrowWithinCohort` (Never | LowerPriority, with
  an optional `maxPriorityThreshold`) lets it evict lower-priority workloads of borrowing
  queues even when it borrows itself.
* **Eligibility.** A workload that does not fit may preempt only when, for every class it
  lacks, its request is at most its queue's nominal quota (or `borrowWithinCohort` is on).
* **Candidates.** Workloads of its own queue allowed by `withinClusterQueue`, and workloads of
  other queues that borrow one of the classes it lacks, allowed by `reclaimWithinCohort`; only
  those that hold one of those classes. Ordered: other queues first, lowest priority first,
  most recently admitted first.
* **Targets.** Candidates are taken in that order, skipping a queue once it no longer borrows,
  until the workload fits; then, newest-taken first, every one whose removal is not needed is
  put back. No fit: nobody is evicted. Reclaiming (candidates from other queues) must leave the
  preempting queue within its nominal quota; only when that fails are its own workloads tried
  with borrowing allowed. With `borrowWithinCohort`, workloads of other queues at or above the
  threshold priority may be taken only if the preempting queue then does not borrow.

Kueue's fair-sharing preemption strategies are not modelled: victims are chosen the classic
way even though admission order follows fair sharing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from quotaguard.simulate.queued import QueuedWorkload, Request

ReclaimPolicy = Literal["Never", "LowerPriority", "Any"]
WithinPolicy = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
BorrowPolicy = Literal["Never", "LowerPriority"]


@dataclass(frozen=True, slots=True)
class Preemption:
    """A ClusterQueue's `spec.preemption` (Kueue's defaults: never preempt)."""

    reclaim_within_cohort: ReclaimPolicy = "Never"
    within_cluster_queue: WithinPolicy = "Never"
    borrow_within_cohort: BorrowPolicy = "Never"
    max_priority_threshold: int | None = None

    @property
    def enabled(self) -> bool:
        return (
            self.reclaim_within_cohort != "Never"
            or self.within_cluster_queue != "Never"
            or self.borrow_within_cohort != "Never"
        )

    def describe(self) -> str:
        """The settings as a ClusterQueue spells them."""
        parts = [
            f"reclaimWithinCohort {self.reclaim_within_cohort}",
            f"withinClusterQueue {self.within_cluster_queue}",
        ]
        if self.borrow_within_cohort != "Never":
            threshold = (
                ""
                if self.max_priority_threshold is None
                else f" (maxPriorityThreshold {self.max_priority_threshold})"
            )
            parts.append(f"borrowWithinCohort {self.borrow_within_cohort}{threshold}")
        return ", ".join(parts)


NEVER = Preemption()
# What every ClusterQueue of config/samples/kueue/clusterqueues.yaml declares.
RECLAIM = Preemption(reclaim_within_cohort="Any", within_cluster_queue="LowerPriority")
PRESETS: dict[str, Preemption] = {"never": NEVER, "reclaim": RECLAIM}
SAMPLE_PRESET = "reclaim"


def preset_name(preemption: Preemption) -> str | None:
    """The command-line name of a setting (`never`, `reclaim`), None for any other."""
    return next((name for name, found in PRESETS.items() if found == preemption), None)


class Cohort(Protocol):
    """What victim selection reads of the queue model, and the trial removals it makes."""

    def preemption(self, queue_name: str) -> Preemption: ...
    def queue_names(self) -> Iterable[str]: ...
    def running(self, queue_name: str) -> Iterable[QueuedWorkload]: ...
    def borrowing(self, queue_name: str, classes: Iterable[str]) -> bool: ...
    def under_nominal(self, queue_name: str, classes: Iterable[str]) -> bool: ...
    def fits_with(self, queue_name: str, request: Request, *, allow_borrowing: bool) -> bool: ...
    def remove(self, workload: QueuedWorkload) -> None: ...
    def restore(self, workload: QueuedWorkload) -> None: ...


def victim_key(preemptor_queue: str, workload: QueuedWorkload) -> tuple[bool, int, float, int]:
    """Kueue's order of candidates: other queues first, lowest priority, most recently admitted
    (ties: the later submitted)."""
    admitted = workload.admitted_at if workload.admitted_at is not None else 0.0
    return (workload.queue == preemptor_queue, workload.priority, -admitted, -workload.id)


def _earlier(workload: QueuedWorkload, now: float) -> bool:
    return workload.admitted_at is not None and workload.admitted_at < now


def _holds(workload: QueuedWorkload, classes: frozenset[str]) -> bool:
    return any(name in classes for name, _ in workload.request)


def candidates(
    cohort: Cohort, workload: QueuedWorkload, lacking: frozenset[str], now: float
) -> list[QueuedWorkload]:
    """The workloads the preempting queue's policy lets `workload` evict, in Kueue's order.

    A workload admitted at `now` itself is not one: each workload is evicted at most once an
    instant, so a round of preemptions always ends."""
    policy = cohort.preemption(workload.queue)
    found: list[QueuedWorkload] = []
    if policy.within_cluster_queue != "Never":
        newer_too = policy.within_cluster_queue == "LowerOrNewerEqualPriority"
        found.extend(_in_own_queue(cohort, workload, lacking, now, newer_too=newer_too))
    if policy.reclaim_within_cohort != "Never":
        lower_only = policy.reclaim_within_cohort == "LowerPriority"
        found.extend(_in_borrowing_queues(cohort, workload, lacking, now, lower_only=lower_only))
    found.sort(key=lambda other: victim_key(workload.queue, other))
    return found


def _in_own_queue(
    cohort: Cohort,
    workload: QueuedWorkload,
    lacking: frozenset[str],
    now: float,
    *,
    newer_too: bool,
) -> Iterator[QueuedWorkload]:
    """withinClusterQueue: lower priorities of the workload's own queue (with `newer_too`,
    also equal priorities that arrived after it) holding what it lacks."""
    priority, mine = workload.priority, (workload.arrival, workload.id)
    for other in cohort.running(workload.queue):
        if not _earlier(other, now) or other.priority > priority:
            continue
        if other.priority == priority and not (newer_too and mine < (other.arrival, other.id)):
            continue
        if _holds(other, lacking):
            yield other


def _in_borrowing_queues(
    cohort: Cohort,
    workload: QueuedWorkload,
    lacking: frozenset[str],
    now: float,
    *,
    lower_only: bool,
) -> Iterator[QueuedWorkload]:
    """reclaimWithinCohort: workloads of other queues that borrow what the workload lacks
    (with `lower_only`, only lower priorities)."""
    for name in cohort.queue_names():
        if name == workload.queue or not cohort.borrowing(name, lacking):
            continue
        for other in cohort.running(name):
            if not _earlier(other, now):
                continue
            if lower_only and other.priority >= workload.priority:
                continue
            if _holds(other, lacking):
                yield other


def _borrow_threshold(policy: Preemption, workload: QueuedWorkload) -> int | None:
    """With borrowWithinCohort: victims in other queues must be below this priority."""
    if policy.borrow_within_cohort == "Never":
        return None
    threshold = workload.priority
    if policy.max_priority_threshold is not None and policy.max_priority_threshold < threshold:
        threshold = policy.max_priority_threshold + 1
    return threshold


def _minimal(
    cohort: Cohort,
    workload: QueuedWorkload,
    lacking: frozenset[str],
    found: Sequence[QueuedWorkload],
    *,
    allow_borrowing: bool,
    threshold: int | None = None,
) -> list[QueuedWorkload]:
    """Take candidates in order until `workload` fits, then put back the ones not needed.
    Leaves the cohort as it found it."""
    taken: list[QueuedWorkload] = []
    fits = False
    for other in found:
        if other.queue != workload.queue:
            if not cohort.borrowing(other.queue, lacking):
                continue
            if threshold is not None and other.priority >= threshold:
                # a victim at or above the threshold is only allowed if nobody then borrows
                allow_borrowing = False
        cohort.remove(other)
        taken.append(other)
        if cohort.fits_with(workload.queue, workload.request, allow_borrowing=allow_borrowing):
            fits = True
            break
    if not fits:
        for other in taken:
            cohort.restore(other)
        return []
    needed = [taken[-1]]
    for other in reversed(taken[:-1]):
        cohort.restore(other)
        if cohort.fits_with(workload.queue, workload.request, allow_borrowing=allow_borrowing):
            continue
        cohort.remove(other)
        needed.append(other)
    for other in needed:
        cohort.restore(other)
    needed.reverse()
    return needed


def targets(
    cohort: Cohort, workload: QueuedWorkload, lacking: frozenset[str], now: float
) -> list[QueuedWorkload]:
    """The workloads to evict so that `workload` fits, or none when no allowed set suffices.

    `lacking`: the classes of its request it does not fit in now (quota or free units)."""
    found = candidates(cohort, workload, lacking, now)
    if not found:
        return []
    same = [other for other in found if other.queue == workload.queue]
    if len(same) == len(found):
        return _minimal(cohort, workload, lacking, found, allow_borrowing=True)
    threshold = _borrow_threshold(cohort.preemption(workload.queue), workload)
    if threshold is not None:
        if not cohort.under_nominal(workload.queue, lacking):
            found = [o for o in found if o.queue == workload.queue or o.priority < threshold]
        return _minimal(cohort, workload, lacking, found, allow_borrowing=True, threshold=threshold)
    if cohort.under_nominal(workload.queue, lacking):
        chosen = _minimal(cohort, workload, lacking, found, allow_borrowing=False)
        if chosen:
            return chosen
    return _minimal(cohort, workload, lacking, same, allow_borrowing=True)
