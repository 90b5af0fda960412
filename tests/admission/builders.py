"""Small builders for the objects admission sees, so each test shows only what matters."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from quotaguard.admission import Decision
from quotaguard.admission.names import DECIDED_ANNOTATION
from quotaguard.admission.workload import gpu_ask, template_views
from quotaguard.kube.kinds import BY_ID, Step


def container(
    name: str = "main",
    *,
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    found: dict[str, Any] = {"name": name, "image": "registry.example/app:1", **extra}
    if resources:
        found["resources"] = resources
    return found


def gpu(count: Any = 1, resource: str = "nvidia.com/gpu", name: str = "main") -> dict[str, Any]:
    return container(name, limits={resource: count})


def pod_spec(
    *containers: dict[str, Any],
    init: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers) or [gpu()], **extra}
    if init is not None:
        spec["initContainers"] = init
    return spec


def metadata(
    annotations: dict[str, Any] | None = None,
    labels: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    found: dict[str, Any] = {"name": "work", **extra}
    if annotations is not None:
        found["annotations"] = annotations
    if labels is not None:
        found["labels"] = labels
    return found


def pod(
    *containers: dict[str, Any],
    annotations: dict[str, Any] | None = None,
    labels: dict[str, Any] | None = None,
    init: list[dict[str, Any]] | None = None,
    owners: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    meta = metadata(annotations, labels)
    if owners is not None:
        meta["ownerReferences"] = owners
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": pod_spec(*containers, init=init, **spec),
    }


def template(
    *containers: dict[str, Any],
    annotations: dict[str, Any] | None = None,
    labels: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    found: dict[str, Any] = {"spec": pod_spec(*containers, **spec)}
    if annotations is not None or labels is not None:
        found["metadata"] = {
            k: v for k, v in (("annotations", annotations), ("labels", labels)) if v is not None
        }
    return found


def job(pod_template: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(**meta),
        "spec": {"template": pod_template or template()},
    }


def volcano_job(*tasks: tuple[str, dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": metadata(),
        "spec": {
            "minAvailable": 1,
            "tasks": [{"name": n, "replicas": 1, "template": t} for n, t in tasks],
            **spec,
        },
    }


def jobset(*replicated: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata(),
        "spec": {
            "replicatedJobs": [
                {"name": n, "replicas": 1, "template": {"spec": {"template": t}}}
                for n, t in replicated
            ]
        },
    }


def owner(kind: str = "Job", api_version: str = "batch/v1") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": "parent",
        "uid": "00000000-0000-4000-8000-000000000001",
        "controller": True,
    }


def applied(obj: dict[str, Any], decision: Decision) -> dict[str, Any]:
    """The object after the decision's patch, applied the way the API server would."""
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(obj), list(decision.patch))
    return result


def limits_of(obj: dict[str, Any], index: int = 0) -> dict[str, Any]:
    found: dict[str, Any] = obj["spec"]["containers"][index]["resources"]["limits"]
    return found


def requests_of(obj: dict[str, Any], index: int = 0) -> dict[str, Any]:
    found: dict[str, Any] = obj["spec"]["containers"][index]["resources"]["requests"]
    return found


def at(node: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        node = node[part]
    return node


def inference_pod(*changes: tuple[str, Any]) -> dict[str, Any]:
    """A pod that mutation rewrites to a MIG slice, with (path, value) changes; a path is the
    keys down to the value, separated by spaces (resource names hold dots and slashes)."""
    obj = pod(gpu(), annotations={"quotaguard.dev/gpu-memory": "8Gi"}, labels={"app": "web"})
    for where, value in changes:
        parts = [int(p) if p.isdigit() else p for p in where.split(" ")]
        at(obj, tuple(parts[:-1]))[parts[-1]] = value
    return obj


def of_kind(kind_id: str, *templates: dict[str, Any], **meta: Any) -> dict[str, Any]:
    """An object of a kind of the table with `templates` (pod templates: `{"spec": ...}`) at
    its template paths, in order: a list or map step gets one entry (named `<field>-<n>`);
    templates past the kind's last path go into further entries of its last list or map. A
    TrainJob takes the first template's first container's resources; a SparkApplication's
    driver and executor each take one as their `template`; an AppWrapper wraps each template
    in a Job component."""
    kind = BY_ID[kind_id]
    obj: dict[str, Any] = {
        "apiVersion": kind.api_versions[0],
        "kind": kind.kind,
        "metadata": metadata(**meta),
    }
    if kind.components is not None:
        obj["spec"] = {
            "components": [
                {"template": {**job(t), "metadata": {"name": f"part-{n}"}}}
                for n, t in enumerate(templates)
            ]
        }
        return obj
    if kind_id == "Pod":
        obj["spec"] = templates[0]["spec"]
        return obj
    places = list(kind.templates)
    while len(places) < len(templates):
        places.append(places[-1])
    for number, (place, value) in enumerate(zip(places, templates, strict=False)):
        if place.form == "resources":
            value = value["spec"]["containers"][0].get("resources", {})
        elif place.form == "spark-role":
            value = {"template": value}
        _put(obj, place.steps, value, number)
    return obj


def _put(node: dict[str, Any], steps: tuple[Step, ...], value: Any, number: int) -> None:
    step, rest = steps[0], steps[1:]
    if step.kind == "field":
        if not rest:
            node[step.field] = value
            return
        _put(node.setdefault(step.field, {}), rest, value, number)
        return
    name = f"{step.field.lower()}-{number}"
    if step.kind == "list":
        item: dict[str, Any] = {step.name_field: name}
        node.setdefault(step.field, []).append(item)
    else:
        item = node.setdefault(step.field, {}).setdefault(name, {})
    if rest:
        _put(item, rest, value, number)


def recorded(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with the decision record mutation writes into each of its GPU templates, as a
    controller copies it from a decided owner's template."""
    found = copy.deepcopy(obj)
    for view in template_views(found, frozenset()):
        if not view.gpu_containers:
            continue
        node: Any = found
        for part in view.template.metadata_pointer.strip("/").split("/"):
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        node.setdefault("annotations", {})[DECIDED_ANNOTATION] = gpu_ask(view)
    return found
