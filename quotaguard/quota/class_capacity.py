"""Capacity per GPU class: what healthy nodes offer and what is left to distribute to tenants.

capacity(class)      = sum of allocatable[class resource] over nodes that are Ready, not
                       cordoned and not faulty (a taint, label or node condition), counting
                       each node for the class whose nodeSelector it matches (classes may
                       share one resource name), less the units of faulty GPUs on them
distributable(class) = floor(capacity x usableCapacityPercent / 100)
                       - GPUs held on those nodes by pods of no tenant (unowned or exempt)
                       (never below 0)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import NamedTuple, Protocol

from quotaguard.policy.catalogue import profile_of_resource
from quotaguard.policy.fungibility import class_order
from quotaguard.policy.model import GpuClass, TenantPolicy
from quotaguard.quota.cluster import Node, Pod


class FaultyGpu(Protocol):
    """A GPU telemetry found faulty (`quotaguard.telemetry.health.FaultyGpu` is one)."""

    @property
    def node(self) -> str: ...
    @property
    def gpu(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def mig_instances(self) -> Mapping[str, int]: ...


class Outage(NamedTuple):
    """A GPU (or, `gpu` "all", a node) taken out of a class's capacity, and why."""

    node: str
    gpu: str
    reason: str


@dataclass(frozen=True, slots=True)
class ClassCapacity:
    name: str
    resource: str
    capacity: int
    # held on healthy nodes by pods outside every tenant (unowned or exempt namespaces)
    held_outside: int
    distributable: int
    # faulty GPUs (and nodes faulty by a condition) the capacity is already net of
    faulty: tuple[Outage, ...] = ()


def faulty_condition(policy: TenantPolicy, node: Node, now: float | None = None) -> str | None:
    """The first configured GPU-health node condition that holds on the node; at `now`, also
    one that cleared less than the quiet period ago (with what is left of it)."""
    health = policy.spec.rebalance.gpu_health
    found = next((c for c in health.node_conditions if c in node.conditions), None)
    if found is not None or now is None:
        return found
    for condition in health.node_conditions:
        at = node.cleared_at.get(condition)
        if at is not None and 0 <= now - at < health.quiet_period:
            left = health.quiet_period - (now - at)
            return f"{condition}, {left:.0f}s of quiet period left"
    return None


def node_is_faulty(policy: TenantPolicy, node: Node, now: float | None = None) -> bool:
    rebalance = policy.spec.rebalance
    if any(taint in rebalance.faulty_node_taints for taint in node.taints):
        return True
    if faulty_condition(policy, node, now) is not None:
        return True
    return any(node.labels.get(key) == value for key, value in rebalance.faulty_node_labels.items())


