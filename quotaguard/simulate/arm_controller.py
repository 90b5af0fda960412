"""The quota controller of the dynamic and geometry arms: the controller's own planning cycle
(`planning.plan_cycle`: demand smoothing, usage history, weights held within the
controller's default tolerance, layouts, plan) every interval on the simulated queues, and in
the geometry arm on the simulated nodes, whose layouts the cycle moves (`geometry_arm.py`).

The simulated queues follow a plan at once, so the last plan is the hysteresis baseline, as in
`recommend` mode; when a quiet cluster repeats the plan's inputs the planner is not run again.
"""

from __future__ import annotations

from collections.abc import Sequence

from quotaguard.geometry.node_updates import next_updates
from quotaguard.planning.cycle import (
    WEIGHT_HOLD_FRACTION,
    ClusterSeen,
    CycleSettings,
    CycleState,
    plan_cycle,
)
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.demand import ClassDemand
from quotaguard.quota.quota_planner import Plan
from quotaguard.simulate.cohort import CohortConfig, QueueConfig, Quota
from quotaguard.simulate.geometry_arm import LayoutChange, SimulatedNodes, applying_policy
from quotaguard.simulate.placement import Cluster
from quotaguard.simulate.preemption import Preemption
from quotaguard.simulate.queueing import QueueModel
from quotaguard.simulate.setup import Setup


def cohort_resources(policy: TenantPolicy) -> dict[str, str]:
    """Class name -> the resource its quota is of."""
    return {gpu_class.name: gpu_class.resource for gpu_class in policy.spec.gpu_classes}


def planned_cohort(policy: TenantPolicy, targets: Plan, preemption: Preemption) -> CohortConfig:
    """The queues as the controller writes them from a plan (it leaves `preemption` alone)."""
    queues = tuple(
        QueueConfig(
            tenant.name,
            {
                row.class_name: Quota(row.nominal, row.borrowing_limit, row.lending_limit)
                for row in tenant.classes
            },
            weight=tenant.weight,
            preemption=preemption,
            borrow_next=tenant.fungibility is not None and tenant.fungibility.borrow_next,
        )
        for tenant in targets.tenants
    )
    return CohortConfig(queues, cohort_resources(policy))


def without_layouts(policy: TenantPolicy) -> TenantPolicy:
    """The policy with its layouts left as they are (the dynamic arm)."""
    if policy.spec.geometry is None:
        return policy
    return policy.model_copy(update={"spec": policy.spec.model_copy(update={"geometry": None})})


def observed_demand(model: QueueModel) -> dict[str, dict[str, ClassDemand]]:
    """Usage and pending units of every queue with any, per class."""
    demand: dict[str, dict[str, ClassDemand]] = {}
    for tenant in model.queue_names():
        usage, pending = model.usage(tenant), model.pending_units(tenant)
        rows = {
            name: ClassDemand(usage.get(name, 0), pending.get(name, 0))
            for name in usage.keys() | pending.keys()
            if usage.get(name, 0) or pending.get(name, 0)
        }
        if rows:
            demand[tenant] = rows
    return demand


class ArmController:
    """One arm's controller (`arms.QuotaStep`); `layouts`: the nodes' layouts move (the
    geometry arm; a policy without `geometry:` leaves them as they are either way)."""

    def __init__(
        self,
        shared: Setup,
        cluster: Cluster,
        preemption: Preemption,
        *,
        layouts: bool = False,
        weight_tolerance: float = WEIGHT_HOLD_FRACTION,
    ) -> None:
        moving = applying_policy(shared.policy) if layouts else None
        self.policy = moving or without_layouts(shared.policy)
        self.shared, self.preemption = shared, preemption
        self.settings = CycleSettings(
            weight_tolerance=weight_tolerance, from_previous=True, reuse_plan=True
        )
        self.nodes = SimulatedNodes(shared, cluster, moving) if moving is not None else None
        self.state = CycleState()
        self.runs = 0

    @property
    def weight_tolerance(self) -> float:
        return self.settings.weight_tolerance

    @property
    def changes(self) -> Sequence[LayoutChange]:
        return self.nodes.changes if self.nodes is not None else ()

    def tick(self, model: QueueModel, now: float) -> CohortConfig | None:
        """One controller pass; the queues to write, or None when they stay as they are."""
        self.runs += 1
        demand = observed_demand(model)
        nodes = self.nodes
        if nodes is None:
            seen = ClusterSeen(
                self.shared.nodes,
                self.shared.pods,
                demand,
                capacity=self.shared.capacity,
                quiet_periods=False,
            )
        else:
            seen = ClusterSeen(
                nodes.now_serving(now),
                self.shared.pods,
                demand,
                busy=nodes.busy(),
                quiet_periods=False,
            )
        cycle = plan_cycle(self.policy, seen, now, self.state, self.settings)
        self.state = cycle.state
        if nodes is not None:
            updates = next_updates(self.policy, cycle.layouts, cycle.views, now)
            model.resize(nodes.take(updates, now))
        if not cycle.replanned:
            return None
        queues = planned_cohort(self.policy, cycle.plan, self.preemption)
        return None if queues == model.cohort else queues
