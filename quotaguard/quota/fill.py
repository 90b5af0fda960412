"""Integer division of a budget: proportional (largest remainder) and weighted water-filling.

Both return whole numbers that add up exactly to what is divided. Ties go to the lower index,
so callers order their items by name to break ties by name.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def apportion(total: int, shares: Sequence[int]) -> list[int]:
    """Split `total` in proportion to `shares` (largest remainder; exact integer arithmetic).

    Each part is at most ceil(total x share / sum(shares)), so when total <= sum(shares) no
    part exceeds its share.
    """
    whole = sum(shares)
    if whole <= 0 or total <= 0:
        return [0] * len(shares)
    parts = [total * share // whole for share in shares]
    left = total - sum(parts)
    if left:
        order = sorted(range(len(shares)), key=lambda i: (-(total * shares[i] % whole), i))
        for index in order[:left]:
            parts[index] += 1
    return parts


def fill_level(
    floors: Sequence[int], caps: Sequence[int], weights: Sequence[float], budget: int
) -> float:
    """The level L with sum(clamp(L x weight, floor, cap)) == budget (sum(floors) < budget <
    sum(caps)); found by sweeping the sorted breakpoints floor/weight and cap/weight."""
    moving = [
        (index, low, high, weight)
        for index, (low, high, weight) in enumerate(zip(floors, caps, weights, strict=True))
        if high > low
    ]
    events = [(low / weight, 0, index) for index, low, _, weight in moving]
    events += [(high / weight, 1, index) for index, _, high, weight in moving]
    events.sort()
    constant = float(sum(floors))
    slope = 0.0
    for point, ending, index in events:
        reached = constant + slope * point
        if reached >= budget and slope > 0:
            return (budget - constant) / slope
        if ending:
            slope -= weights[index]
            constant += caps[index]
        else:
            slope += weights[index]
            constant -= floors[index]
    return math.inf


def water_fill(
    floors: Sequence[int], caps: Sequence[int], weights: Sequence[float], budget: int
) -> list[int]:
    """Weighted max-min fair division of `budget`: part i = clamp(L x weight_i, floor_i, cap_i)
    for the level L that spends the budget, rounded to whole numbers by largest remainder.

    Requires floor_i <= cap_i and sum(floors) <= budget. The parts add up to
    min(budget, sum(caps)), and each stays within [floor_i, cap_i].
    """
    if sum(caps) <= budget:
        return list(caps)
    if sum(floors) >= budget:
        return list(floors)
    level = fill_level(floors, caps, weights, budget)
    exact = [
        low if (x := level * w) < low else high if x > high else x
        for w, low, high in zip(weights, floors, caps, strict=True)
    ]
    return _rounded(exact, floors, caps, budget)


def _rounded(
    exact: Sequence[float], floors: Sequence[int], caps: Sequence[int], budget: int
) -> list[int]:
    """Whole parts within [floor, cap] that add up to `budget`, by largest remainder."""
    # floor() of a value within [low, high] stays there: both bounds are whole numbers.
    parts = [math.floor(value) for value in exact]
    left = budget - sum(parts)
    # Largest remainder first; the sort is stable, so ties keep the lower index first.
    shortfall = [part - value for part, value in zip(parts, exact, strict=True)]
    order = sorted(range(len(exact)), key=shortfall.__getitem__)
    # Floating point may leave the floors a unit or two away from the budget either way; walk
    # the largest remainders (then the smallest) until the sum is exact.
    while left > 0:
        for index in order:
            if left == 0:
                break
            if parts[index] < caps[index]:
                parts[index] += 1
                left -= 1
    while left < 0:
        for index in reversed(order):
            if left == 0:
                break
            if parts[index] > floors[index]:
                parts[index] -= 1
                left += 1
    return parts
