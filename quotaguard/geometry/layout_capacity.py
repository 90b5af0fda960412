"""The capacity the quota plan is made on once layouts move: nodes that serve nothing while the
layout plan holds (changing, starting a change, failed) count as zero.

The planning cycle (`quotaguard.planning.cycle`) calls it for the controller, `quotaguard plan`
and the simulator; the quota planner only ever sees the capacity it is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from quotaguard.geometry.layout_planner import LayoutPlan, plan_layouts
from quotaguard.geometry.nodes import NodeView, node_views
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.class_capacity import ClassCapacity, FaultyGpu, class_capacity
from quotaguard.quota.cluster import Node, Pod
from quotaguard.quota.demand import Demand


@dataclass(frozen=True, slots=True)
class LayoutCapacity:
    """The layout plan, the class capacity left for quotas while it holds, and the nodes as the
    layout planner saw them (empty without `spec.geometry`): what the node updates start from."""

    layouts: LayoutPlan
    capacity: dict[str, ClassCapacity]
    views: tuple[NodeView, ...] = ()


def plan_capacity(
    policy: TenantPolicy,
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    demand: Demand,
    *,
    now: float,
    weights: Mapping[str, float] | None = None,
    faulty_gpus: Sequence[FaultyGpu] = (),
    health_at: float | None = None,
    busy: Mapping[str, int] | None = None,
    known: Mapping[str, ClassCapacity] | None = None,
) -> LayoutCapacity:
    """The layout plan at `now` and the capacity it leaves (net of the `faulty_gpus` GPU
    telemetry found). `health_at`: the moment GPU-health quiet periods are judged at (None:
    only a condition that holds counts); `busy`: GPU pods per node where `pods` do not say;
    `known`: the class capacity of these very nodes and pods, when the caller has it already."""
    capacity = (
        dict(known)
        if known is not None
        else class_capacity(policy, nodes, pods, faulty_gpus=faulty_gpus, now=health_at)
    )
    if policy.spec.geometry is None:
        return LayoutCapacity(LayoutPlan(mode="off"), capacity)
    held = {name: row.held_outside for name, row in capacity.items()}
    views = node_views(policy, nodes, pods, health_at, busy=busy)
    layouts = plan_layouts(policy, views, demand, now=now, weights=weights, held_outside=held)
    out = layouts.out_of_capacity
    if out:
        kept = [n for n in nodes if n.name not in out]
        capacity = class_capacity(policy, kept, pods, faulty_gpus=faulty_gpus, now=health_at)
    return LayoutCapacity(layouts, capacity, tuple(views))