def _int_label(node: Node, key: str) -> int | None:
    value = node.labels.get(key, "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def units_per_gpu(gpu_class: GpuClass, resource: str, node: Node, gpu: FaultyGpu) -> int:
    """Units of `resource` one faulty GPU takes from the node: 1 whole GPU, `replicas` shared
    ones, or its MIG instances of that profile (as telemetry saw them; without that, the
    node's instances divided by its GPU count from GPU feature discovery's label)."""
    if gpu_class.mig:
        if gpu.mig_instances:
            # DCGM names the profile as NVIDIA does (1g.10gb+me), the resource spells it .me
            profile = profile_of_resource(resource)
            name = profile.name if profile else resource.removeprefix("nvidia.com/mig-")
            return gpu.mig_instances.get(name, 0)
        count = _int_label(node, "nvidia.com/gpu.count")
        return node.allocatable.get(resource, 0) // count if count else 0
    if gpu_class.shared:
        return _int_label(node, "nvidia.com/gpu.replicas") or gpu_class.replicas
    return 1


def node_counts(policy: TenantPolicy, node: Node, now: float | None = None) -> bool:
    """Whether the node's GPUs are capacity: Ready, schedulable and not marked faulty (at
    `now`: nor within the quiet period of a GPU-health condition that cleared)."""
    return node.ready and not node.unschedulable and not node_is_faulty(policy, node, now)


def class_of_pod_resource(
    policy: TenantPolicy, resource: str, pod: Pod, node: Node | None
) -> GpuClass | None:
    """The class a pod's resource is drawn from: by its node when bound, else its selector,
    else the first class of the resource its tenant's queue tries (`to: [h100, a100]`)."""
    labels = node.labels if node is not None else pod.node_selector
    found = policy.class_of_resource(resource, dict(labels))
    if found is None and node is None:
        order = class_order(policy, policy.tenant_of(pod.namespace))
        found = next((c for c in order if c.resource == resource), None)
    return found


def outside_tenants(policy: TenantPolicy, namespace: str) -> bool:
    return policy.exempt(namespace) or policy.tenant_of(namespace) is None


def _condition_outages(
    policy: TenantPolicy, node: Node, now: float | None
) -> list[tuple[str, Outage]]:
    """(class, outage) for a Ready, schedulable node that a GPU-health condition takes out."""
    condition = faulty_condition(policy, node, now)
    if condition is None or not node.ready or node.unschedulable:
        return []
    found = []
    for resource in node.allocatable:
        gpu_class = policy.class_of_resource(resource, dict(node.labels))
        if gpu_class is not None:
            found.append((gpu_class.name, Outage(node.name, "all", f"node condition {condition}")))
    return found


def _net_of_faulty(
    gpu_class: GpuClass, resource: str, amount: int, node: Node, faulty: Mapping[str, FaultyGpu]
) -> tuple[int, list[Outage]]:
    """The node's units of `resource` left by its faulty GPUs (never below 0), and those."""
    lost, outages = 0, []
    for gpu in faulty.values():
        units = min(units_per_gpu(gpu_class, resource, node, gpu), amount - lost)
        if units > 0:
            lost += units
            outages.append(Outage(node.name, gpu.gpu, gpu.reason))
    return amount - lost, outages


def _node_capacity(
    policy: TenantPolicy, node: Node, faulty: Mapping[str, FaultyGpu]
) -> list[tuple[str, int, list[Outage]]]:
    """(class, units, outages) per class resource of a counted node, net of its faulty GPUs."""
    labels = dict(node.labels)
    rows = []
    for resource, amount in node.allocatable.items():
        gpu_class = policy.class_of_resource(resource, labels)
        if gpu_class is not None:
            units, outages = _net_of_faulty(gpu_class, resource, amount, node, faulty)
            rows.append((gpu_class.name, units, outages))
    return rows


def _by_node(faulty_gpus: Iterable[FaultyGpu]) -> dict[str, dict[str, FaultyGpu]]:
    by_node: dict[str, dict[str, FaultyGpu]] = {}
    for gpu in faulty_gpus:  # one GPU named twice is still one GPU
        by_node.setdefault(gpu.node, {}).setdefault(gpu.gpu, gpu)
    return by_node


def without_faulty_gpus(
    policy: TenantPolicy, nodes: Iterable[Node], faulty_gpus: Iterable[FaultyGpu]
) -> tuple[Node, ...]:
    """The nodes with their faulty GPUs' units taken off allocatable, as the device plugin
    does when it marks a GPU unhealthy: for a simulator, which places pods on what nodes
    offer, rather than only planning quotas on less."""
    by_node = _by_node(faulty_gpus)
    result = []
    for node in nodes:
        faulty = by_node.get(node.name)
        if not faulty:
            result.append(node)
            continue
        allocatable = dict(node.allocatable)
        for resource, amount in node.allocatable.items():
            gpu_class = policy.class_of_resource(resource, dict(node.labels))
            if gpu_class is not None:
                allocatable[resource], _ = _net_of_faulty(gpu_class, resource, amount, node, faulty)
        result.append(replace(node, allocatable=allocatable))
    return tuple(result)


def class_capacity(
    policy: TenantPolicy,
    nodes: Iterable[Node],
    pods: Iterable[Pod],
    *,
    faulty_gpus: Sequence[FaultyGpu] = (),
    now: float | None = None,
) -> dict[str, ClassCapacity]:
    """Capacity and distributable capacity of every class of the policy (in class units).

    `faulty_gpus` (from GPU telemetry) take their units off the capacity of their node. At
    `now`, a node whose GPU-health condition cleared less than the quiet period ago is still
    out (without `now`, only while the condition holds)."""
    capacity = dict.fromkeys(policy.classes_by_name, 0)
    outages: dict[str, list[Outage]] = {}
    healthy: dict[str, Node] = {}
    by_node = _by_node(faulty_gpus)
    for node in nodes:
        if not node_counts(policy, node, now):
            for class_name, outage in _condition_outages(policy, node, now):
                outages.setdefault(class_name, []).append(outage)
            continue
        healthy[node.name] = node
        for class_name, units, lost in _node_capacity(policy, node, by_node.get(node.name, {})):
            capacity[class_name] += units
            outages.setdefault(class_name, []).extend(lost)
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
    faulty = {name: tuple(sorted(set(rows))) for name, rows in outages.items() if rows}
    return capacities_from_totals(policy, capacity, held, faulty=faulty)


def capacities_from_totals(
    policy: TenantPolicy,
    capacity: Mapping[str, int],
    held_outside: Mapping[str, int],
    *,
    faulty: Mapping[str, tuple[Outage, ...]] | None = None,
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
            faulty=(faulty or {}).get(gpu_class.name, ()),
        )
    return rows
