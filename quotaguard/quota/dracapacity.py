"""GPU capacity per class and node from what DRA drivers publish (ResourceSlices).

capacity(class, node) = the devices of the class on the node, from the newest generation of
                        each pool, each device the first policy class whose DeviceClass selects
                        it (`policy.dra_classes`); a shared class's device counts `replicas`
                        units
tainted devices       = out (a device taint NoSchedule or NoExecute: DRA's form of a faulty
                        GPU, in its ResourceSlice or put on it by a DeviceTaintRule), each an
                        Outage naming the device and the taint
partitionable devices = devices that consume counters of a shared counter set (a GPU that MIG
                        partitions on demand) overlap: each counter set counts once, for one
                        class: the class of its allocated devices when a ResourceClaim holds
                        some, else the first class of the policy (gpuClasses order) among its
                        devices; its units are as many devices of that class as fit its
                        counters together (first fit, allocated devices first)

Pure: ResourceSlices, DeviceClasses and ResourceClaims come in as plain objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quotaguard.kube.dra import (
    CLAIM_KIND,
    DEVICE_CLASS_KIND,
    SLICE_KIND,
    TAINT_RULE_KIND,
    DeviceClassInfo,
    Pool,
    SliceDevice,
    device_class_info,
    is_resource_kind,
    pools,
)
from quotaguard.kube.values import mapping
from quotaguard.policy.dra_classes import class_of_device
from quotaguard.policy.model import GpuClass, TenantPolicy
from quotaguard.quota.class_capacity import (
    ClassCapacity,
    Outage,
    capacities_from_totals,
    node_counts,
)
from quotaguard.quota.cluster import ClusterSnapshot

NO_NODE = ""  # devices not local to one node (a nodeSelector or allNodes pool)

DeviceKey = tuple[str, str, str]  # (driver, pool, device)


@dataclass(frozen=True, slots=True)
class DraCapacity:
    """Units per node and class, and the devices taints took out."""

    by_node: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    outages: Mapping[str, tuple[Outage, ...]] = field(default_factory=dict)
    # DeviceClasses the policy names that no object defines: their devices cannot be told
    missing_device_classes: tuple[str, ...] = ()

    def per_class(self, nodes: Iterable[str] | None = None) -> dict[str, int]:
        """Units per class over `nodes` (all, and the devices of no node, when None)."""
        wanted = None if nodes is None else set(nodes) | {NO_NODE}
        found: dict[str, int] = {}
        for node, classes in self.by_node.items():
            if wanted is not None and node not in wanted:
                continue
            for name, units in classes.items():
                found[name] = found.get(name, 0) + units
        return found


@dataclass(frozen=True, slots=True)
class TaintRule:
    """A DeviceTaintRule: its taint on the devices its selector names (an unset field: any)."""

    driver: str | None
    pool: str | None
    device: str | None
    taint: tuple[str, str]  # (key, effect)

    def takes(self, device: SliceDevice) -> bool:
        wanted = (
            (self.driver, device.driver),
            (self.pool, device.pool),
            (self.device, device.name),
        )
        return all(rule is None or rule == have for rule, have in wanted)


def taint_rule(obj: Mapping[str, Any]) -> TaintRule | None:
    """A DeviceTaintRule's selector and taint (None without a taint effect)."""
    spec = mapping(obj.get("spec"))
    selector, taint = mapping(spec.get("deviceSelector")), mapping(spec.get("taint"))
    effect = taint.get("effect")
    if not isinstance(effect, str):
        return None

    def field_of(name: str) -> str | None:
        value = selector.get(name)
        return value if isinstance(value, str) else None

    key = taint.get("key")
    return TaintRule(
        field_of("driver"),
        field_of("pool"),
        field_of("device"),
        (key if isinstance(key, str) else "", effect),
    )


def dra_capacity(policy: TenantPolicy, objects: Iterable[Mapping[str, Any]]) -> DraCapacity:
    """The DRA capacity of the ResourceSlices among `objects`, their devices told apart by the
    DeviceClasses among them, partitionable GPUs placed by the ResourceClaims' allocations,
    tainted by their taints and the DeviceTaintRules'."""
    slices, classes, allocated, rules = [], {}, set(), []
    for obj in objects:
        if is_resource_kind(obj, SLICE_KIND):
            slices.append(obj)
        elif is_resource_kind(obj, TAINT_RULE_KIND):
            if (rule := taint_rule(obj)) is not None:
                rules.append(rule)
        elif is_resource_kind(obj, DEVICE_CLASS_KIND):
            info = device_class_info(obj)
            if info is not None:
                classes[info.name] = info
        elif is_resource_kind(obj, CLAIM_KIND):
            allocated |= allocated_devices(obj)
    return capacity_of_pools(policy, pools(slices), classes, allocated, rules)


def allocated_devices(claim: Mapping[str, Any]) -> set[DeviceKey]:
    """The devices a ResourceClaim's allocation holds."""
    results = mapping(mapping(mapping(claim.get("status")).get("allocation")).get("devices"))
    found = set()
    for result in results.get("results") or []:
        entry = mapping(result)
        key = (entry.get("driver"), entry.get("pool"), entry.get("device"))
        if all(isinstance(part, str) for part in key):
            found.add((str(key[0]), str(key[1]), str(key[2])))
    return found


