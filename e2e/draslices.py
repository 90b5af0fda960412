"""A stand-in for NVIDIA's DRA driver on kwok nodes: the DeviceClasses it creates and the
ResourceSlices its kubelet plugin would publish, written straight to the API server.

No driver runs and no device is ever prepared: kwok nodes have no kubelet plugin. What is
published follows the driver's shape: a pool per node named after it, whole GPUs with
`type: gpu`, `productName`, `index`, `uuid` attributes and `memory` capacity; a GPU that MIG
partitions on demand as a counter set of eight memory slices (in a ResourceSlice of its own,
as the API wants) and the devices that consume them: the whole GPU and its 1g.10gb and
3g.40gb placements (`type: mig`, `profile`). A device taint is what a health check would add.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DRIVER = "gpu.nvidia.com"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def device_classes() -> list[dict[str, Any]]:
    """`gpu.nvidia.com` (whole GPUs) and `mig.nvidia.com` (MIG devices), as the driver's chart."""
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.driver == '{DRIVER}' && "
                            f"device.attributes['{DRIVER}'].type == '{kind}'"
                        }
                    }
                ]
            },
        }
        for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig"))
    ]


def _attributes(**values: str | int) -> dict[str, Any]:
    return {k: {"int": v} if isinstance(v, int) else {"string": v} for k, v in values.items()}


def _slice(node: str, suffix: str, generation: int, count: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}-{suffix}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
            **spec,
        },
    }


def whole_gpus(
    node: str,
    gpus: int,
    *,
    product: str = H100,
    generation: int = 1,
    taints: Mapping[int, Sequence[Mapping[str, str]]] | None = None,
) -> list[dict[str, Any]]:
    """One ResourceSlice of `gpus` whole GPUs; `taints`: GPU index -> its device taints."""
    devices = []
    for index in range(gpus):
        device: dict[str, Any] = {
            "name": f"gpu-{index}",
            "attributes": _attributes(
                type="gpu", productName=product, index=index, uuid=f"GPU-{node}-{index}"
            ),
            "capacity": {"memory": {"value": "80Gi"}},
        }
        if taints and index in taints:
            device["taints"] = [dict(t) for t in taints[index]]
        devices.append(device)
    return [_slice(node, "gpus", generation, 1, devices=devices)]


def partitionable_gpu(
    node: str, *, product: str = A100, generation: int = 1
) -> list[dict[str, Any]]:
    """One GPU MIG partitions on demand: its counter set and the devices that consume it."""
    memory = {f"memory-slice-{i}": {"value": "1"} for i in range(8)}
    counters = _slice(
        node, "counters", generation, 2, sharedCounters=[{"name": "gpu-0", "counters": memory}]
    )

    def consuming(first: int, size: int) -> list[dict[str, Any]]:
        slices = {f"memory-slice-{first + i}": {"value": "1"} for i in range(size)}
        return [{"counterSet": "gpu-0", "counters": slices}]

    devices: list[dict[str, Any]] = [
        {
            "name": "gpu-0",
            "attributes": _attributes(type="gpu", productName=product, index=0),
            "consumesCounters": consuming(0, 8),
        }
    ]
    for first in range(7):
        devices.append(
            {
                "name": f"gpu-0-mig-1g-10gb-{first}",
                "attributes": _attributes(type="mig", productName=product, profile="1g.10gb"),
                "consumesCounters": consuming(first, 1),
            }
        )
    for first in (0, 4):
        devices.append(
            {
                "name": f"gpu-0-mig-3g-40gb-{first}",
                "attributes": _attributes(type="mig", productName=product, profile="3g.40gb"),
                "consumesCounters": consuming(first, 4),
            }
        )
    return [counters, _slice(node, "devices", generation, 2, devices=devices)]
