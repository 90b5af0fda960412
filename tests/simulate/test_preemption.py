"""Kueue's classic preemption in the queue model: who may evict whom, which victims, when not.

Scenarios follow Kueue's "Preemption" concept page and ClusterQueue `spec.preemption`, with
one GPU class in one cohort.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.simulate.cohort import CohortConfig, QueueConfig, Quota
from quotaguard.simulate.preemption import NEVER, RECLAIM, Preemption, candidates
from quotaguard.simulate.queued import QueuedWorkload
from quotaguard.simulate.queueing import QueueModel

GPU = "gpu"
ANY = Preemption(reclaim_within_cohort="Any")


def queue(
    name: str,
    nominal: int,
    preemption: Preemption = ANY,
    *,
    borrowing: int | None = None,
    lending: int | None = None,
) -> QueueConfig:
    return QueueConfig(name, {GPU: Quota(nominal, borrowing, lending)}, preemption=preemption)


def model(*queues: QueueConfig, capacity: int) -> QueueModel:
    return QueueModel(CohortConfig(queues, {GPU: "nvidia.com/gpu"}), {GPU: capacity})


class Cluster:
    """A queue model with a clock: submit, admit, and what was evicted."""

    def __init__(self, target: QueueModel) -> None:
        self.model = target
        self.next_id = 0

    def submit(self, name: str, units: int, at: float, priority: int = 0) -> QueuedWorkload:
        workload = QueuedWorkload(self.next_id, name, ((GPU, units),), at, priority=priority)
        self.next_id += 1
        self.model.submit(workload)
        return workload

    def run(self, name: str, units: int, at: float, priority: int = 0) -> QueuedWorkload:
        """Submit and admit at once (asserting it is admitted)."""
        workload = self.submit(name, units, at, priority)
        assert workload in self.model.admit(at)
        return workload

    def evicted(self) -> list[QueuedWorkload]:
        return [eviction.workload for eviction in self.model.evictions()]


def used(target: QueueModel, name: str) -> int:
    return target.usage(name).get(GPU, 0)


def test_reclaim_evicts_a_borrower_to_restore_a_guarantee():
    # a lends its unused nominal 4 to b; when a wants it back, b's borrowed workloads go.
    cluster = Cluster(model(queue("a", 4), queue("b", 4), capacity=8))
    b_jobs = [cluster.run("b", 1, at=step) for step in range(8)]
    assert used(cluster.model, "b") == 8
    mine = cluster.submit("a", 2, at=10)
    assert cluster.model.admit(10) == [mine]
    # the two most recently admitted of b
    assert cluster.evicted() == [b_jobs[7], b_jobs[6]]
    assert (used(cluster.model, "a"), used(cluster.model, "b")) == (2, 6)
    # evicted workloads are pending again, in their place by arrival
    assert cluster.model.pending("b") == [b_jobs[6], b_jobs[7]]
    assert b_jobs[7].admitted_at is None


def test_without_preemption_the_owner_waits_for_the_borrower_to_finish():
    cluster = Cluster(model(queue("a", 4, NEVER), queue("b", 4, NEVER), capacity=8))
    for step in range(8):
        cluster.run("b", 1, at=step)
    cluster.submit("a", 2, at=10)
    assert cluster.model.admit(10) == []
    assert cluster.evicted() == []


def test_a_queue_within_its_nominal_quota_is_never_a_victim():
    # b runs within its nominal 4 and its workloads are the most recent; c borrows 4 of a's.
    cluster = Cluster(model(queue("a", 4), queue("b", 4), queue("c", 0), capacity=8))
    c_jobs = [cluster.run("c", 1, at=step) for step in range(4)]
    b_jobs = [cluster.run("b", 1, at=10 + step) for step in range(4)]
    cluster.submit("a", 4, at=20)
    cluster.model.admit(20)
    evicted = cluster.evicted()
    assert sorted(w.id for w in evicted) == sorted(w.id for w in c_jobs)
    assert all(w.admitted_at is not None for w in b_jobs)


def test_nobody_is_evicted_when_the_only_capacity_is_held_within_nominal_quota():
    # b holds 4 within its nominal 4 on a cluster of 4: a's guarantee has no physical room,
    # and b is not borrowing, so reclaim finds no victim.
    cluster = Cluster(model(queue("a", 4), queue("b", 4), capacity=4))
    for step in range(4):
        cluster.run("b", 1, at=step)
    cluster.submit("a", 1, at=10)
    assert cluster.model.admit(10) == []
    assert cluster.evicted() == []


def test_no_preemption_when_evicting_every_allowed_victim_would_not_suffice():
    # a (nominal 4) uses 2; c borrows a's other 2. a asks for 4: even with c's 2 back it
    # would need 6 > 4 within nominal, so reclaim is refused and c keeps running.
    cluster = Cluster(model(queue("a", 4), queue("c", 0), capacity=8))
    cluster.run("a", 2, at=0)
    borrowed = [cluster.run("c", 1, at=1 + step) for step in range(2)]
    big = cluster.submit("a", 4, at=10)
    assert cluster.model.admit(10) == []
    assert cluster.evicted() == []
    assert all(w.admitted_at is not None for w in borrowed)
    assert big.admitted_at is None


def test_a_request_above_nominal_quota_never_reclaims():
    # c borrows all of a's and b's nominal. a's request (5) is above its nominal (4), so
    # Kueue does not try preemption for it, although evicting 5 of c's would make it fit.
    cluster = Cluster(model(queue("a", 4), queue("b", 4), queue("c", 0), capacity=8))
    for step in range(8):
        cluster.run("c", 1, at=step)
    cluster.submit("a", 5, at=10)
    assert cluster.model.admit(10) == []
    assert cluster.evicted() == []


def test_only_as_many_victims_as_needed():
    # c borrows 4 with one 3-unit and one 1-unit workload; a needs 1: only the newest goes.
    cluster = Cluster(model(queue("a", 4), queue("c", 0), capacity=4))
    three = cluster.run("c", 3, at=0)
    one = cluster.run("c", 1, at=1)
    cluster.submit("a", 1, at=10)
    cluster.model.admit(10)
    assert cluster.evicted() == [one]
    assert three.admitted_at == 0


def test_victims_that_turn_out_unneeded_are_put_back():
    # Candidates in order: c's newest (1 unit), then c's older 3-unit one. Taking both fits a's
    # 3-unit request; then the 1-unit one is put back, since the 3-unit one alone suffices.
    cluster = Cluster(model(queue("a", 4), queue("c", 0), capacity=4))
    three = cluster.run("c", 3, at=0)
    one = cluster.run("c", 1, at=1)
    cluster.submit("a", 3, at=10)
    cluster.model.admit(10)
    assert cluster.evicted() == [three]
    assert one.admitted_at == 1


def test_victims_are_ordered_as_kueue_orders_them():
    # Kueue: workloads of other (borrowing) queues first, then lowest priority, then the most
    # recently admitted.
    policy = Preemption(reclaim_within_cohort="Any", within_cluster_queue="LowerPriority")
    cluster = Cluster(model(queue("a", 6, policy), queue("b", 0), capacity=8))
    own_low = cluster.run("a", 1, at=0, priority=-5)
    b_high_new = cluster.run("b", 1, at=1, priority=10)
    b_low_old = cluster.run("b", 1, at=2, priority=0)
    b_low_new = cluster.run("b", 1, at=3, priority=0)
    preemptor = QueuedWorkload(99, "a", ((GPU, 1),), 5.0, priority=0)
    order = candidates(cluster.model, preemptor, frozenset({GPU}), now=5)
    assert order == [b_low_new, b_low_old, b_high_new, own_low]


def test_lower_priority_reclaim_spares_workloads_of_equal_or_higher_priority():
    lower = Preemption(reclaim_within_cohort="LowerPriority")
    cluster = Cluster(model(queue("a", 2, lower), queue("b", 0), capacity=2))
    equal = cluster.run("b", 1, at=0, priority=5)
    low = cluster.run("b", 1, at=1, priority=1)
    cluster.submit("a", 1, at=2, priority=5)
    cluster.model.admit(2)
    assert cluster.evicted() == [low]
    cluster.submit("a", 1, at=3, priority=5)
    assert cluster.model.admit(3) == []  # only the equal-priority one is left: spared
    assert equal.admitted_at == 0


def test_within_cluster_queue_lower_priority_evicts_the_queues_own_lower_priority_work():
    policy = Preemption(within_cluster_queue="LowerPriority")
    cluster = Cluster(model(queue("a", 2, policy), capacity=2))
    low = cluster.run("a", 2, at=0, priority=0)
    urgent = cluster.submit("a", 2, at=1, priority=100)
    assert cluster.model.admit(1) == [urgent]
    assert cluster.evicted() == [low]
    # the evicted one cannot evict back: it has the lower priority
    assert cluster.model.admit(2) == []


def older_waits_behind_newer(policy: Preemption) -> tuple[Cluster, QueuedWorkload, QueuedWorkload]:
    """An older 2-unit workload waits while a newer 1-unit one of equal priority got the unit
    it could not use (BestEffortFIFO); then the first holder finishes."""
    cluster = Cluster(model(queue("a", 2, policy), capacity=2))
    first = cluster.run("a", 1, at=0)
    old = cluster.submit("a", 2, at=1)
    new = cluster.submit("a", 1, at=2)
    assert cluster.model.admit(2) == [new]
    cluster.model.finish(first)
    return cluster, old, new


def test_lower_or_newer_equal_priority_lets_an_older_workload_evict_a_newer_one():
    newer_too = Preemption(within_cluster_queue="LowerOrNewerEqualPriority")
    cluster, old, new = older_waits_behind_newer(newer_too)
    assert cluster.model.admit(3) == [old]
    assert cluster.evicted() == [new]


def test_lower_priority_within_the_queue_spares_a_newer_workload_of_equal_priority():
    lower = Preemption(within_cluster_queue="LowerPriority")
    cluster, old, new = older_waits_behind_newer(lower)
    assert cluster.model.admit(3) == []
    assert cluster.evicted() == []
    assert new.admitted_at == 2 and old.admitted_at is None


def test_borrow_within_cohort_lets_a_borrowing_queue_evict_lower_priority_borrowers():
    # a is at its nominal 2, so one more would borrow; b borrows all of c's unused nominal.
    borrow = Preemption(reclaim_within_cohort="Any", borrow_within_cohort="LowerPriority")
    for policy, evicts in ((borrow, True), (ANY, False)):
        cluster = Cluster(model(queue("a", 2, policy), queue("b", 2), queue("c", 2), capacity=6))
        cluster.run("a", 2, at=0, priority=10)
        low = [cluster.run("b", 1, at=1 + step, priority=0) for step in range(4)]
        wanted = cluster.submit("a", 1, at=10, priority=10)
        cluster.model.admit(10)
        # without borrowWithinCohort, a queue at its nominal quota may not reclaim
        assert cluster.evicted() == ([low[3]] if evicts else [])
        assert (wanted.admitted_at is not None) is evicts


def test_the_presets_are_never_and_what_the_sample_cluster_queues_declare():
    assert not NEVER.enabled
    assert RECLAIM.reclaim_within_cohort == "Any"
    assert RECLAIM.within_cluster_queue == "LowerPriority"


class Watched(QueueModel):
    """Records, for each eviction, the victim queue's usage before it and the preemptor
    queue's usage once the preemptor is admitted."""

    def __init__(self, cohort: CohortConfig, capacity: dict[str, int]) -> None:
        super().__init__(cohort, capacity)
        self.seen: list[tuple[QueuedWorkload, QueuedWorkload, int, int]] = []
        self._victims: list[tuple[QueuedWorkload, QueuedWorkload, int]] = []

    def _evict(self, workload: QueuedWorkload, now: float, preemptor: QueuedWorkload) -> None:
        self._victims.append((workload, preemptor, used(self, workload.queue)))
        super()._evict(workload, now, preemptor)

    def _take(self, workload: QueuedWorkload, now: float) -> None:
        super()._take(workload, now)
        for victim, preemptor, victim_used in self._victims:
            self.seen.append((victim, preemptor, victim_used, used(self, preemptor.queue)))
        self._victims.clear()


