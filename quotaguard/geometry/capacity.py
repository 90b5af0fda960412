"""The capacity the quota plan is made on once layouts move: nodes that serve nothing while the
layout plan holds (changing, starting a change, failed) count as zero.

One function for `quotaguard plan`, the controller and the simulator; the quota planner only
ever sees the capacity it is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from quotaguard.geometry.nodes import node_views
from quotaguard.geometry.planner import LayoutPlan, plan_layouts
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.capacity import ClassCapacity, FaultyGpu, class_capacity
from quotaguard.quota.cluster import Node, Pod
from quotaguard.quota.demand import Demand


def plan_capacity(
    policy: TenantPolicy,
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    demand: Demand,
    *,
    now: float,
    weights: Mapping[str, float] | None = None,
    faulty_gpus: Sequence[FaultyGpu] = (),
) -> tuple[LayoutPlan, dict[str, ClassCapacity]]:
    """The layout plan and the class capacity left for quotas while it holds (net of the
    `faulty_gpus` GPU telemetry found)."""
    capacity = class_capacity(policy, nodes, pods, faulty_gpus=faulty_gpus, now=now)
    if policy.spec.geometry is None:
        return LayoutPlan(mode="off"), capacity
    held = {name: row.held_outside for name, row in capacity.items()}
    views = node_views(policy, nodes, pods, now)
    layouts = plan_layouts(policy, views, demand, now=now, weights=weights, held_outside=held)
    out = layouts.out_of_capacity
    if out:
        kept = [n for n in nodes if n.name not in out]
        capacity = class_capacity(policy, kept, pods, faulty_gpus=faulty_gpus, now=now)
    return layouts, capacity
