"""Live fragmentation per GPU class: the units free in total against the largest request that
fits on one node.

A class can have 16 GPUs free and still leave a job that needs one whole 8-GPU node waiting:
when the free GPUs are spread two per node, no node holds it. Quotas cannot see that, a
scheduler that packs (docs/packing.md) prevents it. Per class, over the nodes that count as
capacity (Ready, schedulable, not faulty):

    free          units not requested by a bound, active pod
    largestFit    the most units free on one node: the largest pod of the class that fits now
    nodeSize      the most units one node of the class has: a whole-node request
    wholeNodesFree nodes of that size with every unit free: whole-node pods that fit now
    fragmented    units free on nodes partly in use: free units a whole-node request cannot use

All in units of the class's resource (whole GPUs, MIG slices, shared replicas), like capacity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.class_capacity import node_counts
from quotaguard.quota.cluster import Node, Pod


@dataclass(frozen=True, slots=True)
class ClassFragmentation:
    name: str
    resource: str
    free: int
    largest_fit: int
    node_size: int
    whole_nodes_free: int
    fragmented: int


class FragmentationRow(TypedDict):
    name: str
    resource: str
    free: int
    largestFit: int
    nodeSize: int
    wholeNodesFree: int
    fragmented: int


@dataclass(slots=True)
class _Tally:
    free: int = 0
    largest_fit: int = 0
    node_size: int = 0
    # (allocatable, free) per node of the class
    nodes: list[tuple[int, int]] = field(default_factory=list)


def _requested(pods: Iterable[Pod]) -> dict[tuple[str, str], int]:
    """Units requested per (node, resource) by the bound, active pods."""
    used: dict[tuple[str, str], int] = {}
    for pod in pods:
        if not pod.bound or pod.node_name is None:
            continue
        for resource, amount in pod.gpus.items():
            key = (pod.node_name, resource)
            used[key] = used.get(key, 0) + amount
    return used


def class_fragmentation(
    policy: TenantPolicy, nodes: Iterable[Node], pods: Iterable[Pod]
) -> dict[str, ClassFragmentation]:
    """Fragmentation of every class of the policy (classes DRA alone reaches: zeros)."""
    used = _requested(pods)
    tallies = {name: _Tally() for name in policy.classes_by_name}
    for node in nodes:
        if not node_counts(policy, node):
            continue
        labels = dict(node.labels)
        for resource, amount in node.allocatable.items():
            gpu_class = policy.class_of_resource(resource, labels)
            if gpu_class is None or amount <= 0:
                continue
            free = max(0, amount - used.get((node.name, resource), 0))
            tally = tallies[gpu_class.name]
            tally.free += free
            tally.largest_fit = max(tally.largest_fit, free)
            tally.node_size = max(tally.node_size, amount)
            tally.nodes.append((amount, free))
    return {
        name: _fragmentation(name, policy.classes_by_name[name].resource, tally)
        for name, tally in tallies.items()
    }


def _fragmentation(name: str, resource: str, tally: _Tally) -> ClassFragmentation:
    nodes = tally.nodes
    whole = sum(1 for size, free in nodes if size == tally.node_size and free == size)
    untouched = sum(free for size, free in nodes if free == size)
    return ClassFragmentation(
        name=name,
        resource=resource,
        free=tally.free,
        largest_fit=tally.largest_fit,
        node_size=tally.node_size,
        whole_nodes_free=whole if tally.node_size else 0,
        fragmented=tally.free - untouched,
    )


def fragmentation_rows(found: Mapping[str, ClassFragmentation]) -> list[FragmentationRow]:
    """The report's `fragmentation` section, in the policy's class order."""
    return [
        {
            "name": row.name,
            "resource": row.resource,
            "free": row.free,
            "largestFit": row.largest_fit,
            "nodeSize": row.node_size,
            "wholeNodesFree": row.whole_nodes_free,
            "fragmented": row.fragmented,
        }
        for row in found.values()
    ]
