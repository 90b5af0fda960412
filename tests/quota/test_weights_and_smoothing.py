"""Fair-share weights from decayed usage, and demand smoothing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.quota.demand import ClassDemand, DemandSmoother
from quotaguard.quota.weights import (
    UsageHistory,
    fair_share_weights,
    held_weights,
    usage_in_gpus,
)
from tests.quota.helpers import policy
from tests.quota.strategies import policies

HOUR = 3600.0


def test_usage_history_starts_steady_and_halves_each_half_life() -> None:
    steady = HOUR / math.log(2)
    history = UsageHistory().record({"alpha": 2.0}, 0.0, HOUR)
    assert history.decayed["alpha"] == pytest.approx(2 * steady)
    held = history.record({"alpha": 2.0}, HOUR, HOUR)
    assert held.decayed["alpha"] == pytest.approx(2 * steady)  # constant usage is a fixed point
    idle = history.record({}, HOUR, HOUR)
    assert idle.decayed["alpha"] == pytest.approx(steady)


def test_weights_follow_usage_against_entitlement() -> None:
    # Equal bases, no guarantees: entitlement 1/2 each. alpha used 3/4 of everything:
    # sqrt(0.5/0.75) = 0.816; beta 1/4: sqrt(2) = 1.414. Alone, alpha used it all:
    # sqrt(0.5/1) = 0.707, and beta, which used nothing, gets the full factor 2.
    example = policy([{"name": "alpha"}, {"name": "beta"}])
    history = UsageHistory(0.0, {"alpha": 3.0, "beta": 1.0})
    assert fair_share_weights(example, history) == {"alpha": 0.816, "beta": 1.414}
    idle = UsageHistory(0.0, {"alpha": 3.0})
    assert fair_share_weights(example, idle) == {"alpha": 0.707, "beta": 2.0}
    assert fair_share_weights(example, UsageHistory()) == {"alpha": 1.0, "beta": 1.0}


def test_guarantee_raises_entitlement() -> None:
    # alpha is guaranteed 30 of 40 whole GPUs: entitled to 3/4 (more than its weight share of
    # 1/2), and it used 3/4: factor 1. beta keeps its weight share of 1/2 and used 1/4.
    example = policy(
        [
            {"name": "alpha", "quota": {"h100": {"guaranteed": 30}}},
            {"name": "beta", "quota": {"h100": {"guaranteed": 10}}},
        ]
    )
    weights = fair_share_weights(example, UsageHistory(0.0, {"alpha": 3.0, "beta": 1.0}))
    assert weights == {"alpha": 1.0, "beta": 1.414}


def test_usage_in_whole_gpu_equivalents() -> None:
    from quotaguard.policy.loader import load_policy_file

    sample = load_policy_file("config/policy.yaml")
    demand = {
        "inference": {"h100-1g.10gb": ClassDemand(7), "h100-3g.40gb": ClassDemand(7)},
        "notebooks": {"shared": ClassDemand(8, 100)},
    }
    assert usage_in_gpus(sample, demand) == {
        "inference": pytest.approx(1 + 3),
        "notebooks": pytest.approx(2),
    }


@settings(max_examples=60, deadline=None)
@given(policies(), st.data())
def test_weights_stay_within_the_factor_and_fall_with_usage(generated, data) -> None:
    names = [t.name for t in generated.spec.tenants]
    usage = {name: data.draw(st.floats(0, 1000)) for name in names}
    weights = fair_share_weights(generated, UsageHistory(0.0, usage))
    bound = generated.spec.rebalance.max_weight_factor
    for tenant in generated.spec.tenants:
        assert tenant.weight / bound - 1e-3 <= weights[tenant.name] <= tenant.weight * bound + 1e-3
    # Among tenants alike in base weight and guarantees, more usage never means more weight.
    for first in generated.spec.tenants:
        for second in generated.spec.tenants:
            alike = first.weight == second.weight and first.quota == second.quota
            if alike and usage[first.name] < usage[second.name]:
                assert weights[first.name] >= weights[second.name]


def observe(smoother: DemandSmoother, usage: int, pending: int, at: float):
    return smoother.observe({"t": {"h100": ClassDemand(usage, pending)}}, at)


def test_demand_rises_at_once_and_falls_over_the_window() -> None:
    smoother = DemandSmoother(window=900.0)
    smoother, smoothed = observe(smoother, 2, 8, 0.0)
    assert smoothed["t"]["h100"] == ClassDemand(2, 8)
    # 300 s later demand is 2: level 2 + 8 x exp(-1) = 4.94 -> 5, so 3 still counts as pending.
    smoother, smoothed = observe(smoother, 2, 0, 300.0)
    assert smoothed["t"]["h100"] == ClassDemand(2, 3)
    # One full window later the excess has decayed below half a unit.
    smoother, smoothed = observe(smoother, 2, 0, 1200.0)
    assert smoothed["t"]["h100"] == ClassDemand(2, 0)
    # Gone from the cluster: kept while the smoothed level rounds above zero, then dropped.
    smoother, _ = observe(smoother, 20, 0, 1300.0)
    smoother, smoothed = smoother.observe({}, 1400.0)
    assert smoothed["t"]["h100"].pending > 0
    smoother, smoothed = smoother.observe({}, 5000.0)
    assert smoothed == {}
    assert smoother.levels == {}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.floats(0, 2000)), max_size=8))
def test_smoothed_demand_between_now_and_the_recent_peak(observations) -> None:
    smoother, at, peak = DemandSmoother(window=900.0), 0.0, 0
    for usage, pending, elapsed in observations:
        at += elapsed
        smoother, smoothed = observe(smoother, usage, pending, at)
        row = smoothed["t"]["h100"]
        peak = max(peak, usage + pending)
        assert row.usage == usage
        assert usage + pending <= row.total <= peak


def test_a_weight_within_the_tolerance_keeps_the_held_one_and_a_larger_move_is_taken() -> None:
    held = {"a": 1.0, "b": 2.0}
    moved = held_weights(held, {"a": 1.04, "b": 2.2, "c": 3.0}, 0.05)
    assert moved == {"a": 1.0, "b": 2.2, "c": 3.0}  # c is new: taken as it is
    assert held_weights(held, {"a": 1.04, "b": 2.2}, 0.0) == {"a": 1.04, "b": 2.2}
    assert held_weights(None, {"a": 1.04}, 0.05) == {"a": 1.04}
