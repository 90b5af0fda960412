"""Leader election on one Lease: never two leaders, takeover after expiry, prompt step-down."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.controller.leader import LeaderElector

from .fakes import FakeLeaseStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def electors(store: FakeLeaseStore, clock: Clock, count: int = 2) -> list[LeaderElector]:
    return [
        LeaderElector(
            store,
            f"replica-{index}",
            namespace="qg",
            clock=clock,
            wall_clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
        )
        for index in range(count)
    ]


def test_first_elector_creates_the_lease_and_leads():
    store, clock = FakeLeaseStore(), Clock()
    first, second = electors(store, clock)
    assert first.try_acquire_or_renew()
    assert first.is_leader()
    assert not second.try_acquire_or_renew()
    assert not second.is_leader()
    spec = store.lease["spec"]
    assert spec["holderIdentity"] == "replica-0" and spec["leaseDurationSeconds"] == 15
    assert store.lease["metadata"] == {
        "name": "quotaguard-controller",
        "namespace": "qg",
        "resourceVersion": "1",
    }


def test_takeover_waits_for_expiry_and_the_old_leader_stopped_first():
    store, clock = FakeLeaseStore(), Clock()
    first, second = electors(store, clock)
    first.try_acquire_or_renew()
    second.try_acquire_or_renew()  # observes the lease at t=0
    clock.now += 9.9
    assert first.is_leader()  # within its renew deadline
    clock.now += 0.2
    assert not first.is_leader()  # no renewal for 10 s: stops writing by itself
    assert not second.try_acquire_or_renew()  # but the lease is not expired for others yet
    clock.now += 5.0
    assert second.try_acquire_or_renew()
    assert second.is_leader()
    assert store.lease["spec"]["leaseTransitions"] == 1
    assert not first.try_acquire_or_renew()
    assert not first.is_leader()


def test_a_stale_takeover_loses_with_a_conflict():
    store, clock = FakeLeaseStore(), Clock()
    first, second = electors(store, clock)
    first.try_acquire_or_renew()
    second.try_acquire_or_renew()
    clock.now += 20  # expired as far as `second` can tell
    # ... but `first` renews between second's read and second's write
    store.before_write = first.try_acquire_or_renew
    assert not second.try_acquire_or_renew()
    assert first.is_leader() and not second.is_leader()


def test_losing_the_lease_stops_writes_immediately():
    store, clock = FakeLeaseStore(), Clock()
    first, _ = electors(store, clock)
    first.try_acquire_or_renew()
    assert first.is_leader()
    lease = store.get()
    lease["spec"]["holderIdentity"] = "someone-else"
    store._store(lease)
    clock.now += 1
    assert not first.try_acquire_or_renew()
    assert not first.is_leader()


def test_release_hands_over_without_waiting():
    store, clock = FakeLeaseStore(), Clock()
    first, second = electors(store, clock)
    first.try_acquire_or_renew()
    second.try_acquire_or_renew()
    first.release()
    assert not first.is_leader()
    assert second.try_acquire_or_renew()


def test_an_unreachable_api_server_ends_the_term_at_the_deadline():
    store, clock = FakeLeaseStore(), Clock()
    first, _ = electors(store, clock)
    first.try_acquire_or_renew()

    def down():
        raise ConnectionRefusedError("down")

    store.get = down  # type: ignore[method-assign]
    clock.now += 5
    assert first.try_acquire_or_renew()  # still within the term
    clock.now += 5.1
    assert not first.try_acquire_or_renew()
    assert not first.is_leader(margin=0)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2), st.sampled_from([0.0, 1.0, 3.0, 4.5, 9.0, 16.0]), st.booleans()
        ),
        min_size=1,
        max_size=40,
    )
)
def test_never_two_leaders(steps):
    """Any interleaving of steps, clock jumps, crashes (a replica that stops stepping) and
    races (another replica stepping between a read and a write): at most one leads."""
    store, clock = FakeLeaseStore(), Clock()
    replicas = electors(store, clock, count=3)
    for who, advance, race in steps:
        clock.now += advance
        if race:
            store.before_write = replicas[(who + 1) % 3].try_acquire_or_renew
        replicas[who].try_acquire_or_renew()
        store.before_write = None
        leaders = [r.identity for r in replicas if r.is_leader()]
        assert len(leaders) <= 1, leaders
        if leaders:
            assert store.lease["spec"]["holderIdentity"] == leaders[0]


def test_a_standby_wakes_when_the_lease_it_watches_expires_not_a_poll_later():
    store, clock = FakeLeaseStore(), Clock()
    first, second = electors(store, clock)
    first.try_acquire_or_renew()
    assert first.next_step_in() == first.renew_period
    second.try_acquire_or_renew()  # sees the lease at t=0; it expires at t=15
    assert second.next_step_in() == second.acquire_period
    clock.now += 14.0  # the leader crashed: no renewal since
    second.try_acquire_or_renew()
    wait = second.next_step_in()
    assert 1.0 < wait < second.acquire_period
    clock.now += wait
    assert second.try_acquire_or_renew()  # taken at 15 s after the last renewal seen, not 16
