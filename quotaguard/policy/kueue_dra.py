"""The resource Kueue counts a DRA class's devices under: its `deviceClassMappings`.

With its DynamicResourceAllocation feature gate on, Kueue counts the devices a
ResourceClaimTemplate asks for under the `name` of the `resources.deviceClassMappings` entry
that lists the request's DeviceClass, in ClusterQueue quotas and in Workloads' usage alike. A
class's `dra.kueueResource` declares that name; without it the controller and `plan` read it
from Kueue's Configuration (ConfigMap `kueue-manager-config`, key
`controller_manager_config.yaml`, in Kueue's namespace). Queues are written under that name
(`GpuClass.resource`).

A class that pods reach by an extended resource as well is counted under that one name, so
Kueue must map its DeviceClass to the same name, or the claims would land on a resource no
quota of the class covers: said as a problem, never silently moved.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from quotaguard.kube.names import DEFAULT_KUEUE_NAMESPACE, KUEUE_CONFIG_KEY, KUEUE_CONFIGMAP
from quotaguard.policy.model import GpuClass, TenantPolicy
from quotaguard.policy.problems import Problem

__all__ = [
    "DEFAULT_KUEUE_NAMESPACE",
    "KUEUE_CONFIGMAP",
    "KUEUE_CONFIG_KEY",
    "check_kueue_resources",
    "device_class_mappings",
    "with_kueue_resources",
]


def device_class_mappings(text: str) -> tuple[dict[str, str], list[str]]:
    """DeviceClass -> the resource Kueue counts it under, from a Configuration's YAML text, and
    what in it could not be read."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return {}, [f"{KUEUE_CONFIG_KEY} is not YAML: {exc}"]
    if not isinstance(document, Mapping):
        return {}, [f"{KUEUE_CONFIG_KEY} is not a Kueue Configuration (not a mapping)"]
    resources = document.get("resources")
    entries = resources.get("deviceClassMappings") if isinstance(resources, Mapping) else None
    if entries is None:
        return {}, []
    if not isinstance(entries, list):
        return {}, ["resources.deviceClassMappings is not a list"]
    found: dict[str, str] = {}
    problems: list[str] = []
    for index, entry in enumerate(entries):
        where = f"resources.deviceClassMappings[{index}]"
        name = entry.get("name") if isinstance(entry, Mapping) else None
        classes = entry.get("deviceClassNames") if isinstance(entry, Mapping) else None
        if not isinstance(name, str) or not isinstance(classes, list):
            problems.append(f"{where}: needs a name and a list deviceClassNames; skipped")
            continue
        for device_class in classes:
            if isinstance(device_class, str):
                found.setdefault(device_class, name)
    return found, problems


def with_kueue_resources(
    policy: TenantPolicy, mappings: Mapping[str, str]
) -> tuple[TenantPolicy, list[str]]:
    """The policy with `dra.kueueResource` set from Kueue's `mappings` on the classes that only
    DRA reaches and declare none, and what disagrees with Kueue's mappings."""
    changed: dict[int, GpuClass] = {}
    problems: list[str] = []
    for index, gpu_class in enumerate(policy.spec.gpu_classes):
        if gpu_class.dra is None:
            continue
        mapped = mappings.get(gpu_class.dra.device_class_name)
        problem = _disagreement(gpu_class, mapped)
        if problem is not None:
            problems.append(problem)
        elif mapped is not None and gpu_class.resource_name is gpu_class.dra.kueue_resource is None:
            changed[index] = _with_kueue_resource(gpu_class, mapped)
    if not changed:
        return policy, problems
    document = policy.model_dump(by_alias=True, exclude_unset=True)
    for index, gpu_class in changed.items():
        document["spec"]["gpuClasses"][index] = gpu_class.model_dump(
            by_alias=True, exclude_unset=True
        )
    # validated anew: a copy would keep the cached views (classes by resource, ...) of the old
    return TenantPolicy.model_validate(document), problems


def _with_kueue_resource(gpu_class: GpuClass, name: str) -> GpuClass:
    assert gpu_class.dra is not None
    dra = gpu_class.dra.model_dump(by_alias=True, exclude_unset=True)
    document = gpu_class.model_dump(by_alias=True, exclude_unset=True)
    document["dra"] = {**dra, "kueueResource": name}
    return GpuClass.model_validate(document)


def _disagreement(gpu_class: GpuClass, mapped: str | None) -> str | None:
    assert gpu_class.dra is not None
    device_class = gpu_class.dra.device_class_name
    where = f"class {gpu_class.name!r}: Kueue counts DeviceClass {device_class!r}"
    if mapped is None:
        if gpu_class.resource_name is None and gpu_class.dra.kueue_resource is not None:
            return (
                f"{where} under no resource (no deviceClassMappings entry lists it), not "
                f"{gpu_class.dra.kueue_resource!r}: Kueue leaves such Workloads inadmissible"
            )
        return None
    counted = gpu_class.resource_name or gpu_class.dra.kueue_resource
    if counted is not None and mapped != counted:
        return (
            f"{where} under {mapped!r}, but the class's queues count {counted!r}: "
            "its claims hold no quota of the class; make them one name"
        )
    return None


def check_kueue_resources(spec: Mapping[str, Any]) -> list[Problem]:
    """`dra.kueueResource` agrees with the class's resource, its backend, and its DeviceClass's
    other classes (Kueue maps a DeviceClass to one name)."""
    return list(_checked(spec))


def _checked(spec: Mapping[str, Any]) -> Iterator[Problem]:
    classes = spec.get("gpuClasses")
    if not isinstance(classes, list):
        return
    named: dict[str, tuple[str, str]] = {}  # DeviceClass -> (first class, its Kueue name)
    for index, gpu_class in enumerate(classes):
        dra = gpu_class.get("dra") if isinstance(gpu_class, Mapping) else None
        if not isinstance(dra, Mapping) or not isinstance(dra.get("kueueResource"), str):
            continue
        kueue_name = str(dra["kueueResource"])
        path = ("spec", "gpuClasses", index, "dra", "kueueResource")
        resource = gpu_class.get("resource")
        if spec.get("backend") == "volcano":
            yield Problem(
                path,
                "Volcano counts DRA devices as deviceclass/<DeviceClass>; kueueResource is "
                "for the kueue backend",
            )
        elif isinstance(resource, str) and resource != kueue_name:
            yield Problem(
                path,
                f"the class is counted under its resource {resource!r}; Kueue must count its "
                f"DeviceClass under the same name (kueueResource: {resource}) or the claims "
                "hold no quota of the class",
            )
        device_class = dra.get("deviceClassName")
        if not isinstance(device_class, str):
            continue
        first = named.setdefault(device_class, (str(gpu_class.get("name")), kueue_name))
        if first[1] != kueue_name:
            yield Problem(
                path,
                f"Kueue maps DeviceClass {device_class!r} to one resource; class "
                f"{first[0]!r} says {first[1]!r}",
            )
