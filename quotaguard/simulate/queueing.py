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
* **Order.** BestEffortFIFO per queue (Kueue's default): the first workload that fits, by
  highest priority then oldest, is the queue's candidate; one before it that does not fit does
  not block it. StrictFIFO: only the first is a candidate. Across queues, as Kueue's scheduler
  sorts its heads: workloads that fit within nominal quota first, then (fair sharing) the
  lowest dominant resource share the queue would have after admitting the workload, divided by
  the queue's fairSharing weight, then the highest priority, then the oldest. The share of a
  resource is what the queue uses above nominal over what the cohort can lend of it; the
  dominant share is the largest over resources.
* **Preemption.** Per queue, as its ClusterQueue's `spec.preemption` says (`preemption.py`
  chooses the victims the way Kueue's classic preemption does). A pending workload tries to
  preempt, in the same order as admission, when nothing fits without borrowing: one that
  would stay within its nominal quota goes before one that fits only by borrowing. Victims
  leave and the preemptor is admitted at the same instant (Kueue waits for the victims' pods
  to end first); a workload admitted at that very instant is not a victim. An evicted
  workload goes back to its queue at the place its arrival gives it (Kueue keeps the creation
  timestamp) and, once admitted again, runs again (from its last checkpoint, if it has any:
  see `arm_replay`). Without preemption, lowering a
  quota below usage evicts nothing (as in Kueue): the queue admits nothing more until usage
  drains.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping

from quotaguard.simulate.cohort import INFINITE, CohortConfig, QueueConfig
from quotaguard.simulate.preemption import Preemption, targets
from quotaguard.simulate.queued import Eviction, QueuedWorkload, Request

# (the requests it may be admitted as, priority): pending workloads that queue alike
Shape = tuple[tuple[Request, ...], int]


class _Queue:
    __slots__ = (
        "config",
        "limits",
        "pending",
        "pending_count",
        "pending_units",
        "running",
        "running_priorities",
        "usage",
    )

    def __init__(self, config: QueueConfig) -> None:
        self.config = config
        # class -> (nominal, own part, ceiling): the quota in the form admission reads it
        self.limits: dict[str, tuple[int, int, float]] = {}
        self.usage: dict[str, int] = {}
        # shape -> the workloads of that shape, oldest first; the queue's order across shapes
        # is the order of the shapes' heads
        self.pending: dict[Shape, deque[QueuedWorkload]] = {}
        self.pending_units: dict[str, int] = {}
        self.pending_count = 0
        self.running: dict[int, QueuedWorkload] = {}  # admitted, by id in admission order
        self.running_priorities: dict[int, int] = {}  # priority -> running workloads

    def start(self, workload: QueuedWorkload) -> None:
        self.running[workload.id] = workload
        priorities = self.running_priorities
        priorities[workload.priority] = priorities.get(workload.priority, 0) + 1

    def stop(self, workload: QueuedWorkload) -> None:
        del self.running[workload.id]
        priorities = self.running_priorities
        left = priorities[workload.priority] - 1
        if left:
            priorities[workload.priority] = left
        else:
            del priorities[workload.priority]


def _lowest_preemptible(queue: _Queue) -> int | None:
    """The lowest priority running in the queue, made comparable to "lower than" (equal
    priorities count as lower under LowerOrNewerEqualPriority); None: nothing runs."""
    lowest = min(queue.running_priorities, default=None)
    if lowest is not None and queue.config.preemption.within_cluster_queue == (
        "LowerOrNewerEqualPriority"
    ):
        lowest -= 1
    return lowest


def _reclaimable(name: str, policy: Preemption, borrowers: Mapping[str, list[str]]) -> set[str]:
    """The classes another queue borrows: a head of this queue asking for one may reclaim it."""
    if policy.reclaim_within_cohort == "Never":
        return set()
    return {c for c, queues in borrowers.items() if len(queues) > 1 or queues[0] != name}


def _preempting_heads(
    name: str, queue: _Queue, borrowers: Mapping[str, list[str]]
) -> Iterator[QueuedWorkload]:
    """The heads of a queue's pending workloads that its preemption policy lets try: by
    reclaiming from another queue that borrows what they ask for, or by preempting a lower
    priority in their own queue."""
    policy = queue.config.preemption
    if not queue.pending or not policy.enabled:
        return
    heads: Iterable[QueuedWorkload] = [waiting[0] for waiting in queue.pending.values()]
    if queue.config.strategy == "StrictFIFO":
        heads = [min(heads, key=QueuedWorkload.queue_key)]
    reclaimable = _reclaimable(name, policy, borrowers)
    lowest = _lowest_preemptible(queue) if policy.within_cluster_queue != "Never" else None
    if not reclaimable and lowest is None:
        return
    for head in heads:
        if (lowest is not None and lowest < head.priority) or any(
            c in reclaimable for c, _ in head.request
        ):
            yield head


class QueueModel:
    """The cohort's queues, their usage and pending workloads, and the cluster's free units.

    Deterministic: the same calls in the same order give the same admissions.
    """

    def __init__(
        self, cohort: CohortConfig, capacity: Mapping[str, int], *, plain: bool = False
    ) -> None:
        """`plain`: every admission pass tries every shape (no shortcut; the tests compare)."""
        self._queues: dict[str, _Queue] = {q.name: _Queue(q) for q in cohort.queues}
        self._capacity = dict(capacity)
        self._allocated: dict[str, int] = dict.fromkeys(capacity, 0)
        self._cohort = cohort
        self._lendable: dict[str, int] = {}
        self._lendable_by_resource: dict[str, int] = {}
        self._lent: dict[str, int] = {}
        self._changed = True
        self._preempting = False
        self._evictions: list[Eviction] = []
        # the pending shapes (their workloads' deques, by id) none of whose flavors fits: what
        # is free only shrinks until units are freed or quotas change, so they are not tried
        # again until then
        self._unfit: set[int] = set()
        self._plain = plain
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
        self._preempting = any(q.preemption.enabled for q in cohort.queues)
        for queue in self._queues.values():
            for name, used in queue.usage.items():
                self._lent[name] = self._lent.get(name, 0) + self._over_own(queue, name, used)
        self._changed = True
        self._unfit.clear()

    def resize(self, capacity: Mapping[str, int]) -> None:
        """The cluster's units per class changed (a layout change): admission fits them now."""
        if capacity != self._capacity:
            self._capacity = dict(capacity)
            for name in capacity:
                self._allocated.setdefault(name, 0)
            self._changed = True
            self._unfit.clear()

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
        """`free` and `available` of every class of the request, inlined: admission asks
        this millions of times on a large trace."""
        capacity, allocated = self._capacity, self._allocated
        queue = self._queues[queue_name]
        for name, units in request:
            if units > capacity.get(name, 0) - allocated.get(name, 0):
                return False
            limits = queue.limits.get(name)
            if limits is None:
                if units > 0:
                    return False
                continue
            _, own, ceiling = limits
            used = queue.usage.get(name, 0)
            cohort_free = self._lendable.get(name, 0) - self._lent.get(name, 0)
            free = (own - used if own > used else 0) + cohort_free
            if units > min(free, ceiling - used):
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
        """Queue a workload, in its place by priority and arrival (a preempted one is
        requeued before those that arrived after it, as Kueue keeps its timestamp)."""
        queue = self._queues[workload.queue]
        if workload.options:
            workload.request = workload.options[0]
        shape = (workload.options or (workload.request,), workload.priority)
        waiting = queue.pending.setdefault(shape, deque())
        key = workload.queue_key()
        if waiting and waiting[-1].queue_key() > key:
            place = next(i for i, other in enumerate(waiting) if other.queue_key() > key)
            waiting.insert(place, workload)
        else:
            waiting.append(workload)
        queue.pending_count += 1
        for name, units in workload.request:
            queue.pending_units[name] = queue.pending_units.get(name, 0) + units
        self._changed = True

    def _fitting(self, queue_name: str, options: tuple[Request, ...]) -> Request | None:
        """The first request of the options that fits now, in the queue's flavor order. With
        `whenCanBorrow: MayStopSearch` (Kueue's default) a flavor that fits by borrowing is
        taken; with `TryNextFlavor` a later one that fits within nominal quota goes first, and
        the first that fits by borrowing only when none does."""
        borrow_next = self._queues[queue_name].config.borrow_next
        borrowing: Request | None = None
        for request in options:
            if not self.fits(queue_name, request):
                continue
            if not borrow_next or not self.borrows(queue_name, request):
                return request
            if borrowing is None:
                borrowing = request
        return borrowing

    def _candidate(self, queue: _Queue) -> tuple[QueuedWorkload, Request] | None:
        best: QueuedWorkload | None = None
        best_request: Request = ()
        best_key: tuple[int, float, int] | None = None
        strict = queue.config.strategy == "StrictFIFO"
        name = queue.config.name
        unfit, remember = self._unfit, not self._plain
        for (options, _), waiting in queue.pending.items():
            if id(waiting) in unfit:
                continue
            head = waiting[0]
            key = head.queue_key()
            if best_key is not None and key >= best_key:
                continue
            if strict:
                best, best_key, best_request = head, key, options[0]
                continue
            fitting = self._fitting(name, options)
            if fitting is not None:
                best, best_key, best_request = head, key, fitting
            elif remember:
                unfit.add(id(waiting))
        if best is None:
            return None
        if strict:
            fitting = self._fitting(name, best.options or (best.request,))
            if fitting is None:
                return None
            best_request = fitting
        return best, best_request

    def admit(self, now: float) -> list[QueuedWorkload]:
        """Admit every workload that can be admitted now, in Kueue's order, preempting where
        the queues' policies allow it (see `evictions`)."""
        if not self._changed:
            return []
        admitted: list[QueuedWorkload] = []
        while True:
            chosen, chosen_request, chosen_key = self._first_candidate()
            if self._preempting and (chosen_key is None or chosen_key[0]):
                # a workload that fits only by borrowing waits behind one that can reclaim
                # its own nominal quota, as Kueue's scheduler orders them
                preemptor = self._preempt(now, within_nominal=chosen is not None)
                if preemptor is not None:
                    chosen, chosen_request = preemptor, preemptor.request
            if chosen is None:
                break
            if chosen_request != chosen.request:
                self._choose(chosen, chosen_request)
            self._take(chosen, now)
            admitted.append(chosen)
        self._changed = False
        return admitted

    def _first_candidate(
        self,
    ) -> tuple[QueuedWorkload | None, Request, tuple[bool, float, int, float, int] | None]:
        """Across the queues' candidates, the one Kueue's scheduler takes first: fits within
        nominal quota, then the lowest share it would leave, then priority, then age."""
        chosen: QueuedWorkload | None = None
        chosen_request: Request = ()
        chosen_key: tuple[bool, float, int, float, int] | None = None
        for name, queue in self._queues.items():
            if not queue.pending:
                continue
            found = self._candidate(queue)
            if found is None:
                continue
            candidate, request = found
            borrowing = self.borrows(name, request)
            share = self.share(name, request) if borrowing else 0.0
            key = (borrowing, share, -candidate.priority, candidate.arrival, candidate.id)
            if chosen_key is None or key < chosen_key:
                chosen, chosen_key, chosen_request = candidate, key, request
        return chosen, chosen_request, chosen_key

    # -- preemption ----------------------------------------------------------------------

    def _lacking(self, workload: QueuedWorkload) -> frozenset[str]:
        """The classes of the request that do not fit now (quota or free units)."""
        name = workload.queue
        return frozenset(
            c
            for c, units in workload.request
            if units > self.free(c) or units > self.available(name, c)
        )

    def _may_preempt(self, workload: QueuedWorkload, lacking: frozenset[str]) -> bool:
        """Kueue tries preemption for a class only when the request is within the queue's
        nominal quota, or when borrowWithinCohort lets it borrow while preempting."""
        queue = self._queues[workload.queue]
        borrow = queue.config.preemption.borrow_within_cohort != "Never"
        units_of = dict(workload.request)
        for name in lacking:
            limits = queue.limits.get(name)
            if limits is None:
                return False
            units = units_of[name]
            if units > self._capacity.get(name, 0):
                return False
            if units <= limits[0]:
                continue
            if not (borrow and queue.usage.get(name, 0) + units <= limits[2]):
                return False
        return True

    def _preempt(self, now: float, *, within_nominal: bool = False) -> QueuedWorkload | None:
        """The first pending workload, in admission order, that preemption makes fit (with
        `within_nominal`, only one that would not borrow); its victims are evicted."""
        borrowers = self._borrowers()
        ranked: list[tuple[tuple[bool, int, float, int], QueuedWorkload, frozenset[str]]] = []
        for name, queue in self._queues.items():
            for head in _preempting_heads(name, queue, borrowers):
                borrows = self.borrows(name, head.request)
                if within_nominal and borrows:
                    continue
                lacking = self._lacking(head)
                if lacking and self._may_preempt(head, lacking):
                    ranked.append(((borrows, -head.priority, head.arrival, head.id), head, lacking))
        ranked.sort(key=lambda attempt: attempt[0])
        for _, workload, lacking in ranked:
            victims = targets(self, workload, lacking, now)
            if victims:
                for victim in victims:
                    self._evict(victim, now, workload)
                return workload
        return None

    def _borrowers(self) -> dict[str, list[str]]:
        """Class -> the queues using more than their nominal quota of it: the only places a
        reclaim can take from (a cheap test before the search for victims)."""
        borrowers: dict[str, list[str]] = {}
        for name, queue in self._queues.items():
            for class_name, used in queue.usage.items():
                limits = queue.limits.get(class_name)
                if used > (limits[0] if limits is not None else 0):
                    borrowers.setdefault(class_name, []).append(name)
        return borrowers

    def _evict(self, workload: QueuedWorkload, now: float, preemptor: QueuedWorkload) -> None:
        self._queues[workload.queue].stop(workload)
        self.remove(workload)
        started = workload.admitted_at
        assert started is not None
        self._evictions.append(Eviction(workload, started, now, preemptor))
        workload.admitted_at = None
        self.submit(workload)

    def evictions(self) -> list[Eviction]:
        """The workloads preempted since the last call, in order."""
        found, self._evictions = self._evictions, []
        return found

    # what victim selection (preemption.Cohort) reads and tries

    def preemption(self, queue_name: str) -> Preemption:
        return self._queues[queue_name].config.preemption

    def running(self, queue_name: str) -> Iterable[QueuedWorkload]:
        return self._queues[queue_name].running.values()

    def borrowing(self, queue_name: str, classes: Iterable[str]) -> bool:
        """Whether the queue uses more than its nominal quota of one of `classes`."""
        queue = self._queues[queue_name]
        for name in classes:
            limits = queue.limits.get(name)
            if queue.usage.get(name, 0) > (limits[0] if limits is not None else 0):
                return True
        return False

    def under_nominal(self, queue_name: str, classes: Iterable[str]) -> bool:
        queue = self._queues[queue_name]
        for name in classes:
            limits = queue.limits.get(name)
            if queue.usage.get(name, 0) >= (limits[0] if limits is not None else 0):
                return False
        return True

    def fits_with(self, queue_name: str, request: Request, *, allow_borrowing: bool) -> bool:
        if not self.fits(queue_name, request):
            return False
        return allow_borrowing or not self.borrows(queue_name, request)

    def remove(self, workload: QueuedWorkload) -> None:
        """Release an admitted workload's quota and units (a trial removal, or an eviction)."""
        queue = self._queues[workload.queue]
        for name, units in workload.request:
            self._use(queue, name, -units)

    def restore(self, workload: QueuedWorkload) -> None:
        queue = self._queues[workload.queue]
        for name, units in workload.request:
            self._use(queue, name, units)

    def _choose(self, workload: QueuedWorkload, request: Request) -> None:
        """A pending workload takes another of its options (the flavor that fits)."""
        pending = self._queues[workload.queue].pending_units
        for name, units in workload.request:
            pending[name] -= units
        workload.request = request
        for name, units in request:
            pending[name] = pending.get(name, 0) + units

    def _take(self, workload: QueuedWorkload, now: float) -> None:
        queue = self._queues[workload.queue]
        shape = (workload.options or (workload.request,), workload.priority)
        waiting = queue.pending[shape]
        waiting.popleft()
        if not waiting:
            del queue.pending[shape]
            self._unfit.discard(id(waiting))
        queue.pending_count -= 1
        for name, units in workload.request:
            queue.pending_units[name] -= units
            self._use(queue, name, units)
        queue.start(workload)
        workload.admitted_at = now

    def _use(self, queue: _Queue, name: str, units: int) -> None:
        if units < 0:
            self._unfit.clear()
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
        self._queues[workload.queue].stop(workload)
        self.remove(workload)
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
        """The queue's pending workloads in queue order (highest priority, then oldest)."""
        queue = self._queues[queue_name]
        found = [w for waiting in queue.pending.values() for w in waiting]
        return sorted(found, key=QueuedWorkload.queue_key)
