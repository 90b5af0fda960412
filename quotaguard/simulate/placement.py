"""Pods onto nodes: what kube-scheduler does once Kueue has admitted a workload by quota.

* **Nodes.** Every healthy node (Ready, schedulable, not marked faulty by the policy) offers
  its GPU resources as units of the class each counts for (`class_of_resource` with the
  node's labels, as the quota capacity counts them): whole GPUs, MIG instances of its
  `nvidia.com/mig.config` layout, time-sliced replicas. GPUs held by pods outside every tenant
  (from a snapshot) are taken on their nodes.
* **Filter.** A pod fits a node that offers every class it needs with enough units free and
  whose labels match the pod's nodeSelector (the class's own selector is how the node counts
  for the class: a ResourceFlavor's nodeLabels).
* **Score.** NodeResourcesFit over the GPU resources the pod asks for: `LeastAllocated` (the
  default: the node with the largest free share after placing) or `MostAllocated` (the
  fullest node that fits, packing). Ties go to the node listed first.
* **Gangs.** A workload's pods are placed one after another, each on the best node left;
  when one does not fit, none of them is placed (all or nothing, as Kueue's
  waitForPodsReady or a coscheduling plugin would have it).

Nodes of one class with the same labels and the same units are one group, indexed by their
free units, so placing a pod costs the number of groups, not of nodes.

* **Layout changes** (the geometry arm): a cordoned node leaves its groups (its running pods
  keep their units and free them as they end, but nothing new is placed on it); an idle
  cordoned node may be given new labels and GPU resources (`relayout`, what mig-manager's
  reconfiguration leaves), and joins the groups of what it offers then when uncordoned.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.class_capacity import class_of_pod_resource, node_counts, outside_tenants
from quotaguard.quota.cluster import Node, Pod

Scoring = Literal["LeastAllocated", "MostAllocated"]
Selector = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class PodNeed:
    """`count` identical pods, each needing `units` of every class listed."""

    count: int
    units: tuple[tuple[str, int], ...]  # (class, units per pod), sorted by class
    selector: Selector = ()  # the pod's own nodeSelector


Gang = tuple[PodNeed, ...]
# (node index, class, units) for every pod placed
Assignment = tuple[tuple[int, str, int], ...]


class _Group:
    """Nodes of one class with the same labels and units, by free units."""

    __slots__ = ("buckets", "capacity", "class_name", "free_total", "labels", "nodes")

    def __init__(self, class_name: str, labels: Mapping[str, str], capacity: int) -> None:
        self.class_name = class_name
        self.labels = labels
        self.capacity = capacity
        self.nodes: list[int] = []
        self.buckets: dict[int, dict[int, None]] = {}  # free units -> nodes (ordered)
        self.free_total = 0

    def matches(self, selector: Selector) -> bool:
        return all(self.labels.get(key) == value for key, value in selector)

    def join(self, node: int, free: int) -> None:
        bisect.insort(self.nodes, node)
        self.buckets.setdefault(free, {})[node] = None
        self.free_total += free

    def leave(self, node: int, free: int) -> None:
        self.nodes.remove(node)
        bucket = self.buckets[free]
        del bucket[node]
        if not bucket:
            del self.buckets[free]
        self.free_total -= free

    def move(self, node: int, before: int, after: int) -> None:
        bucket = self.buckets[before]
        del bucket[node]
        if not bucket:
            del self.buckets[before]
        self.buckets.setdefault(after, {})[node] = None
        self.free_total += after - before

    def best(self, units: int, scoring: Scoring) -> tuple[float, int] | None:
        """(score, free units) of the best node for `units`, or None when none fits."""
        if scoring == "LeastAllocated":
            free = max((v for v in self.buckets if v >= units), default=None)
            if free is None:
                return None
            return (free - units) / self.capacity, free
        free = min((v for v in self.buckets if v >= units), default=None)
        if free is None:
            return None
        return (self.capacity - free + units) / self.capacity, free


class Cluster:
    """Free units of every class on every healthy node; placement and release."""

    def __init__(
        self,
        policy: TenantPolicy,
        nodes: Iterable[Node],
        pods: Iterable[Pod] = (),
        *,
        scoring: Scoring = "LeastAllocated",
    ) -> None:
        self.scoring: Scoring = scoring
        self.names: list[str] = []
        self.labels: list[Mapping[str, str]] = []
        self.free: list[dict[str, int]] = []
        self.capacity: list[dict[str, int]] = []
        self._groups: dict[str, list[_Group]] = {}  # class -> groups, in node order
        self._group_of: list[dict[str, _Group]] = []
        self._matching: dict[tuple[str, Selector], list[_Group]] = {}
        # bumped whenever units are freed: a placement that failed can only succeed after
        self.released = 0
        self._keyed: dict[tuple[str, tuple[tuple[str, str], ...], int], _Group] = {}
        self._cordoned: set[int] = set()  # nodes out of their groups: nothing new placed
        by_name: dict[str, int] = {}
        for node in nodes:
            if node_counts(policy, node):
                by_name[node.name] = len(self.names)
                self._add(policy, node)
        for pod in pods:
            held = by_name.get(pod.node_name or "")
            if held is not None and pod.active and outside_tenants(policy, pod.namespace):
                self._hold(policy, held, pod)

    def _add(self, policy: TenantPolicy, node: Node) -> None:
        index = len(self.names)
        labels = dict(node.labels)
        units = _class_units(policy, node.allocatable, labels)
        self.names.append(node.name)
        self.labels.append(labels)
        self.capacity.append(dict(units))
        self.free.append(dict(units))
        groups = self._groups_for(labels, units)
        for class_name, group in groups.items():
            group.join(index, units[class_name])
        self._group_of.append(groups)

    def _groups_for(self, labels: Mapping[str, str], units: Mapping[str, int]) -> dict[str, _Group]:
        """The group of every class a node with these labels and units is in."""
        groups: dict[str, _Group] = {}
        for class_name, amount in units.items():
            key = (class_name, tuple(sorted(labels.items())), amount)
            group = self._keyed.get(key)
            if group is None:
                group = self._keyed[key] = _Group(class_name, labels, amount)
                self._groups.setdefault(class_name, []).append(group)
                self._matching.clear()
            groups[class_name] = group
        return groups

    def _hold(self, policy: TenantPolicy, held: int, pod: Pod) -> None:
        """GPUs a pod outside every tenant holds on a node."""
        node = Node(pod.node_name or "", True, False, (), self.labels[held], {})
        for resource, amount in pod.gpus.items():
            gpu_class = class_of_pod_resource(policy, resource, pod, node)
            if gpu_class is not None and gpu_class.name in self.free[held]:
                self._take(held, gpu_class.name, min(amount, self.free[held][gpu_class.name]))

    # -- reading -------------------------------------------------------------------------

    def groups(self, class_name: str, selector: Selector) -> list[_Group]:
        key = (class_name, selector)
        found = self._matching.get(key)
        if found is None:
            found = [g for g in self._groups.get(class_name, []) if g.matches(selector)]
            self._matching[key] = found
        return found

    def free_units(self, class_name: str, selector: Selector = ()) -> int:
        """Units of a class free on the nodes the selector allows, in total."""
        return sum(group.free_total for group in self.groups(class_name, selector))

    def total_units(self, class_name: str) -> int:
        return sum(g.capacity * len(g.nodes) for g in self._groups.get(class_name, []))

    def fits_in_total(self, gang: Gang) -> bool:
        """Whether the free units, added up over every allowed node, would hold the gang."""
        needed: dict[tuple[str, Selector], int] = {}
        for need in gang:
            for class_name, units in need.units:
                key = (class_name, need.selector)
                needed[key] = needed.get(key, 0) + units * need.count
        return all(self.free_units(c, s) >= units for (c, s), units in needed.items())

    # -- changing ------------------------------------------------------------------------

    def _take(self, node: int, class_name: str, units: int) -> None:
        before = self.free[node][class_name]
        self.free[node][class_name] = before - units
        if node not in self._cordoned:
            self._group_of[node][class_name].move(node, before, before - units)

    def _give(self, node: int, class_name: str, units: int) -> None:
        before = self.free[node][class_name]
        self.free[node][class_name] = before + units
        if node not in self._cordoned:
            self._group_of[node][class_name].move(node, before, before + units)

    def _best_node(self, need: PodNeed) -> int | None:
        if len(need.units) == 1:
            class_name, units = need.units[0]
            best: tuple[float, _Group, int] | None = None
            for group in self.groups(class_name, need.selector):
                found = group.best(units, self.scoring)
                if found is not None and (best is None or found[0] > best[0]):
                    best = (found[0], group, found[1])
            if best is None:
                return None
            return next(iter(best[1].buckets[best[2]]))
        return self._best_node_of_many(need)

    def _best_node_of_many(self, need: PodNeed) -> int | None:
        """A pod needing several classes: score every candidate node (the rare case)."""
        first, _ = need.units[0]
        best: tuple[float, int] | None = None
        for group in self.groups(first, need.selector):
            for node in group.nodes:
                free, capacity = self.free[node], self.capacity[node]
                if any(free.get(c, 0) < u for c, u in need.units):
                    continue
                shares = [(free[c] - u) / capacity[c] for c, u in need.units]
                score = sum(shares) / len(shares)
                if self.scoring == "MostAllocated":
                    score = 1 - score
                if best is None or score > best[0] or (score == best[0] and node < best[1]):
                    best = (score, node)
        return None if best is None else best[1]

    def place(self, gang: Gang) -> Assignment | None:
        """Every pod of the gang on a node, or None (and nothing taken) when one does not fit."""
        placed: list[tuple[int, str, int]] = []
        for need in gang:
            for _ in range(need.count):
                node = self._best_node(need)
                if node is None:
                    self._undo(placed)
                    return None
                for class_name, units in need.units:
                    self._take(node, class_name, units)
                    placed.append((node, class_name, units))
        return tuple(placed)

    def _undo(self, placed: Sequence[tuple[int, str, int]]) -> None:
        for node, class_name, units in placed:
            self._give(node, class_name, units)

    def release(self, assignment: Assignment) -> None:
        self._undo(assignment)
        self.released += 1

    def placeable(self, gang: Gang) -> bool:
        """Whether the gang could be placed now (nothing is taken)."""
        found = self.place(gang)
        if found is None:
            return False
        self._undo(found)
        return True

    # -- layout changes ------------------------------------------------------------------

    def index(self, name: str) -> int | None:
        """The node's index, None when it is not capacity (not Ready, cordoned, faulty)."""
        try:
            return self.names.index(name)
        except ValueError:
            return None

    def used(self, node: int) -> int:
        """GPU units in use on the node (tenants' pods and those outside every tenant)."""
        return sum(
            total - self.free[node].get(name, 0) for name, total in self.capacity[node].items()
        )

    def cordoned(self, node: int) -> bool:
        return node in self._cordoned

    def cordon(self, node: int) -> None:
        """Nothing new is placed on the node; its pods keep running."""
        if node in self._cordoned:
            return
        for class_name, group in self._group_of[node].items():
            group.leave(node, self.free[node][class_name])
        self._cordoned.add(node)

    def uncordon(self, node: int) -> None:
        if node not in self._cordoned:
            return
        self._cordoned.discard(node)
        for class_name, group in self._group_of[node].items():
            group.join(node, self.free[node][class_name])
        self.released += 1

    def relayout(
        self,
        policy: TenantPolicy,
        node: int,
        labels: Mapping[str, str],
        allocatable: Mapping[str, int],
    ) -> None:
        """A cordoned idle node offers these GPU resources under these labels from now on (it
        joins their groups when uncordoned)."""
        if node not in self._cordoned or self.used(node):
            raise ValueError(f"node {self.names[node]}: only an idle cordoned node changes layout")
        kept = dict(labels)
        units = _class_units(policy, allocatable, kept)
        self.labels[node] = kept
        self.capacity[node] = dict(units)
        self.free[node] = dict(units)
        self._group_of[node] = self._groups_for(kept, units)


def _class_units(
    policy: TenantPolicy, allocatable: Mapping[str, int], labels: dict[str, str]
) -> dict[str, int]:
    """A node's GPU resources as units of the classes they count for."""
    units: dict[str, int] = {}
    for resource, amount in allocatable.items():
        gpu_class = policy.class_of_resource(resource, labels)
        if gpu_class is not None and amount > 0:
            units[gpu_class.name] = units.get(gpu_class.name, 0) + amount
    return units
