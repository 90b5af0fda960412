"""One planning cycle: what the controller decides every interval, `quotaguard plan` once and
the simulator's dynamic and geometry arms every tick.

    the cluster seen -> demand smoothed, usage history, weights
                     -> layout plan -> the capacity it leaves -> quota plan -> report

`plan_cycle` is the one place these steps are put together; the callers differ only in what
they read (`ClusterSeen`: a snapshot, the watch caches or the simulated queues) and in what
they do with the `Cycle` it returns (print it, write it, replay it). Pure: the same inputs give
the same cycle; the state a cycle leaves is passed to the next one by the caller.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property

from quotaguard.geometry.layout_capacity import plan_capacity
from quotaguard.geometry.layout_planner import LayoutPlan
from quotaguard.geometry.layout_report import LayoutRow, layout_rows
from quotaguard.geometry.nodes import NodeView
from quotaguard.policy.model import Mode, TenantPolicy
from quotaguard.quota.class_capacity import ClassCapacity
from quotaguard.quota.cluster import ClusterSnapshot, Node, Pod
from quotaguard.quota.demand import ClassActivity, Demand, activity_of, demand_of
from quotaguard.quota.dracapacity import snapshot_capacity
from quotaguard.quota.drademand import dra_demand, with_dra_demand
from quotaguard.quota.fragmentation import (
    FragmentationRow,
    class_fragmentation,
    fragmentation_rows,
)
from quotaguard.quota.queues import QueueState, current_state
from quotaguard.quota.quota_planner import Plan
from quotaguard.quota.quota_report import QuotaReport, build_report
from quotaguard.quota.step import Observed, PlanState, observe, plan_observed
from quotaguard.telemetry.facts import GpuFacts

# A fair-share weight moves a little every interval as usage decays; writing every such move,
# or sharing quotas by it, would update every queue every interval. Moves up to this fraction
# are left for later. The controller's default, and the simulator's, which plans as it does.
WEIGHT_HOLD_FRACTION = 0.05


class CycleReport(QuotaReport):
    """The report of one cycle: the quota report, the layout plan's `nodes` and each class's
    `fragmentation` (free units against the largest request one node holds)."""

    nodes: list[LayoutRow]
    fragmentation: list[FragmentationRow]


@dataclass(frozen=True, slots=True)
class ClusterSeen:
    """What one cycle plans from: the cluster as read."""

    nodes: Sequence[Node]
    pods: Sequence[Pod]
    demand: Demand  # usage and pending per tenant and class, as observed (not smoothed)
    current: Mapping[str, QueueState] = field(default_factory=dict)  # the queues now
    facts: GpuFacts | None = None  # GPU telemetry judged against these nodes and pods
    # allocated, used and idle units per tenant and class (for the report)
    activity: Mapping[str, Mapping[str, ClassActivity]] | None = None
    # GPU pods per node where they are known better than `pods` say (the simulator's placement)
    busy: Mapping[str, int] | None = None
    # the class capacity of these nodes and pods when known already (nodes that never change:
    # the simulator's dynamic arm), so that it is not counted again every cycle
    capacity: Mapping[str, ClassCapacity] | None = None
    # judge GPU-health quiet periods at the cycle's moment (the simulator's nodes carry no
    # condition times: there only a condition that holds takes a node out)
    quiet_periods: bool = True
    # GPUs offered through DRA (ResourceSlices), added to the class capacity the nodes leave
    dra_capacity: Callable[[Mapping[str, ClassCapacity]], Mapping[str, ClassCapacity]] | None = None


def seen_in_snapshot(
    policy: TenantPolicy, snapshot: ClusterSnapshot, facts: GpuFacts
) -> ClusterSeen:
    """The cluster of a snapshot (a file, a list, the watch caches) with its telemetry; GPUs
    asked and offered through DRA count beside the extended resources."""
    demand = demand_of(policy, snapshot, activity=facts.activity)
    dra_capacity = None
    if snapshot.dra_objects:
        demand = with_dra_demand(demand, dra_demand(policy, snapshot))
        dra_capacity = functools.partial(snapshot_capacity, policy, snapshot)
    return ClusterSeen(
        nodes=snapshot.nodes,
        pods=snapshot.pods,
        demand=demand,
        dra_capacity=dra_capacity,
        current=current_state(policy, snapshot),
        facts=facts,
        activity=activity_of(policy, snapshot, facts.activity),
    )


@dataclass(frozen=True, slots=True)
class CycleSettings:
    mode: Mode | None = None  # the plan's mode when not the policy's (`serve --mode`)
    # a fair-share weight's moves up to this fraction are held (quota.step.observe)
    weight_tolerance: float = 0.0
    # the last plan is the hysteresis baseline (recommend mode, where queues do not follow
    # the plan, and the simulator, where they follow it at once)
    from_previous: bool = False
    # when the plan's inputs repeat, so does the plan: the last one is kept, the planner not
    # run (the simulator's quiet ticks)
    reuse_plan: bool = False


PlanInputs = tuple[object, ...]


@dataclass(frozen=True, slots=True)
class CycleState:
    """What a cycle leaves for the next one (the empty state starts a history)."""

    plan: PlanState = field(default_factory=PlanState)
    inputs: PlanInputs | None = None  # the last plan's inputs (with `reuse_plan`)


@dataclass(frozen=True)
class Cycle:
    """Everything one cycle decides."""

    plan: Plan
    layouts: LayoutPlan
    views: tuple[NodeView, ...]  # the nodes as the layout planner saw them (node updates)
    capacity: Mapping[str, ClassCapacity]  # what the quotas shared out
    demand: Demand  # smoothed: what the plan shared out
    weights: Mapping[str, float]
    state: CycleState  # for the next cycle
    replanned: bool  # False: the inputs repeated and the last plan was kept
    seen: ClusterSeen
    at: float
    policy: TenantPolicy

    @cached_property
    def report(self) -> CycleReport:
        """The report (built on first use: the simulator never reads it)."""
        facts = self.seen.facts
        quota = build_report(
            self.plan,
            current=self.seen.current,
            generated_at=datetime.fromtimestamp(self.at, UTC),
            activity=self.seen.activity,
            telemetry=facts.summary() if facts is not None else None,
        )
        fragmentation = class_fragmentation(self.policy, self.seen.nodes, self.seen.pods)
        return {
            **quota,
            "nodes": layout_rows(self.layouts),
            "fragmentation": fragmentation_rows(fragmentation),
        }


def plan_cycle(
    policy: TenantPolicy,
    seen: ClusterSeen,
    now: float,
    state: CycleState | None = None,
    settings: CycleSettings = CycleSettings(),
) -> Cycle:
    """One cycle at `now` from `state` (see the module docstring). Layouts come first: the
    quotas are planned on the capacity they leave (nodes being changed at zero)."""
    state = state or CycleState()
    observed = observe(
        policy, seen.demand, now, state.plan, weight_tolerance=settings.weight_tolerance
    )
    faulty = seen.facts.faulty if seen.facts is not None else ()
    placed = plan_capacity(
        policy,
        seen.nodes,
        seen.pods,
        observed.demand,
        now=now,
        weights=observed.weights,
        faulty_gpus=faulty,
        health_at=now if seen.quiet_periods else None,
        busy=seen.busy,
        known=seen.capacity,
    )
    capacity = placed.capacity
    if seen.dra_capacity is not None:
        capacity = dict(seen.dra_capacity(capacity))
    the_plan, next_state, replanned = _quota_plan(
        policy, capacity, observed, seen.current, state, settings
    )
    if settings.mode is not None and the_plan.mode != settings.mode:
        the_plan = replace(the_plan, mode=settings.mode)
    return Cycle(
        plan=the_plan,
        layouts=placed.layouts,
        views=placed.views,
        capacity=capacity,
        demand=observed.demand,
        weights=observed.weights,
        state=next_state,
        replanned=replanned,
        seen=seen,
        at=now,
        policy=policy,
    )


def _quota_plan(
    policy: TenantPolicy,
    capacity: Mapping[str, ClassCapacity],
    observed: Observed,
    current: Mapping[str, QueueState],
    state: CycleState,
    settings: CycleSettings,
) -> tuple[Plan, CycleState, bool]:
    """The quota plan, the state after it, and whether the planner ran."""
    inputs: PlanInputs | None = None
    previous = observed.state.previous
    if settings.reuse_plan:
        inputs = _plan_inputs(observed, capacity, current, previous)
        if inputs == state.inputs and previous is not None:
            return previous, CycleState(observed.state, state.inputs), False
    step = plan_observed(
        policy,
        capacity,
        observed,
        current=current or None,
        from_previous=settings.from_previous,
    )
    if inputs is not None:  # the plan is its own baseline from now on
        inputs = (*inputs[:-1], _nominals(step.plan))
    return step.plan, CycleState(step.state, inputs), True


def _plan_inputs(
    observed: Observed,
    capacity: Mapping[str, ClassCapacity],
    current: Mapping[str, QueueState],
    previous: Plan | None,
) -> PlanInputs:
    """What the quota plan is a function of."""
    return (
        tuple(
            (tenant, name, row.usage, row.pending)
            for tenant, rows in sorted(observed.demand.items())
            for name, row in sorted(rows.items())
        ),
        tuple(sorted(observed.weights.items())),
        tuple(sorted(capacity.items())),
        tuple(sorted(current.items())),
        _nominals(previous),
    )


def _nominals(targets: Plan | None) -> tuple[tuple[str, str, int], ...]:
    if targets is None:
        return ()
    return tuple(
        (tenant.name, row.class_name, row.nominal)
        for tenant in targets.tenants
        for row in tenant.classes
    )
