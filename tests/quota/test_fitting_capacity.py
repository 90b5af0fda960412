"""Fitting bounded moves into capacity, worked out by hand: how far raises are held back, and
what a held-back raise left below minChange does (cases mutation testing showed unchecked)."""

from __future__ import annotations

from quotaguard.quota.demand import ClassDemand
from quotaguard.quota.queues import QueueState
from quotaguard.quota.quota_planner import Plan, plan
from tests.quota.helpers import h100, policy
from tests.quota.test_planner_branches import holding


def planned(
    capacity: int,
    baselines: dict[str, int],
    demand: dict[str, int],
    *,
    guaranteed: dict[str, int] | None = None,
    **rebalance: int,
) -> dict[str, int]:
    guaranteed = guaranteed or {}
    tenants = [
        {"name": name, "quota": {"h100": {"guaranteed": guaranteed.get(name, 0)}}}
        for name in baselines
    ]
    current: dict[str, QueueState] = holding(**baselines)
    wants = {name: {"h100": ClassDemand(0, amount)} for name, amount in demand.items()}
    result: Plan = plan(policy(tenants, **rebalance), h100(capacity), wants, current=current)
    return {t.name: t.classes[0].nominal for t in result.tenants}


def test_a_raise_is_held_back_no_further_than_its_own_room() -> None:
    # Capacity 2; targets a 0 and b 2 (guarantee 1). a falls one step, 6 -> 5; b rises 1 -> 2:
    # 7, five over. b's room above its floor is 1, so it gives up 1 (back to 1); the other 4
    # come off a beyond its step (5 -> 1).
    result = planned(2, {"a": 6, "b": 1}, {"a": 0, "b": 2}, guaranteed={"b": 1}, minChange=1)
    assert result == {"a": 1, "b": 1}


def test_a_raise_that_gives_up_nothing_does_not_stop_the_others_being_held_back() -> None:
    # Capacity 9; targets 3, 3, 3 (a guaranteed 1). a rises 0 -> 3, c rises 0 -> 3, b's fall
    # 4 -> 3 is below minChange 3 and held: 10, one over. Rooms 2 (a, above its guarantee)
    # and 3 (c): the unit comes off c, whose raise (now 2) is below minChange and snaps back.
    result = planned(
        9,
        {"a": 0, "b": 4, "c": 0},
        {"a": 20, "b": 20, "c": 5},
        guaranteed={"a": 1},
        minChange=3,
    )
    assert result == {"a": 3, "b": 4, "c": 0}


def test_a_raise_from_an_empty_queue_cut_below_min_change_snaps_back_to_zero() -> None:
    # Capacity 3; targets a 2 and b 1. a rises 0 -> 2 (exactly minChange 2); b's fall 2 -> 1 is
    # held: 4, one over. a is held back to 1, a raise of 1 from 0: below minChange, so 0.
    result = planned(3, {"a": 0, "b": 2}, {"a": 5, "b": 20}, minChange=2, maxStepPercent=100)
    assert result == {"a": 0, "b": 2}


def test_a_raise_held_back_to_exactly_min_change_is_kept() -> None:
    # Capacity 10; guarantees a 2 and b 1, targets 2 and 8. a's fall 3 -> 2 is held; b rises
    # 5 -> 8: 11, one over. b is held back to 7, a raise of exactly minChange 2: kept.
    result = planned(
        10,
        {"a": 3, "b": 5},
        {"a": 0, "b": 20},
        guaranteed={"a": 2, "b": 1},
        minChange=2,
        maxStepPercent=100,
    )
    assert result == {"a": 3, "b": 7}


def test_with_min_change_zero_a_small_quota_still_moves_a_unit_a_step() -> None:
    # 25% of 2 is no whole unit; a step is at least one, or a small quota could never move.
    assert planned(10, {"a": 2}, {"a": 5}, minChange=0) == {"a": 3}


def test_a_guarantee_above_the_max_counts_only_up_to_the_max() -> None:
    # The planner takes the policy's model as it is (check_policy reports guaranteed > max).
    example = policy([{"name": "a", "quota": {"h100": {"guaranteed": 8, "max": 5}}}])
    row = plan(example, h100(10), {"a": {"h100": ClassDemand(0, 0)}}).tenants[0].classes[0]
    assert (row.guaranteed, row.nominal, row.max) == (5, 5, 5)
