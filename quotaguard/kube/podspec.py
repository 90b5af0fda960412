"""Where pod specs live inside workload objects, and what GPUs a pod spec asks for.

The one walker used by admission, the quota planner (demand from Pods) and the simulator.
Works on plain dicts as they arrive in an AdmissionReview or a `kubectl get -o json` List.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from quotaguard.kube.names import GPU_PREFIXES as GPU_PREFIXES
from quotaguard.kube.names import GPU_RESOURCE
from quotaguard.kube.quantity import parse_gpu_count
from quotaguard.kube.values import mapping as _mapping

PLAIN_GPU = GPU_RESOURCE  # the name admission reads it by


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """One pod spec inside an object, with JSON Pointers to it and to its metadata."""

    spec: Mapping[str, Any]
    metadata: Mapping[str, Any]
    spec_pointer: str
    metadata_pointer: str


def workload_kind(obj: Mapping[str, Any]) -> str | None:
    """`Pod`, `Job`, `VolcanoJob` or `JobSet` for the objects admission handles, else None."""
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    if kind == "Pod" and api_version == "v1":
        return "Pod"
    if kind == "Job" and api_version == "batch/v1":
        return "Job"
    if (
        kind == "Job"
        and isinstance(api_version, str)
        and api_version.startswith("batch.volcano.sh/")
    ):
        return "VolcanoJob"
    if (
        kind == "JobSet"
        and isinstance(api_version, str)
        and api_version.startswith("jobset.x-k8s.io/")
    ):
        return "JobSet"
    return None


def _sequence(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def pod_templates(obj: Mapping[str, Any]) -> list[PodTemplate]:
    """Every pod spec of a Pod, Job, Volcano Job or JobSet (empty for anything else)."""
    kind = workload_kind(obj)
    spec = _mapping(obj.get("spec"))
    if kind == "Pod":
        return [PodTemplate(spec, _mapping(obj.get("metadata")), "/spec", "/metadata")]
    if kind == "Job":
        template = _mapping(spec.get("template"))
        return [_template(template, "/spec/template")]
    if kind == "VolcanoJob":
        return [
            _template(_mapping(task.get("template")), f"/spec/tasks/{index}/template")
            for index, task in enumerate(_sequence(spec.get("tasks")))
            if isinstance(task, Mapping)
        ]
    if kind == "JobSet":
        found = []
        for index, replicated in enumerate(_sequence(spec.get("replicatedJobs"))):
            job_template = _mapping(_mapping(replicated).get("template"))
            pod_template = _mapping(_mapping(job_template.get("spec")).get("template"))
            found.append(
                _template(pod_template, f"/spec/replicatedJobs/{index}/template/spec/template")
            )
        return found
    return []


def _template(template: Mapping[str, Any], pointer: str) -> PodTemplate:
    return PodTemplate(
        _mapping(template.get("spec")),
        _mapping(template.get("metadata")),
        f"{pointer}/spec",
        f"{pointer}/metadata",
    )


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
    return resource.startswith(GPU_PREFIXES)


def pod_gpus(spec: Mapping[str, Any], gpu_resources: frozenset[str]) -> dict[str, int]:
    """What the scheduler reserves for a pod: regular containers plus sidecars, or the largest
    single init container when that is more."""
    running: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for ref in containers(spec):
        amounts = container_gpus(ref.container, gpu_resources)
        for resource, count in amounts.items():
            if ref.init and not ref.sidecar:
                init_peak[resource] = max(init_peak.get(resource, 0), count)
            else:
                running[resource] = running.get(resource, 0) + count
    for resource, count in init_peak.items():
        running[resource] = max(running.get(resource, 0), count)
    return {resource: count for resource, count in running.items() if count > 0}