@settings(max_examples=50, deadline=None)
@given(
    nominals=st.lists(st.integers(0, 5), min_size=2, max_size=3),
    capacity=st.integers(1, 12),
    jobs=st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 4), st.integers(0, 2), st.booleans()),
        max_size=30,
    ),
    reclaim=st.booleans(),
)
def test_preemption_only_takes_from_borrowers_and_never_with_never(
    nominals, capacity, jobs, reclaim
):
    policy = RECLAIM if reclaim else NEVER
    configs = [queue(f"q{n}", nominal, policy) for n, nominal in enumerate(nominals)]
    nominal = {c.name: c.quotas[GPU].nominal for c in configs}
    target = Watched(CohortConfig(tuple(configs), {GPU: "nvidia.com/gpu"}), {GPU: capacity})
    cluster = Cluster(target)
    running: list[QueuedWorkload] = []
    for step, (index, units, priority, finish_one) in enumerate(jobs):
        cluster.submit(f"q{index % len(configs)}", units, at=step, priority=priority)
        if finish_one and running:
            target.finish(running.pop(0))
        admitted = target.admit(step)
        evictions = target.evictions()
        if not reclaim:
            assert evictions == []
        for victim, preemptor, victim_used, preemptor_used in target.seen:
            if victim.queue != preemptor.queue:
                # reclaim takes only from a queue that was borrowing, for a preemptor that
                # ends within its own nominal quota
                assert victim_used > nominal[victim.queue]
                assert preemptor_used <= nominal[preemptor.queue]
            else:
                assert victim.priority < preemptor.priority
        target.seen.clear()
        evicted_ids = {e.workload.id for e in evictions}
        running = [w for w in running if w.id not in evicted_ids]
        running.extend(w for w in admitted if w.admitted_at == step)
        assert sum(used(target, c.name) for c in configs) <= capacity
        assert sorted(w.id for w in running) == sorted(
            w.id for c in configs for w in target.running(c.name)
        )


def test_a_reclaiming_workload_goes_before_one_that_fits_only_by_borrowing():
    # The cohort lends 4 (a's nominal 2 and a pool of 2); c borrows 3 of it. At t=10, c's
    # newer 1-unit workload would fit by borrowing the last unit; a's 2-unit one needs a
    # reclaim. As Kueue orders heads, the one within its nominal quota goes first: one of
    # c's evicted, a admitted, and c's newcomer waits (admitting it first would have cost two
    # evictions).
    queues = (queue("a", 2), queue("c", 0))
    target = QueueModel(CohortConfig(queues, {GPU: "nvidia.com/gpu"}, {GPU: 2}), {GPU: 10})
    cluster = Cluster(target)
    borrowed = [cluster.run("c", 1, at=step) for step in range(3)]
    borrower = cluster.submit("c", 1, at=5)
    reclaimer = cluster.submit("a", 2, at=9)
    assert target.admit(10) == [reclaimer]
    assert cluster.evicted() == [borrowed[2]]
    assert borrower.admitted_at is None
