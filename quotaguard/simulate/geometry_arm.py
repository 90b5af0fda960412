"""The geometry arm's nodes: dynamic quotas on the capacity the MIG layouts give, and layouts
that follow demand, chosen every interval by the controller's own planning cycle
(`planning.cycle`, run by `arm_controller.ArmController`); here the simulated nodes take the
node updates it calls for, and mig-manager's part.

Every interval, in the controller's order:

1. **mig-manager's part.** A node relabelled `reconfigureTime` ago offers the resources of
   its new layout and reports `nvidia.com/mig.config.state: success` (its devices in the
   placement model are rebuilt from the layout). Until then it offers nothing.
2. **Demand and weights**, smoothed as the quota controller smooths them.
3. **The layout plan** (`geometry.layout_planner.plan_layouts`) on the nodes as they are, and the
   change steps the controller would write (`geometry.node_updates.next_updates`: cordon, wait for
   the node's GPU pods to end, relabel, wait for success and the new allocatable, uncordon)
   applied to the simulated nodes. A cordoned node takes no new pods; a node is relabelled
   only once idle, as mig-manager needs and `drain` allows.
4. **The quota plan** on the capacity the layout plan leaves: a node changing (draining,
   applying or about to start) counts as zero, as in the cluster.

A policy in `geometry.mode: recommend` is simulated as `apply` would run (what the arm
answers is what applying would give); `off`, or no `geometry:`, leaves every layout as the
trace writes it, so the arm is the dynamic arm.

Not modelled: a change that fails or times out (mig-manager always succeeds after
`reconfigureTime`), per-GPU partial layouts (a node takes one config for all its GPUs),
and the device plugin's restart being quicker for time-slicing than for MIG.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from quotaguard.geometry.nodes import NodeView, node_views
from quotaguard.geometry.pool_layouts import class_offers
from quotaguard.geometry.progress import CHANGED_AT_ANNOTATION, PROGRESS_ANNOTATION, Update
from quotaguard.policy.migconfig import MIG_CONFIG_LABEL, MIG_STATE_LABEL, SHARING_CONFIG_LABEL
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.class_capacity import ClassCapacity, capacities_from_totals, class_capacity
from quotaguard.quota.cluster import Node
from quotaguard.simulate.placement import Cluster
from quotaguard.simulate.setup import Setup

LAYOUT_LABELS = (MIG_CONFIG_LABEL, SHARING_CONFIG_LABEL)


def applying_policy(policy: TenantPolicy) -> TenantPolicy | None:
    """The policy as `geometry.mode: apply` would run it; None when layouts never move."""
    geometry = policy.spec.geometry
    if geometry is None or geometry.mode == "off" or not geometry.pools:
        return None
    if geometry.mode == "apply":
        return policy
    spec = policy.spec.model_copy(
        update={"geometry": geometry.model_copy(update={"mode": "apply"})}
    )
    return policy.model_copy(update={"spec": spec})


class LayoutChange:
    """One change as the arm records it (for tests and reports): node, layouts, when."""

    __slots__ = ("done", "node", "relabelled", "source", "started", "target")

    def __init__(self, node: str, source: str | None, target: str, started: float) -> None:
        self.node, self.source, self.target, self.started = node, source, target, started
        self.relabelled: float | None = None
        self.done: float | None = None


class SimulatedNodes:
    """The geometry arm's nodes as the API server holds them, changed by the node updates of
    the layout plan and by mig-manager once `reconfigureTime` has passed."""

    def __init__(self, shared: Setup, cluster: Cluster, policy: TenantPolicy) -> None:
        self.shared, self.cluster, self.policy = shared, cluster, policy
        geometry = policy.spec.geometry
        self.reconfigure_time = geometry.reconfigure_time if geometry is not None else 0.0
        self.nodes: dict[str, Node] = {node.name: node for node in shared.nodes}
        # node -> (when mig-manager is done, the allocatable it leaves)
        self.reconfiguring: dict[str, tuple[float, Mapping[str, int]]] = {}
        self.changes: list[LayoutChange] = []
        self._open: dict[str, LayoutChange] = {}

    def now_serving(self, now: float) -> list[Node]:
        """The nodes at `now`, once mig-manager is done with the layouts it was applying."""
        self._mig_manager(now)
        return list(self.nodes.values())

    def busy(self) -> dict[str, int]:
        """GPU pods per node as the placement model has them."""
        found = {}
        for name in self.nodes:
            index = self.cluster.index(name)
            if index is not None:
                found[name] = self.cluster.used(index)
        return found

    def take(self, updates: Sequence[tuple[NodeView, Update]], now: float) -> dict[str, int]:
        """The node updates applied; the class units the nodes offer after them."""
        for view, update in updates:
            self._apply(view, update, now)
        return self._units(self.policy)

    def _units(self, policy: TenantPolicy) -> dict[str, int]:
        """Class units the nodes offer now, cordoned or not (a draining node's pods still hold
        theirs), net of what pods outside every tenant hold: the queue model's physical fit."""
        serving = [
            replace(node, unschedulable=False) if PROGRESS_ANNOTATION in node.annotations else node
            for node in self.nodes.values()
        ]
        capacity = class_capacity(policy, serving, self.shared.pods)
        return {name: max(0, row.capacity - row.held_outside) for name, row in capacity.items()}

    def _mig_manager(self, now: float) -> None:
        """Layouts whose reconfiguration is over: the new devices, and state success."""
        for name, (ready_at, allocatable) in sorted(self.reconfiguring.items()):
            if ready_at > now:
                continue
            del self.reconfiguring[name]
            node = self.nodes[name]
            labels = {**node.labels, MIG_STATE_LABEL: "success"}
            self.nodes[name] = replace(node, labels=labels, allocatable=dict(allocatable))
            index = self.cluster.index(name)
            if index is not None:
                self.cluster.relayout(self.policy, index, labels, allocatable)

    def _apply(self, view: NodeView, update: Update, now: float) -> None:
        """One node update, as the API server would take it, and mig-manager's reaction."""
        node = self.nodes[view.name]
        labels = dict(node.labels)
        for key, value in update.labels.items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
        annotations = dict(node.annotations)
        if update.progress is not None:
            annotations[PROGRESS_ANNOTATION] = update.progress.to_annotation()
        elif update.clear:
            annotations.pop(PROGRESS_ANNOTATION, None)
        if update.changed_at is not None:
            annotations[CHANGED_AT_ANNOTATION] = f"{update.changed_at:.0f}"
        unschedulable = node.unschedulable if update.unschedulable is None else update.unschedulable
        allocatable = node.allocatable
        index = self.cluster.index(view.name)
        if update.unschedulable and index is not None:
            self.cluster.cordon(index)
        if any(labels.get(key) != node.labels.get(key) for key in LAYOUT_LABELS):
            labels[MIG_STATE_LABEL] = "pending"
            allocatable = {}
            self.reconfiguring[view.name] = (
                now + self.reconfigure_time,
                self._offers(view, labels),
            )
            if index is not None:
                self.cluster.relayout(self.policy, index, labels, allocatable)
        self.nodes[view.name] = replace(
            node,
            labels=labels,
            annotations=annotations,
            unschedulable=unschedulable,
            allocatable=allocatable,
        )
        if update.unschedulable is False and index is not None:
            self.cluster.uncordon(index)
        self._record(view, update, now)

    @staticmethod
    def _offers(view: NodeView, labels: Mapping[str, str]) -> dict[str, int]:
        """What the node offers once mig-manager has applied the layout its labels ask for."""
        pool = view.pool
        if pool is None or view.gpu is None:
            return {}
        layout = pool.layouts.get(pool.current(labels) or "")
        return layout.offers(view.gpu, view.gpus) if layout is not None else {}

    def _record(self, view: NodeView, update: Update, now: float) -> None:
        if update.outcome == "started" and update.progress is not None:
            started = LayoutChange(view.name, view.current, update.progress.target, now)
            self._open[view.name] = started
            self.changes.append(started)
            return
        change = self._open.get(view.name)
        if change is None:
            return
        if update.outcome == "relabelled":
            change.relabelled = now
        elif update.clear:
            change.done = now
            del self._open[view.name]


