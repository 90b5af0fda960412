"""One planning step, its two halves composed as the planning cycle composes them around the
layout plan (here on a fixed capacity)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from quotaguard.policy.loader import load_policy_file
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.class_capacity import ClassCapacity, capacities_from_totals
from quotaguard.quota.cluster import ResourceQuota
from quotaguard.quota.demand import ClassDemand, Demand
from quotaguard.quota.queues import QueueState
from quotaguard.quota.quota_planner import ClassPlan, Plan, plan
from quotaguard.quota.step import PlanState, Step, observe, plan_observed
from quotaguard.quota.weights import UsageHistory, fair_share_weights, usage_in_gpus
from tests.quota.helpers import h100, policy

SAMPLE = load_policy_file("config/policy.yaml")
MIG = "h100-1g.10gb"
CAPACITY = capacities_from_totals(SAMPLE, {MIG: 28, "h100": 16}, {})
BUSY = {
    "inference": {MIG: ClassDemand(10, 30)},
    "notebooks": {MIG: ClassDemand(2, 10)},
    "training": {"h100": ClassDemand(8, 0)},
}
QUIET = {"inference": {MIG: ClassDemand(10, 0)}, "training": {"h100": ClassDemand(8, 0)}}


def plan_step(
    the_policy: TenantPolicy,
    capacity: Mapping[str, ClassCapacity],
    observed: Demand,
    now: float,
    state: PlanState | None = None,
    *,
    current: Mapping[str, QueueState] | None = None,
    from_previous: bool = False,
) -> Step:
    """Both halves at once, on `capacity`."""
    seen = observe(the_policy, observed, now, state)
    return plan_observed(the_policy, capacity, seen, current=current, from_previous=from_previous)


def row(result: Plan, tenant: str, gpu_class: str = MIG) -> ClassPlan:
    found = result.tenant(tenant)
    assert found is not None
    plan_row = found.for_class(gpu_class)
    assert plan_row is not None
    return plan_row


def pending(result: Plan, tenant: str) -> int:
    return row(result, tenant).pending


def test_a_first_step_is_the_plan_with_weights_from_that_one_observation() -> None:
    step = plan_step(SAMPLE, CAPACITY, BUSY, 0.0)
    history = UsageHistory().record(
        usage_in_gpus(SAMPLE, BUSY), 0.0, SAMPLE.spec.rebalance.usage_half_life
    )
    weights = fair_share_weights(SAMPLE, history)
    assert step.plan == plan(SAMPLE, CAPACITY, BUSY, weights=weights)
    assert step.weights == weights
    assert step.weights["training"] < SAMPLE.tenants_by_name["training"].weight
    assert step.demand == BUSY  # nothing to smooth yet


def test_demand_falls_slowly_across_steps_and_the_usage_history_builds_up() -> None:
    first = plan_step(SAMPLE, CAPACITY, BUSY, 0.0)
    window = SAMPLE.spec.rebalance.demand_window
    second = plan_step(SAMPLE, CAPACITY, QUIET, window / 10, first.state)
    # 30 pending a moment ago, none now: smoothed, most of it is still there.
    assert 20 < second.demand["inference"][MIG].pending < 30
    assert second.state.usage.at == window / 10
    assert second.state.smoother is not None and second.state.smoother.at == window / 10
    fresh = plan_step(SAMPLE, CAPACITY, QUIET, window / 10)
    assert fresh.demand["inference"][MIG].pending == 0
    assert pending(second.plan, "inference") > pending(fresh.plan, "inference") == 0


def test_the_previous_plan_is_the_baseline_only_when_asked() -> None:
    first = plan_step(SAMPLE, CAPACITY, BUSY, 0.0)
    assert row(first.plan, "inference").nominal == 19
    # Twice the MIG slices: inference's target is its max, 28.
    grown = capacities_from_totals(SAMPLE, {MIG: 56, "h100": 16}, {})
    followed = plan_step(SAMPLE, grown, BUSY, 60.0, first.state, from_previous=True)
    fresh = plan_step(SAMPLE, grown, BUSY, 60.0, first.state)
    # From the last plan's 19, one step is 25% (4 units); without a baseline it goes all the way.
    assert row(followed.plan, "inference").nominal == 23
    assert row(fresh.plan, "inference").nominal == 28
    assert followed.plan == plan(SAMPLE, grown, BUSY, weights=followed.weights, previous=first.plan)
    assert followed.state.previous == followed.plan


def test_the_planner_is_kept_for_the_same_policy_and_rebuilt_for_a_new_one() -> None:
    first = plan_step(SAMPLE, CAPACITY, BUSY, 0.0)
    again = plan_step(SAMPLE, CAPACITY, BUSY, 60.0, first.state)
    assert again.state.planner is first.state.planner
    reloaded = load_policy_file("config/policy.yaml")
    changed = plan_step(reloaded, CAPACITY, BUSY, 120.0, again.state)
    assert changed.state.planner is not None and changed.state.planner.policy is reloaded


def test_an_empty_state_is_the_default() -> None:
    given, default = (
        plan_step(SAMPLE, CAPACITY, BUSY, 5.0, PlanState()),
        plan_step(SAMPLE, CAPACITY, BUSY, 5.0),
    )
    assert (given.plan, given.demand, given.weights) == (
        default.plan,
        default.demand,
        default.weights,
    )
    assert (given.state.usage, given.state.smoother) == (
        default.state.usage,
        default.state.smoother,
    )


def with_demand_window(window: str) -> TenantPolicy:
    document = yaml.safe_load(Path("config/policy.yaml").read_text())
    document["spec"]["rebalance"]["demandWindow"] = window
    return TenantPolicy.model_validate(document)


def test_a_new_demand_window_keeps_the_smoothed_levels_and_decays_by_the_new_window() -> None:
    first = plan_step(SAMPLE, CAPACITY, BUSY, 0.0)
    # inference: 10 used + 30 pending, then 10 used and nothing pending 15 minutes later. Under
    # the old 15m window the 30 would have decayed to 5% (1 left); under 1h they keep
    # exp(-3 x 900 / 3600) of it: 10 + 30 x 0.47 = 24.2, 14 pending.
    second = plan_step(with_demand_window("1h"), CAPACITY, QUIET, 900.0, first.state)
    assert second.demand["inference"][MIG].pending == 14
    assert second.state.smoother is not None
    assert (second.state.smoother.window, second.state.smoother.at) == (3600.0, 900.0)


def test_the_second_half_alone_plans_from_the_queues_unless_asked() -> None:
    first = plan_step(SAMPLE, CAPACITY, BUSY, 0.0)
    grown = capacities_from_totals(SAMPLE, {MIG: 56, "h100": 16}, {})
    seen = observe(SAMPLE, BUSY, 60.0, first.state)
    assert row(plan_observed(SAMPLE, grown, seen).plan, "inference").nominal == 28


def test_a_step_moves_from_what_the_queues_hold() -> None:
    first = plan_step(SAMPLE, CAPACITY, BUSY, 0.0)
    grown = capacities_from_totals(SAMPLE, {MIG: 56, "h100": 16}, {})
    quotas = {MIG: ResourceQuota(19, None, None)}
    current = {"inference": QueueState("inference", "gpu-pool", 1.0, quotas)}
    step = plan_step(SAMPLE, grown, BUSY, 60.0, first.state, current=current)
    assert row(step.plan, "inference").nominal == 23  # one 25% step from the 19 it holds


TWO = policy(
    [
        {"name": "a", "quota": {"h100": {"max": 1000}}},
        {"name": "b", "quota": {"h100": {"max": 1000}}},
    ],
    usageHalfLife="10m",
)


def drifting(at: int) -> dict[str, dict[str, ClassDemand]]:
    """Both want more than the 400 GPUs; a's usage creeps up, b's down: the weights drift."""
    return {
        "a": {"h100": ClassDemand(200 + 4 * at, 300)},
        "b": {"h100": ClassDemand(200 - 4 * at, 300)},
    }


def nominals_and_weights(tolerance: float, steps: int) -> tuple[list[int], list[float]]:
    state, nominals, weights = PlanState(), [], []
    for at in range(steps):
        seen = observe(TWO, drifting(at), at * 60.0, state, weight_tolerance=tolerance)
        step = plan_observed(TWO, h100(400), seen)
        state = step.state
        nominals.append(row(step.plan, "a", "h100").nominal)
        weights.append(seen.weights["a"])
    return nominals, weights


def test_with_a_weight_tolerance_small_weight_moves_are_held_and_the_quotas_stay() -> None:
    # Quotas are shared by weight: without the hold each small move of a weight moves the
    # quotas by a unit, step after step (a write of every queue each interval).
    moving, _ = nominals_and_weights(0.0, 8)
    held, weights = nominals_and_weights(0.05, 8)
    assert len(set(moving)) > 2
    assert set(held) == {200} and set(weights) == {1.0}


def test_a_weight_past_the_tolerance_moves_and_a_new_policy_starts_over() -> None:
    _, weights = nominals_and_weights(0.05, 40)
    assert weights[-1] < 0.95  # held while within 5%, then moved
    assert len(set(weights)) < 6  # in a few jumps, not 40 small moves
    state = PlanState()
    for at in range(3):
        state = plan_observed(
            TWO, h100(400), observe(TWO, drifting(at), at * 60.0, state, weight_tolerance=0.05)
        ).state
    other = TWO.model_copy(deep=True)
    fresh = observe(other, drifting(30), 1800.0, state, weight_tolerance=0.05)
    assert fresh.weights == fair_share_weights(other, fresh.state.usage)
