"""The queue model follows Kueue's documented admission semantics (Cluster Queue, Fair Sharing).

Examples are the ones of Kueue's "Cluster Queue" page where there is one (borrowing and lending
limits), with CPUs turned into GPUs.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.simulate.cohort import CohortConfig, QueueConfig, Quota, most_admissible
from quotaguard.simulate.queued import QueuedWorkload
from quotaguard.simulate.queueing import QueueModel

GPU = "gpu"
BIG = 1000


def model(
    *queues: QueueConfig, capacity: int = BIG, pool: dict[str, int] | None = None
) -> QueueModel:
    return QueueModel(CohortConfig(queues, {GPU: "nvidia.com/gpu"}, pool or {}), {GPU: capacity})


def queue(name: str, nominal: int, borrowing: int | None = None, lending: int | None = None,
          *, weight: float = 1.0, strict: bool = False) -> QueueConfig:  # fmt: skip
    return QueueConfig(
        name,
        {GPU: Quota(nominal, borrowing, lending)},
        weight=weight,
        strategy="StrictFIFO" if strict else "BestEffortFIFO",
    )


class Submitter:
    def __init__(self, target: QueueModel) -> None:
        self.model = target
        self.next_id = 0

    def __call__(self, queue_name: str, units: int, at: float = 0.0) -> QueuedWorkload:
        workload = QueuedWorkload(self.next_id, queue_name, ((GPU, units),), at)
        self.next_id += 1
        self.model.submit(workload)
        return workload


def used(target: QueueModel, name: str) -> int:
    return target.usage(name).get(GPU, 0)


def test_nominal_quota_is_admitted_without_a_cohort_to_borrow_from():
    m = model(queue("a", 9))
    submit = Submitter(m)
    for _ in range(10):
        submit("a", 1)
    assert len(m.admit(0)) == 9
    assert m.pending_count("a") == 1


def test_borrows_all_unused_nominal_of_the_cohort_without_a_borrowing_limit():
    # Kueue docs: team-a (9) may use 9 + 12 = 21 while team-b (12) has nothing admitted.
    m = model(queue("team-a", 9), queue("team-b", 12))
    submit = Submitter(m)
    for _ in range(25):
        submit("team-a", 1)
    m.admit(0)
    assert used(m, "team-a") == 21


def test_borrowing_limit_caps_what_a_queue_borrows():
    # Kueue docs: borrowingLimit 1 on team-a (9) -> 9 + 1 = 10.
    m = model(queue("team-a", 9, borrowing=1), queue("team-b", 12))
    submit = Submitter(m)
    for _ in range(25):
        submit("team-a", 1)
    m.admit(0)
    assert used(m, "team-a") == 10


def test_lending_limit_caps_what_a_queue_lends():
    # Kueue docs: lendingLimit 1 on team-b (12) -> team-a may use 9 + 1 = 10.
    m = model(queue("team-a", 9), queue("team-b", 12, lending=1))
    submit = Submitter(m)
    for _ in range(25):
        submit("team-a", 1)
    m.admit(0)
    assert used(m, "team-a") == 10


def test_a_queue_lends_the_smaller_of_its_lending_limit_and_its_unused_nominal():
    m = model(queue("a", 0), queue("b", 12, lending=4))
    submit = Submitter(m)
    for _ in range(10):
        submit("b", 1)
    m.admit(0)  # b uses 10 of 12: 2 unused, less than its lending limit of 4
    for _ in range(5):
        submit("a", 1)
    m.admit(1)
    assert used(m, "a") == 2


def test_the_guarantee_is_never_lent_even_to_a_queue_with_work_waiting():
    # b's own part is 12 - 4 = 8: however long a waits, it never gets more than 4.
    m = model(queue("a", 0), queue("b", 12, lending=4))
    submit = Submitter(m)
    for _ in range(20):
        submit("a", 1)
    m.admit(0)
    assert used(m, "a") == 4
    # ...and b still gets its own 8 at once, plus what a has not borrowed.
    for _ in range(12):
        submit("b", 1, at=1)
    m.admit(1)
    assert used(m, "b") == 8


def test_the_owner_gets_unused_nominal_back_only_as_borrowers_finish():
    # No preemption: what a borrowed stays borrowed until its workloads end.
    m = model(queue("a", 0), queue("b", 6))
    submit = Submitter(m)
    borrowed = [submit("a", 1) for _ in range(6)]
    m.admit(0)
    for _ in range(3):
        submit("b", 1, at=1)
    assert m.admit(1) == []
    m.finish(borrowed[0])
    assert [w.queue for w in m.admit(2)] == ["b"]


def test_workloads_within_nominal_quota_go_before_borrowing_ones():
    m = model(queue("a", 2), queue("b", 2), capacity=4)
    submit = Submitter(m)
    first = [submit("a", 1, at=0) for _ in range(2)]
    m.admit(0)
    older_borrower = submit("a", 1, at=1)  # a is at its nominal: this one would borrow
    newer_owner = submit("b", 1, at=2)  # b has nominal left
    admitted = m.admit(2)
    assert admitted[0] is newer_owner
    assert older_borrower in admitted
    assert first[0].admitted_at == 0


def test_best_effort_fifo_a_head_that_does_not_fit_does_not_block_smaller_ones():
    m = model(queue("a", 4))
    submit = Submitter(m)
    big = submit("a", 8, at=0)
    small = submit("a", 2, at=1)
    assert m.admit(1) == [small]
    assert big.admitted_at is None


def test_strict_fifo_a_head_that_does_not_fit_blocks_the_queue():
    m = model(queue("a", 4, strict=True))
    submit = Submitter(m)
    submit("a", 8, at=0)
    submit("a", 2, at=1)
    assert m.admit(1) == []


def test_within_a_queue_the_oldest_fitting_workload_goes_first():
    m = model(queue("a", 3))
    submit = Submitter(m)
    submit("a", 5, at=0)
    two = submit("a", 2, at=1)
    one = submit("a", 1, at=2)
    assert m.admit(2) == [two, one]


def test_contended_borrowing_goes_to_the_lowest_weighted_dominant_share():
    # The cohort lends 10 (c's unused nominal); a and b both borrow. a already borrows 4.
    m = model(queue("a", 0), queue("b", 0), queue("c", 10), capacity=10)
    submit = Submitter(m)
    for _ in range(4):
        submit("a", 1, at=0)
    m.admit(0)
    a_next = submit("a", 1, at=1)  # older...
    b_next = submit("b", 1, at=2)  # ...but b borrows less
    admitted = m.admit(2)
    assert admitted.index(b_next) < admitted.index(a_next)


def test_a_larger_fair_sharing_weight_lets_a_queue_borrow_more_before_yielding():
    # a (weight 4) borrowing 4 has share 4/10/4 = 0.1 -> 0.125 with one more; b (weight 1)
    # borrowing 1 has 0.2 with one more: a goes first despite borrowing more.
    m = model(queue("a", 0, weight=4), queue("b", 0), queue("c", 10), capacity=20)
    submit = Submitter(m)
    for _ in range(4):
        submit("a", 1, at=0)
    submit("b", 1, at=0)
    m.admit(0)
    b_next = submit("b", 1, at=1)
    a_next = submit("a", 1, at=2)
    admitted = m.admit(2)
    assert admitted.index(a_next) < admitted.index(b_next)


def test_share_is_borrowed_over_what_the_cohort_lends_divided_by_weight():
    m = model(queue("a", 2, weight=2), queue("b", 8))
    submit = Submitter(m)
    for _ in range(6):
        submit("a", 1)
    m.admit(0)
    # a uses 6 with nominal 2: borrows 4 of the 10 the cohort lends, weight 2.
    assert m.share("a") == 4 / 10 / 2
    assert m.share("a", ((GPU, 1),)) == 5 / 10 / 2
    assert m.share("b") == 0


def test_units_must_also_be_free_on_the_cluster():
    m = model(queue("a", 10), capacity=3)
    submit = Submitter(m)
    for _ in range(5):
        submit("a", 1)
    assert len(m.admit(0)) == 3


def test_a_cohort_pool_is_lendable_to_every_queue():
    m = model(queue("a", 0, borrowing=5), queue("b", 0), pool={GPU: 8})
    submit = Submitter(m)
    for _ in range(10):
        submit("a", 1)
    m.admit(0)
    for _ in range(10):
        submit("b", 1, at=1)
    m.admit(1)
    assert used(m, "a") == 5  # its borrowing limit
    assert used(m, "b") == 3  # the rest of the pool


def test_lowering_a_quota_below_usage_evicts_nothing_and_admits_nothing_more():
    m = model(queue("a", 6))
    submit = Submitter(m)
    running = [submit("a", 1) for _ in range(6)]
    m.admit(0)
    m.configure(CohortConfig((queue("a", 2),), {GPU: "nvidia.com/gpu"}))
    submit("a", 1, at=1)
    assert m.admit(1) == []
    assert used(m, "a") == 6
    for workload in running[:4]:
        m.finish(workload)
    assert m.admit(2) == []  # usage 2 = the new nominal
    m.finish(running[4])
    assert len(m.admit(3)) == 1


def test_a_class_the_queue_has_no_quota_for_is_never_admitted():
    m = QueueModel(
        CohortConfig((queue("a", 4),), {GPU: "nvidia.com/gpu", "mig": "nvidia.com/mig-1g"}),
        {GPU: 8, "mig": 8},
    )
    m.submit(QueuedWorkload(0, "a", (("mig", 1),), 0.0))
    assert m.admit(0) == []


@settings(max_examples=60, deadline=None)
@given(
    quotas=st.lists(
        st.tuples(
            st.integers(0, 6),
            st.one_of(st.none(), st.integers(0, 6)),
            st.one_of(st.none(), st.integers(0, 6)),
        ),
        min_size=1,
        max_size=3,
    ),
    capacity=st.integers(0, 20),
    pool=st.integers(0, 4),
    jobs=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 5), st.booleans()), max_size=30),
)
def test_admission_never_breaks_a_limit_and_leaves_nothing_admissible(quotas, capacity, pool, jobs):
    configs = [
        queue(f"q{index}", nominal, borrowing, lending)
        for index, (nominal, borrowing, lending) in enumerate(quotas)
    ]
    m = model(*configs, capacity=capacity, pool={GPU: pool})
    submit = Submitter(m)
    running: list[QueuedWorkload] = []
    for step, (index, units, finish_one) in enumerate(jobs):
        submit(f"q{index % len(configs)}", units, at=step)
        if finish_one and running:
            m.finish(running.pop(0))
        running.extend(m.admit(step))
        total = 0
        drawn = 0
        lendable = pool
        for config in configs:
            quota = config.quotas[GPU]
            use = used(m, config.name)
            total += use
            assert use <= quota.ceiling
            drawn += max(0, use - quota.own)
            lendable += quota.lendable
        assert total <= capacity
        assert drawn <= lendable  # nobody ever used another queue's own (never lent) part
        for config in configs:
            for waiting in m.pending(config.name):
                assert not m.fits(config.name, waiting.request)


def test_most_admissible_is_nominal_plus_what_the_cohort_could_lend_up_to_the_ceiling():
    lends_all, lends_two = queue("a", 4), queue("b", 6, lending=2)
    cohort = CohortConfig((queue("me", 1), lends_all, lends_two), {GPU: GPU}, {GPU: 3})
    assert most_admissible(cohort, "me", GPU) == 1 + 4 + 2 + 3
    capped = CohortConfig((queue("me", 1, borrowing=5), lends_all, lends_two), {GPU: GPU})
    assert most_admissible(capped, "me", GPU) == 6
    assert most_admissible(capped, "a", "other-class") == 0
    assert most_admissible(capped, "nobody", GPU) == 0
