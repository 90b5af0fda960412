"""Capacity per GPU class: what healthy nodes offer and what is left to distribute to tenants.

capacity(class)      = sum of allocatable[class resource] over nodes that are Ready, not
                       cordoned and not faulty, counting each node for the class whose
                       nodeSelector it matches (classes may share one resource name)
distributable(class) = floor(capacity x usableCapacityPercent / 100)
                       - GPUs held on those nodes by pods of no tenant (unowned or exempt)
                       (never below 0)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from quotaguard.policy.model import GpuClass, TenantPolicy
from quotaguard.quota.cluster import Node, Pod


@dataclass(frozen=True, slots=True)
class ClassCapacity:
    name: str
    resource: str
    capacity: int
    # held on healthy nodes by pods outside every tenant (unowned or exempt namespaces)
    held_outside: int
    distributable: int


def node_is_faulty(policy: TenantPolicy, node: Node) -> bool:
    rebalance = policy.spec.rebalance
    if any(taint in rebalance.faulty_node_taints for taint in node.taints):
        return True
    return any(node.labels.get(key) == value for key, value in rebalance.faulty_node_labels.items())


def node_counts(policy: TenantPolicy, node: Node) -> bool:
    """Whether the node's GPUs are capacity: Ready, schedulable and not marked faulty."""
    return node.ready and not node.unschedulable and not node_is_faulty(policy, node)


def class_of_pod_resource(
    policy: TenantPolicy, resource: str, pod: Pod, node: Node | None
) -> GpuClass | None:
    """The class a pod's resource is drawn from: by its node when bound, else its selector."""
    labels = node.labels if node is not None else pod.node_selector
    found = policy.class_of_resource(resource, dict(labels))
    if found is None and node is None:
        candidates = policy.classes_by_resource.get(resource, [])
        found = candidates[0] if candidates else None
    return found


def outside_tenants(policy: TenantPolicy, namespace: str) -> bool:
    return policy.exempt(namespace) or policy.tenant_of(namespace) is None


def class_capacity(
    policy: TenantPolicy, nodes: Iterable[Node], pods: Iterable[Pod]
) -> dict[str, ClassCapacity]:
    """Capacity and distributable capacity of every class of the policy (in class units)."""
    capacity = dict.fromkeys(policy.classes_by_name, 0)
    healthy: dict[str, Node] = {}
    for node in nodes:
        if not node_counts(policy, node):
            continue
        healthy[node.name] = node
        labels = dict(node.labels)
        for resource, amount in node.allocatable.items():
            gpu_class = policy.class_of_resource(resource, labels)
            if gpu_class is not None:
                capacity[gpu_class.name] += amount
    held = dict.fromkeys(policy.classes_by_name, 0)
    for pod in pods:
        if not pod.bound or pod.node_name not in healthy:
            continue
        if not outside_tenants(policy, pod.namespace):
            continue
        node = healthy[pod.node_name]
        for resource, amount in pod.gpus.items():
            gpu_class = class_of_pod_resource(policy, resource, pod, node)
            if gpu_class is not None:
                held[gpu_class.name] += amount
    return capacities_from_totals(policy, capacity, held)


def capacities_from_totals(
    policy: TenantPolicy, capacity: Mapping[str, int], held_outside: Mapping[str, int]
) -> dict[str, ClassCapacity]:
    """ClassCapacity rows from plain totals (a simulator or a test has them directly)."""
    percent = Fraction(str(policy.spec.rebalance.usable_capacity_percent))
    rows = {}
    for gpu_class in policy.spec.gpu_classes:
        total = max(0, capacity.get(gpu_class.name, 0))
        held = max(0, held_outside.get(gpu_class.name, 0))
        usable = int(total * percent / 100)
        rows[gpu_class.name] = ClassCapacity(
            name=gpu_class.name,
            resource=gpu_class.resource,
            capacity=total,
            held_outside=held,
            distributable=max(0, usable - held),
        )
    return rows
