"""Where pod specs live inside workload objects, and what GPUs a pod spec asks for.

The one walker used by admission, the quota planner (demand from Pods) and the simulator.
Works on plain dicts as they arrive in an AdmissionReview or a `kubectl get -o json` List.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from quotaguard.kube.kinds import Kind, appwrapper_path, kind_of, parse_path, walk
from quotaguard.kube.names import (
    ACCELERATOR_PATTERN,
    DRA_EXTENDED_RESOURCE_PREFIX,
    GPU_RESOURCE,
    HAMI_RESOURCES,
    KNOWN_GPU_DEVICE_CLASSES,
    MIG_PREFIX,
    SHARED_GPU_RESOURCE,
)
from quotaguard.kube.quantity import parse_gpu_count
from quotaguard.kube.values import mapping as _mapping

PLAIN_GPU = GPU_RESOURCE  # the name admission reads it by
# Resource names that count as GPUs even when no class of the policy names them: matched
# exactly, so that other nvidia.com/ resources (HAMi's nvidia.com/gpumem, gpucores) never do.
KNOWN_GPU_RESOURCES = frozenset({GPU_RESOURCE, SHARED_GPU_RESOURCE})
# nvidia.com/mig-1g.10gb, mig-1c.3g.40gb, and the profiles with media extensions or graphics:
# mig-1g.10gb+me as NVIDIA names it, which the device plugin advertises as mig-1g.10gb.me
# (a resource name has no `+`), also -me, .gfx, .me.all: a MIG profile as the device plugin
# names it (the mixed strategy).
_MIG_RESOURCE = re.compile(
    r"nvidia\.com/mig-(?:\d+c\.)?\d+g\.\d+gb(?:[.+-][a-z][a-z0-9]*(?:[.+-][a-z0-9]+)*)?"
)
_ACCELERATOR = re.compile(ACCELERATOR_PATTERN)
TRAINER_CONTAINER = "trainer"


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """One pod spec inside an object, with JSON Pointers to it and to its metadata.

    `name` is what messages call it (`leader`, a task or replicated job, a worker group);
    None for a kind's only template. A TrainJob's template is its `spec.trainer`: one
    container, `trainer`, whose resources are at `resources_pointer`; it has no nodeSelector
    or scheduler of its own (`placeable` is False). A SparkApplication's role is one pod put
    together from the role's template, sidecars, init containers and GPU (`_spark_role`)."""

    spec: Mapping[str, Any]
    metadata: Mapping[str, Any]
    spec_pointer: str
    metadata_pointer: str
    name: str | None = None
    resources_pointer: str | None = None
    # A spec put together from several places of the object (a SparkApplication's role): the
    # JSON Pointer of each entry of its container lists, by list, and of the {name, quantity}
    # map that stands for one container's GPUs.
    container_pointers: Mapping[str, tuple[str, ...]] | None = None
    named_gpu_pointer: str | None = None

    def below(self, prefix: str, name: str | None) -> PodTemplate:
        """This template of an object that sits at `prefix` of another (an AppWrapper's
        component), called `name` there."""
        return PodTemplate(
            self.spec,
            self.metadata,
            prefix + self.spec_pointer,
            prefix + self.metadata_pointer,
            name,
            prefix + self.resources_pointer if self.resources_pointer else None,
            {
                field: tuple(prefix + p for p in found)
                for field, found in self.container_pointers.items()
            }
            if self.container_pointers is not None
            else None,
            prefix + self.named_gpu_pointer if self.named_gpu_pointer else None,
        )

    def container_pointer(self, field: str, index: int) -> str:
        """Where entry `index` of the spec's `field` (containers, initContainers) lives."""
        if self.container_pointers is not None:
            return self.container_pointers[field][index]
        return f"{self.spec_pointer}/{field}/{index}"

    @property
    def placeable(self) -> bool:
        return self.resources_pointer is None


def workload_kind(obj: Mapping[str, Any]) -> str | None:
    """The id of the object's kind (`Pod`, `Job`, `VolcanoJob`, `LeaderWorkerSet`, ...: see
    `quotaguard.kube.kinds`), None for kinds admission does not handle."""
    found = kind_of(obj)
    return found.id if found is not None else None


