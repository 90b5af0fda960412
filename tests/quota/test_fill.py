"""Integer division of a budget, checked directly (the planner's exact shares rest on it)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaguard.quota.fill import apportion, fill_level, water_fill


def test_the_bigger_remainder_gets_the_unit_even_when_it_comes_second() -> None:
    # 5 x 1/4 = 1.25 and 5 x 3/4 = 3.75: the second share has the bigger remainder.
    assert apportion(5, [1, 3]) == [1, 4]
    assert apportion(5, [3, 1]) == [4, 1]


def test_equal_remainders_go_to_the_lower_index() -> None:
    assert apportion(1, [1, 1]) == [1, 0]
    assert apportion(2, [1, 1, 1]) == [1, 1, 0]


def test_nothing_to_divide_or_no_shares_gives_zeros() -> None:
    assert apportion(0, [2, 3]) == [0, 0]
    assert apportion(4, [0, 0]) == [0, 0]
    assert apportion(-1, [1]) == [0]


@given(st.integers(0, 200), st.lists(st.integers(0, 50), min_size=1, max_size=8))
def test_apportion_adds_up_and_no_part_exceeds_its_ceiling(total: int, shares: list[int]) -> None:
    parts = apportion(total, shares)
    whole = sum(shares)
    if whole == 0:
        assert parts == [0] * len(shares)
        return
    assert sum(parts) == total
    for part, share in zip(parts, shares, strict=True):
        assert total * share // whole <= part <= -(-total * share // whole)


def test_water_fill_shares_by_weight() -> None:
    assert water_fill([0, 0], [10, 10], [1, 2], 9) == [3, 6]


def test_water_fill_gives_a_capped_part_its_cap_and_the_rest_to_the_others() -> None:
    assert water_fill([0, 0], [2, 10], [1, 1], 8) == [2, 6]


def test_water_fill_keeps_floors() -> None:
    assert water_fill([5, 0], [10, 10], [1, 1], 8) == [5, 3]


def test_water_fill_rounds_by_largest_remainder_not_by_position() -> None:
    # Level 1.25: exact parts 1.25, 1.25 and 2.5; the unit left goes to the 0.5 remainder.
    assert water_fill([0, 0, 0], [10, 10, 10], [1, 1, 2], 5) == [1, 1, 3]


def test_water_fill_with_room_for_everything_or_nothing() -> None:
    assert water_fill([1, 2], [3, 4], [1, 1], 100) == [3, 4]
    assert water_fill([3, 4], [9, 9], [1, 1], 7) == [3, 4]


def test_fill_level_spends_the_budget() -> None:
    assert fill_level([0, 0], [10, 10], [1, 2], 9) == 3.0
    assert fill_level([5, 0], [10, 10], [1, 1], 8) == 3.0
    assert fill_level([0], [0], [1], 1) == math.inf  # nothing can move


@given(
    st.lists(
        st.tuples(st.integers(0, 20), st.integers(0, 20), st.floats(0.1, 10)),
        min_size=1,
        max_size=8,
    ),
    st.integers(0, 200),
)
def test_water_fill_adds_up_within_bounds(rows: list[tuple[int, int, float]], budget: int) -> None:
    floors = [min(a, b) for a, b, _ in rows]
    caps = [max(a, b) for a, b, _ in rows]
    weights = [w for _, _, w in rows]
    budget = max(budget, sum(floors))
    parts = water_fill(floors, caps, weights, budget)
    assert sum(parts) == min(budget, sum(caps))
    assert all(low <= part <= high for low, part, high in zip(floors, parts, caps, strict=True))


def test_lists_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError):
        fill_level([0, 0], [5], [1, 1], 3)
    with pytest.raises(ValueError):
        water_fill([0, 0], [5, 5], [1], 3)
