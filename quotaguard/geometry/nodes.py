"""The nodes of the geometry pools as the layout planner sees them, from the parsed cluster."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from quotaguard.geometry.pool_layouts import PoolLayouts, class_offers, pool_layouts, pool_of
from quotaguard.geometry.progress import PROGRESS_ANNOTATION, Progress, changed_at
from quotaguard.policy.migconfig import GPU_COUNT_LABEL, gpu_model
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.class_capacity import node_is_faulty
from quotaguard.quota.cluster import Node, Pod


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    labels: Mapping[str, str]
    healthy: bool  # Ready and not faulty (a cordon aside)
    unschedulable: bool
    capacity: Mapping[str, int]  # class -> units the node offers now (0 when not counted)
    allocatable: Mapping[str, int]  # GPU resources as the node reports them
    gpu_pods: int
    pool: PoolLayouts | None = None
    gpu: str | None = None
    gpus: int = 0
    current: str | None = None
    progress: Progress | None = None
    changed_at: float | None = None


def _gpu_count(node: Node, pool: PoolLayouts, gpu: str | None, current: str | None) -> int:
    """GPUs of the node: GPU feature discovery's count label, else what the current layout's
    offers per GPU make of the allocatable."""
    label = node.labels.get(GPU_COUNT_LABEL, "")
    if label.isdigit():
        return int(label)
    layout = pool.layouts.get(current or "")
    if layout is not None and gpu is not None:
        per_gpu = layout.offers(gpu, 1)
        most = 0
        for resource, amount in per_gpu.items():
            if amount:
                most = max(most, node.allocatable.get(resource, 0) // amount)
        if most:
            return most
    return node.allocatable.get("nvidia.com/gpu", 0)


def node_views(
    policy: TenantPolicy,
    nodes: Iterable[Node],
    pods: Iterable[Pod],
    now: float | None = None,
    *,
    busy: Mapping[str, int] | None = None,
) -> list[NodeView]:
    """Every node with GPUs (or in a pool), sorted by name; at `now`, a node within the quiet
    period of a cleared GPU-health condition is not healthy yet. `busy`: the GPU pods of the
    nodes it names, where they are known better than `pods` say (the simulator's placement)."""
    pools = pool_layouts(policy)
    counted_pods: dict[str, int] = {}
    for pod in pods:
        if pod.bound and pod.gpus and pod.node_name is not None:
            counted_pods[pod.node_name] = counted_pods.get(pod.node_name, 0) + 1
    if busy:
        counted_pods.update(busy)
    views = []
    for node in sorted(nodes, key=lambda n: n.name):
        pool = pool_of(pools, node.labels)
        healthy = node.ready and not node_is_faulty(policy, node, now)
        offered = class_offers(policy, node.allocatable, node.labels)
        counted = offered if healthy and not node.unschedulable else {}
        view = NodeView(
            name=node.name,
            labels=node.labels,
            healthy=healthy,
            unschedulable=node.unschedulable,
            capacity=counted,
            allocatable={r: n for r, n in node.allocatable.items() if r.startswith("nvidia.com/")},
            gpu_pods=counted_pods.get(node.name, 0),
        )
        if pool is not None:
            view = _in_pool(view, node, pool)
        views.append(view)
    return views


def _in_pool(view: NodeView, node: Node, pool: PoolLayouts) -> NodeView:
    """The view of a node of a geometry pool: its GPU model and count, layout and progress."""
    gpu = pool.pool.gpu or gpu_model(node.labels) or pool.gpu
    current = pool.current(node.labels)
    return replace(
        view,
        pool=pool,
        gpu=gpu,
        gpus=_gpu_count(node, pool, gpu, current),
        current=current,
        progress=Progress.from_annotation(node.annotations.get(PROGRESS_ANNOTATION)),
        changed_at=changed_at(node.annotations),
    )
