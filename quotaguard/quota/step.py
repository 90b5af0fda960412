"""One planning step: the state kept between steps in, the plan and the next state out.

    observed demand -> smoother -> usage history -> fair-share weights -> plan

in two halves, `observe` (up to the weights) and `plan_observed`, so that the planning cycle
(`quotaguard.planning.cycle`) places GPUs by the same smoothed demand and weights between
them (the layout plan decides the capacity the quotas then share out). Pure: the same inputs
give the same step; the caller keeps the returned state for its next step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.class_capacity import ClassCapacity
from quotaguard.quota.demand import Demand, DemandSmoother
from quotaguard.quota.queues import QueueState
from quotaguard.quota.quota_planner import Plan, Planner
from quotaguard.quota.weights import (
    UsageHistory,
    fair_share_weights,
    held_weights,
    usage_in_gpus,
)


@dataclass(frozen=True, slots=True)
class PlanState:
    """What a step leaves for the next one (the empty state starts a history)."""

    smoother: DemandSmoother | None = None
    usage: UsageHistory = field(default_factory=UsageHistory)
    previous: Plan | None = None  # the last plan: the baseline when queues do not follow it
    planner: Planner | None = None  # for the last policy, rebuilt when the policy changes
    weights: Mapping[str, float] | None = None  # the weights the last step shared by


@dataclass(frozen=True, slots=True)
class Observed:
    """The first half of a step: demand smoothed and usage recorded, weights from it."""

    demand: Demand  # smoothed: what the plan shares out
    weights: Mapping[str, float]
    state: PlanState  # smoother and usage history moved on; previous plan and planner not yet


@dataclass(frozen=True, slots=True)
class Step:
    plan: Plan
    state: PlanState
    demand: Demand  # smoothed: what the plan shared out
    weights: Mapping[str, float]


def _smoother(state: PlanState, window: float) -> DemandSmoother:
    found = state.smoother
    if found is None:
        return DemandSmoother(window)
    if found.window != window:  # the policy changed its demandWindow: keep the levels
        return DemandSmoother(window, found.at, found.levels)
    return found


def observe(
    policy: TenantPolicy,
    observed: Demand,
    now: float,
    state: PlanState | None = None,
    *,
    weight_tolerance: float = 0.0,
) -> Observed:
    """Demand `observed` at `now` into the smoother and the usage history; the weights.

    `weight_tolerance`: a tenant's weight that moved by at most this fraction since the last
    step stays as it was (the controller's hysteresis on weights; a new policy starts over)."""
    state = state or PlanState()
    rebalance = policy.spec.rebalance
    smoother, smoothed = _smoother(state, rebalance.demand_window).observe(observed, now)
    usage = state.usage.record(usage_in_gpus(policy, observed), now, rebalance.usage_half_life)
    same_policy = state.planner is not None and state.planner.policy is policy
    weights = held_weights(
        state.weights if same_policy else None, fair_share_weights(policy, usage), weight_tolerance
    )
    return Observed(
        smoothed, weights, PlanState(smoother, usage, state.previous, state.planner, weights)
    )


def plan_observed(
    policy: TenantPolicy,
    capacity: Mapping[str, ClassCapacity],
    seen: Observed,
    *,
    current: Mapping[str, QueueState] | None = None,
    from_previous: bool = False,
) -> Step:
    """The second half: the plan of the smoothed demand on `capacity` (which may depend on the
    first half: the layout plan places GPUs by the same demand and weights)."""
    state = seen.state
    planner = state.planner
    if planner is None or planner.policy is not policy:
        planner = Planner(policy)
    the_plan = planner.plan(
        capacity,
        seen.demand,
        current=current,
        weights=seen.weights,
        previous=state.previous if from_previous else None,
    )
    next_state = PlanState(state.smoother, state.usage, the_plan, planner, seen.weights)
    return Step(the_plan, next_state, seen.demand, seen.weights)