def capacity_of_pools(
    policy: TenantPolicy,
    found_pools: list[Pool],
    device_classes: Mapping[str, DeviceClassInfo],
    allocated: set[DeviceKey],
    rules: Sequence[TaintRule] = (),
) -> DraCapacity:
    by_node: dict[str, dict[str, int]] = {}
    outages: dict[str, list[Outage]] = {}
    for pool in found_pools:
        partitioned: dict[str, list[tuple[SliceDevice, GpuClass]]] = {}
        for published in pool.devices:
            device = _with_rule_taints(published, rules)
            gpu_class = class_of_device(policy, device, device_classes)
            if gpu_class is None:
                continue
            node = device.node or NO_NODE
            if device.blocked:
                outages.setdefault(gpu_class.name, []).append(_outage(node, device))
                continue
            if device.consumes and device.consumes[0].counter_set in pool.counter_sets:
                partitioned.setdefault(device.consumes[0].counter_set, []).append(
                    (device, gpu_class)
                )
                continue
            _add(by_node, node, gpu_class, 1)
        for counter_set, devices in partitioned.items():
            _count_partitions(policy, pool, counter_set, devices, allocated, by_node)
    missing = tuple(sorted(policy.gpu_device_classes - set(device_classes)))
    return DraCapacity(
        by_node={node: dict(classes) for node, classes in by_node.items()},
        outages={name: tuple(rows) for name, rows in outages.items()},
        missing_device_classes=missing,
    )


def _with_rule_taints(device: SliceDevice, rules: Sequence[TaintRule]) -> SliceDevice:
    added = tuple(rule.taint for rule in rules if rule.takes(device))
    return dataclasses.replace(device, taints=device.taints + added) if added else device


def _outage(node: str, device: SliceDevice) -> Outage:
    taints = ", ".join(f"{key}:{effect}" for key, effect in device.taints)
    return Outage(node, f"{device.pool}/{device.name}", f"device taint {taints}")


def _add(by_node: dict[str, dict[str, int]], node: str, gpu_class: GpuClass, devices: int) -> None:
    units = devices * (gpu_class.replicas if gpu_class.shared else 1)
    classes = by_node.setdefault(node, {})
    classes[gpu_class.name] = classes.get(gpu_class.name, 0) + units


def _count_partitions(
    policy: TenantPolicy,
    pool: Pool,
    counter_set: str,
    devices: list[tuple[SliceDevice, GpuClass]],
    allocated: set[DeviceKey],
    by_node: dict[str, dict[str, int]],
) -> None:
    """One counter set (one partitionable GPU) counted for one class."""
    held = [(d, c) for d, c in devices if (d.driver, d.pool, d.name) in allocated]
    order = {c.name: i for i, c in enumerate(policy.spec.gpu_classes)}
    chosen = min((c for _, c in held or devices), key=lambda c: order[c.name])
    first = [d for d, c in held if c.name == chosen.name]
    mine = first + [d for d, c in devices if c.name == chosen.name and d not in first]
    fitted = _fit(mine, dict(pool.counter_sets[counter_set]))
    node = next((d.node for d in mine if d.node), None) or NO_NODE
    _add(by_node, node, chosen, fitted)


def _fit(devices: list[SliceDevice], left: dict[str, float]) -> int:
    """How many of `devices`, taken in order, fit the counters `left` together."""
    fitted = 0
    for device in devices:
        wants = device.consumes[0].counters
        if all(left.get(name, 0.0) >= amount for name, amount in wants.items()):
            for name, amount in wants.items():
                left[name] = left.get(name, 0.0) - amount
            fitted += 1
    return fitted


def with_dra_capacity(
    policy: TenantPolicy,
    capacity: Mapping[str, ClassCapacity],
    dra: DraCapacity,
    counted_nodes: Iterable[str],
) -> dict[str, ClassCapacity]:
    """The planner's capacity rows with the DRA devices of `counted_nodes` (Ready, schedulable,
    not faulty: `quotaguard.quota.class_capacity.node_counts`) added, and the tainted devices among
    each class's outages. The hook for `plan` and the controller: call it on what
    `class_capacity` (or the layout planner) returns."""
    nodes = set(counted_nodes)
    added = dra.per_class(nodes)
    if not added and not dra.outages:
        return dict(capacity)
    totals = {name: row.capacity + added.get(name, 0) for name, row in capacity.items()}
    held = {name: row.held_outside for name, row in capacity.items()}
    faulty = {
        name: tuple(
            sorted(
                {
                    *row.faulty,
                    *(o for o in dra.outages.get(name, ()) if o.node in nodes | {NO_NODE}),
                }
            )
        )
        for name, row in capacity.items()
    }
    rows = capacities_from_totals(policy, totals, held, faulty=faulty)
    return {name: rows[name] for name in capacity if name in rows}


def snapshot_capacity(
    policy: TenantPolicy, snapshot: ClusterSnapshot, capacity: Mapping[str, ClassCapacity]
) -> dict[str, ClassCapacity]:
    """`with_dra_capacity` for a snapshot: its DRA objects, on its nodes that count."""
    dra = dra_capacity(policy, snapshot.dra_objects)
    counted = [node.name for node in snapshot.nodes if node_counts(policy, node)]
    return with_dra_capacity(policy, capacity, dra, counted)