def _sequence(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def pod_templates(obj: Mapping[str, Any]) -> list[PodTemplate]:
    """Every pod spec of an object of a handled kind (empty for anything else)."""
    return templates_of_kind(obj, kind_of(obj))


def templates_of_kind(obj: Mapping[str, Any], kind: Kind | None) -> list[PodTemplate]:
    """`pod_templates` of an object whose kind is known (`kind_of(obj)`)."""
    if kind is None:
        return []
    if kind.id == "Pod":  # the common case, without the walk
        return [
            PodTemplate(
                _mapping(obj.get("spec")), _mapping(obj.get("metadata")), "/spec", "/metadata"
            )
        ]
    if kind.components is not None:
        return _component_templates(obj, kind.components)
    found = []
    for place in kind.templates:
        for pointer, value, name in walk(obj, place.steps):
            if not isinstance(value, Mapping):
                continue
            if place.form == "resources":
                found.append(_trainer(obj, value, pointer))
            elif place.form == "spark-role":
                found.append(_spark_role(obj, value, pointer, place.name or ""))
            else:
                found.append(_template(value, pointer, name or place.name))
    return found


def _template(template: Mapping[str, Any], pointer: str, name: str | None = None) -> PodTemplate:
    return PodTemplate(
        _mapping(template.get("spec")),
        _mapping(template.get("metadata")),
        f"{pointer}/spec",
        f"{pointer}/metadata",
        name,
    )


def _trainer(obj: Mapping[str, Any], resources: Mapping[str, Any], pointer: str) -> PodTemplate:
    """A TrainJob's `resourcesPerNode` as a pod spec of one container (read-only)."""
    spec = {"containers": [{"name": TRAINER_CONTAINER, "resources": resources}]}
    parent = pointer.rpartition("/")[0]
    return PodTemplate(spec, _mapping(obj.get("metadata")), parent, "/metadata", None, pointer)


SPARK_CONTAINER = "spark-kubernetes-{role}"  # the name Spark gives its own container


def _spark_role(
    obj: Mapping[str, Any], role: Mapping[str, Any], pointer: str, name: str
) -> PodTemplate:
    """A SparkApplication's driver or executor as the one pod the operator builds from it:
    the containers of its `template`, its `sidecars`, and Spark's own container with the
    role's `gpu` ({name, quantity}); the template's init containers and the role's; the
    nodeSelector of the application, the template and the role; the role's labels and
    annotations over the template's (the role's, at `pointer`, are where mutation writes)."""
    template = _mapping(role.get("template"))
    template_spec = _mapping(template.get("spec"))
    template_metadata = _mapping(template.get("metadata"))
    lists: dict[str, list[Any]] = {"containers": [], "initContainers": []}
    pointers: dict[str, list[str]] = {"containers": [], "initContainers": []}
    sources = (
        ("containers", template_spec.get("containers"), f"{pointer}/template/spec/containers"),
        ("containers", role.get("sidecars"), f"{pointer}/sidecars"),
        (
            "initContainers",
            template_spec.get("initContainers"),
            f"{pointer}/template/spec/initContainers",
        ),
        ("initContainers", role.get("initContainers"), f"{pointer}/initContainers"),
    )
    for field, entries, at in sources:
        for index, entry in enumerate(_sequence(entries)):
            lists[field].append(entry)
            pointers[field].append(f"{at}/{index}")
    gpu = role.get("gpu")
    named_gpu = None
    if isinstance(gpu, Mapping) and isinstance(gpu.get("name"), str) and gpu["name"]:
        named_gpu = f"{pointer}/gpu"
        resources = {"limits": {gpu["name"]: gpu.get("quantity")}}
        lists["containers"].append(
            {"name": SPARK_CONTAINER.format(role=name), "resources": resources}
        )
        pointers["containers"].append(named_gpu)
    spec: dict[str, Any] = {**lists}
    selector = {
        **_mapping(_mapping(obj.get("spec")).get("nodeSelector")),
        **_mapping(template_spec.get("nodeSelector")),
        **_mapping(role.get("nodeSelector")),
    }
    if selector:
        spec["nodeSelector"] = selector
    for field in ("schedulerName", "priorityClassName"):
        value = role.get(field) or template_spec.get(field)
        if value is not None:
            spec[field] = value
    metadata = {
        key: {**_mapping(template_metadata.get(key)), **_mapping(role.get(key))}
        for key in ("labels", "annotations")
    }
    return PodTemplate(
        spec,
        metadata,
        pointer,
        pointer,
        name,
        container_pointers={field: tuple(found) for field, found in pointers.items()},
        named_gpu_pointer=named_gpu,
    )


def _component_templates(obj: Mapping[str, Any], path: str) -> list[PodTemplate]:
    """An AppWrapper's pod templates: each component's `podSets` paths, or, for a component
    that declares none, the templates its own kind has (as AppWrapper infers them)."""
    found: list[PodTemplate] = []
    for pointer, components, _ in walk(obj, parse_path(path)):
        for index, component in enumerate(_sequence(components)):
            if isinstance(component, Mapping):
                found.extend(_component(component, f"{pointer}/{index}", index))
    return found


def _component(component: Mapping[str, Any], here: str, index: int) -> Iterator[PodTemplate]:
    template = _mapping(component.get("template"))
    component_name = _mapping(template.get("metadata")).get("name")
    named = isinstance(component_name, str) and component_name
    label = component_name if named else f"components[{index}]"
    pod_sets = [p for p in _sequence(component.get("podSets")) if isinstance(p, Mapping)]
    if not pod_sets:
        prefix = f"{here}/template"
        for inner in pod_templates(template):
            yield inner.below(prefix, f"{label}/{inner.name}" if inner.name else label)
        return
    for number, pod_set in enumerate(pod_sets):
        parts = appwrapper_path(pod_set.get("path"))
        value = _at(component, parts or ())
        if parts is None or not isinstance(value, Mapping):
            continue  # AppWrapper's own webhook refuses a path that finds no template
        name = label if len(pod_sets) == 1 else f"{label}/podSets[{number}]"
        yield _template(value, here + "".join(f"/{p}" for p in parts), name)


def _at(node: object, parts: tuple[str, ...]) -> object:
    for part in parts:
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


@dataclass(frozen=True, slots=True)
class ContainerRef:
    container: Mapping[str, Any]
    pointer: str
    init: bool

    @property
    def name(self) -> str:
        name = self.container.get("name")
        return name if isinstance(name, str) else "?"

    @property
    def sidecar(self) -> bool:
        return self.init and self.container.get("restartPolicy") == "Always"


def containers(spec: Mapping[str, Any], spec_pointer: str = "") -> Iterator[ContainerRef]:
    for field, init in (("initContainers", True), ("containers", False)):
        for index, container in enumerate(_sequence(spec.get(field))):
            if isinstance(container, Mapping):
                yield ContainerRef(container, f"{spec_pointer}/{field}/{index}", init)


def container_gpus(container: Mapping[str, Any], gpu_resources: frozenset[str]) -> dict[str, int]:
    """Whole-number GPU amounts a container asks for (limits win; unparsable ones skipped)."""
    resources = _mapping(container.get("resources"))
    found: dict[str, int] = {}
    for section in ("requests", "limits"):
        for name, value in _mapping(resources.get(section)).items():
            if name in gpu_resources or _looks_like_gpu(name):
                count = parse_gpu_count(value)
                if count is not None:
                    found[name] = count
    return found


def is_gpu_resource(resource: str, gpu_resources: frozenset[str]) -> bool:
    """A policy class resource, or an NVIDIA GPU resource the policy does not know."""
    return resource in gpu_resources or _looks_like_gpu(resource)


def _looks_like_gpu(resource: str) -> bool:
    """`nvidia.com/gpu`, `nvidia.com/gpu.shared` or a MIG profile, by exact name."""
    return resource in KNOWN_GPU_RESOURCES or (
        resource.startswith(MIG_PREFIX) and _MIG_RESOURCE.fullmatch(resource) is not None
    )


@lru_cache(maxsize=1024)
def ungoverned_gpu_resource(resource: str, gpu_resources: frozenset[str]) -> bool:
    """A GPU no class of the policy counts: HAMi's shares of an NVIDIA GPU (`nvidia.com/gpumem`,
    `gpucores`, `gpumem-percentage`), or an extended resource whose name looks like a GPU or
    another accelerator (`amd.com/gpu`, `gpu.intel.com/i915`, `habana.ai/gaudi`, ...) that is
    neither a policy class resource nor an NVIDIA GPU resource. Admission refuses these in a
    tenant's namespace rather than pass them as "no GPU"."""
    if is_gpu_resource(resource, gpu_resources):
        return False
    return (
        resource in HAMI_RESOURCES
        or ("/" in resource and _ACCELERATOR.search(resource) is not None)
        or (
            resource.startswith(DRA_EXTENDED_RESOURCE_PREFIX)
            and resource.removeprefix(DRA_EXTENDED_RESOURCE_PREFIX) in KNOWN_GPU_DEVICE_CLASSES
        )
    )


def pod_gpus(spec: Mapping[str, Any], gpu_resources: frozenset[str]) -> dict[str, int]:
    """What the scheduler reserves for a pod, per resource, as Kubernetes counts it
    (k8s.io/component-helpers resource.PodRequests): the larger of the regular containers plus
    every sidecar (an init container with `restartPolicy: Always`, which keeps running), and
    the peak of the init phase, where init container i runs beside the sidecars declared
    before it. Pod overhead holds no GPUs."""
    running: dict[str, int] = {}
    sidecars: dict[str, int] = {}  # the sidecars started so far, during the init phase
    init_peak: dict[str, int] = {}
    for ref in containers(spec):
        amounts = container_gpus(ref.container, gpu_resources)
        if not ref.init:
            _add(running, amounts)
            continue
        if ref.sidecar:
            _add(running, amounts)
            _add(sidecars, amounts)
            during = sidecars
        else:
            during = dict(sidecars)
            _add(during, amounts)
        for resource, count in during.items():
            init_peak[resource] = max(init_peak.get(resource, 0), count)
    for resource, count in init_peak.items():
        running[resource] = max(running.get(resource, 0), count)
    return {resource: count for resource, count in running.items() if count > 0}


def _add(total: dict[str, int], amounts: Mapping[str, int]) -> None:
    for resource, count in amounts.items():
        total[resource] = total.get(resource, 0) + count