def _layout_units(policy: TenantPolicy, view: NodeView) -> list[dict[str, int]]:
    """Class units the node offers in each layout it may take (its current one included)."""
    found = [dict(view.capacity)]
    pool = view.pool
    if pool is None or view.gpu is None or not view.healthy or view.unschedulable:
        return found
    for layout in pool.layouts.values():
        labels = layout.applied_labels(view.labels, pool_shares=pool.shares)
        found.append(class_offers(policy, layout.offers(view.gpu, view.gpus), labels))
    return found


def widest_capacity(shared: Setup) -> dict[str, ClassCapacity]:
    """Per class, the most units the nodes could offer if each took the layout that gives the
    class most (one class at a time): what the geometry arm's quotas can ever reach."""
    policy = applying_policy(shared.policy)
    if policy is None:
        return dict(shared.capacity)
    totals: dict[str, int] = {}
    for view in node_views(policy, shared.nodes, shared.pods):
        best: dict[str, int] = {}
        for units in _layout_units(policy, view):
            for name, amount in units.items():
                best[name] = max(best.get(name, 0), amount)
        for name, amount in best.items():
            totals[name] = totals.get(name, 0) + amount
    held = {name: row.held_outside for name, row in shared.capacity.items()}
    return capacities_from_totals(policy, totals, held)


def widest_gpus(shared: Setup) -> float:
    """GPU equivalents the nodes could offer at once, each in its layout that offers most: the
    capacity no schedule of the geometry arm exceeds at any moment."""
    policy = applying_policy(shared.policy)
    if policy is None:
        return shared.capacity_gpus
    classes = policy.classes_by_name
    total = 0.0
    for view in node_views(policy, shared.nodes, shared.pods):
        total += max(
            sum(amount * float(classes[name].gpu_equivalent) for name, amount in units.items())
            for units in _layout_units(policy, view)
        )
    return max(total, shared.capacity_gpus)
