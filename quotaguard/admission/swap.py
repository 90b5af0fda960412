"""Moving a container's GPU request from one resource to another, in limits and requests.

What CREATE does to rewrite `nvidia.com/gpu` into a class, and what UPDATE does to put the
class back when a re-applied manifest brought `nvidia.com/gpu` back.
"""

from __future__ import annotations

from quotaguard.admission.patch import PatchBuilder
from quotaguard.admission.workload import GpuContainer
from quotaguard.kube.podspec import PLAIN_GPU
from quotaguard.kube.quantity import parse_gpu_count


def whole_gpus(container: GpuContainer, resource: str) -> int | None:
    """The count to carry over, when limits and requests agree on a positive whole number."""
    count = parse_gpu_count(container.limits.get(resource))
    if not count:
        return None
    if resource in container.requests and parse_gpu_count(container.requests[resource]) != count:
        return None
    return count


def swap_resource(container: GpuContainer, count: int, resource: str, patch: PatchBuilder) -> str:
    """`nvidia.com/gpu: count` becomes `resource: count` in limits and requests (an entry of
    `resource` already there is set to `count`); returns the change as provenance records it."""
    if container.named:  # a SparkApplication role's gpu: {name, quantity}
        patch.set(container.resources_pointer, "name", resource)
        return f"{container.label}: {PLAIN_GPU}={count} -> {resource}={count}"
    amount = str(count)
    limits = f"{container.resources_pointer}/limits"
    requests = f"{container.resources_pointer}/requests"
    patch.remove(limits, PLAIN_GPU)
    patch.set(limits, resource, amount)
    if PLAIN_GPU in container.requests:
        patch.remove(requests, PLAIN_GPU)
    patch.set(requests, resource, amount)
    return f"{container.label}: {PLAIN_GPU}={count} -> {resource}={count}"
