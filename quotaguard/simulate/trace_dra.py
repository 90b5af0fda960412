"""The DRA parts of a trace: which workloads get their GPUs through DRA, and the DRA objects
their claims name.

```yaml
draObjects:                     # ResourceClaimTemplates, ResourceClaims and DeviceClasses
  - apiVersion: resource.k8s.io/v1
    kind: ResourceClaimTemplate
    metadata: {name: one-gpu, namespace: research}
    spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}}}
workloads:
  - {at: 0, duration: 1h, namespace: research, pod: {spec: {resourceClaims: [...], ...}}}
  - {at: 0, duration: 1h, namespace: training, dra: true, pod: {...nvidia.com/gpu: 2...}}
```

A workload is DRA when its pods name claims (`resourceClaims`, resolved against `draObjects`
as the webhook resolves them against the cluster), when they ask for an extended resource a
DeviceClass of the policy serves (`deviceclass.resource.kubernetes.io/<class>`,
`dra.extendedResourceName`), or when the trace says `dra: true` (the same GPUs, handed out by
a DRA driver instead of the device plugin). It is admitted, queued and placed as any other;
the report counts its GPU-hours apart, per tenant and class, for a migration plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from quotaguard.kube.dra import NO_DRA_OBJECTS, DraObjects, dra_objects, is_resource_kind
from quotaguard.policy.problems import Path as FieldPath

DRA_KINDS = ("ResourceClaimTemplate", "ResourceClaim", "DeviceClass")
Problem = Callable[[FieldPath, str], None]


def read_dra_flag(entry: Mapping[str, Any], path: FieldPath, problem: Problem) -> bool:
    """A workload's `dra` (default false)."""
    value = entry.get("dra", False)
    if not isinstance(value, bool):
        problem((*path, "dra"), f"must be true or false, not {value!r}")
        return False
    return value


def read_dra_objects(top: Mapping[str, Any], problem: Problem) -> DraObjects:
    """The trace's `draObjects`: every item a resource.k8s.io object of a kind claims name,
    with a name (namespaced kinds in the namespace they say, else `default`)."""
    raw = top.get("draObjects")
    if raw is None:
        return NO_DRA_OBJECTS
    if not isinstance(raw, list):
        problem(
            ("draObjects",),
            "must be a list of ResourceClaimTemplates, ResourceClaims and DeviceClasses",
        )
        return NO_DRA_OBJECTS
    kept = []
    for index, item in enumerate(raw):
        path: FieldPath = ("draObjects", index)
        if not isinstance(item, Mapping) or not any(is_resource_kind(item, k) for k in DRA_KINDS):
            kind = item.get("kind") if isinstance(item, Mapping) else type(item).__name__
            problem(
                path,
                f"{kind!r} is not a resource.k8s.io ResourceClaimTemplate, ResourceClaim or "
                "DeviceClass",
            )
            continue
        metadata = item.get("metadata")
        if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
            problem((*path, "metadata"), "needs metadata.name")
            continue
        kept.append(item)
    return dra_objects(kept)
