"""What the watch caches keep of each object: the fields `quotaguard.quota.cluster` reads.

Trimming bounds memory on big clusters (a pod drops from ~10 KB to a few hundred bytes) and
keeps the planner's parse cheap. Each trimmed object keeps `apiVersion` and `kind`, which list
responses leave out of their items but the planner's parser dispatches on. Pods that hold no
GPUs, or no longer hold anything (succeeded or failed), are not kept at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from quotaguard.kube.dra import has_pod_claims
from quotaguard.kube.names import GPU_PREFIXES, KUEUE_QUEUE_LABEL
from quotaguard.kube.podspec import pod_gpus
from quotaguard.kube.values import mapping as _map
from quotaguard.quota.cluster import TERMINATED_PHASES, VOLCANO_GROUP_ANNOTATION

JsonObject = dict[str, Any]


def _items(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _some(**fields: Any) -> JsonObject:
    return {key: value for key, value in fields.items() if value is not None}


def _metadata(obj: Mapping[str, Any], *extra: str) -> JsonObject:
    metadata = _map(obj.get("metadata"))
    kept = {
        key: metadata[key]
        for key in ("name", "namespace", "uid", "resourceVersion", "generation", *extra)
        if key in metadata
    }
    return kept


def _container(container: object) -> JsonObject:
    fields = _map(container)
    return _some(
        name=fields.get("name"),
        resources=fields.get("resources"),
        restartPolicy=fields.get("restartPolicy"),
    )


def _pod_spec(spec: Mapping[str, Any]) -> JsonObject:
    return _some(
        nodeName=spec.get("nodeName"),
        nodeSelector=spec.get("nodeSelector"),
        containers=[_container(c) for c in _items(spec.get("containers"))],
        initContainers=[_container(c) for c in _items(spec.get("initContainers"))] or None,
        # the DRA claims a Workload's pods make (quotaguard.quota.drademand counts them)
        resourceClaims=spec.get("resourceClaims") or None,
    )


def trim_node(obj: JsonObject) -> JsonObject:
    spec, status = _map(obj.get("spec")), _map(obj.get("status"))
    metadata = _metadata(obj, "labels")
    # quotaguard's own annotations carry the progress of a layout change
    own = {
        key: value
        for key, value in _map(_map(obj.get("metadata")).get("annotations")).items()
        if str(key).startswith("quotaguard.dev/")
    }
    if own:
        metadata["annotations"] = own
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": _some(
            unschedulable=spec.get("unschedulable"),
            taints=[
                _some(key=_map(t).get("key"), effect=_map(t).get("effect"))
                for t in _items(spec.get("taints"))
            ]
            or None,
        ),
        "status": {
            "allocatable": {
                name: amount
                for name, amount in _map(status.get("allocatable")).items()
                if "/" in str(name)
            },
            # Ready, and any other condition that holds (a GPU health checker's, e.g.)
            "conditions": [
                _some(type=_map(c).get("type"), status=_map(c).get("status"))
                for c in _items(status.get("conditions"))
                if _map(c).get("type") == "Ready" or _map(c).get("status") == "True"
            ],
        },
    }


def pod_trimmer(gpu_resources: frozenset[str]) -> Callable[[JsonObject], JsonObject | None]:
    def trim_pod(obj: JsonObject) -> JsonObject | None:
        spec, status = _map(obj.get("spec")), _map(obj.get("status"))
        if status.get("phase") in TERMINATED_PHASES:
            return None
        if not pod_gpus(spec, gpu_resources) and not has_pod_claims(spec):
            return None
        metadata = _metadata(obj)
        source = _map(obj.get("metadata"))
        labels = _map(source.get("labels"))
        annotations = _map(source.get("annotations"))
        if KUEUE_QUEUE_LABEL in labels:
            metadata["labels"] = {KUEUE_QUEUE_LABEL: labels[KUEUE_QUEUE_LABEL]}
        if VOLCANO_GROUP_ANNOTATION in annotations:
            metadata["annotations"] = {
                VOLCANO_GROUP_ANNOTATION: annotations[VOLCANO_GROUP_ANNOTATION]
            }
        owners = [
            _some(
                kind=_map(o).get("kind"),
                name=_map(o).get("name"),
                controller=_map(o).get("controller"),
            )
            for o in _items(source.get("ownerReferences"))
        ]
        if owners:
            metadata["ownerReferences"] = owners
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": _pod_spec(spec),
            "status": _some(phase=status.get("phase")),
        }

    return trim_pod


def pod_line_filter(gpu_resources: frozenset[str]) -> Callable[[bytes], bool]:
    """A watch line can only be a GPU pod when it names a GPU resource somewhere or has DRA
    claims (whose GPUs `quotaguard.quota.drademand` counts)."""
    needles = tuple(
        {name.encode() for name in gpu_resources | set(GPU_PREFIXES)} | {b'"resourceClaims"'}
    )

    def may_hold_gpus(line: bytes) -> bool:
        return any(needle in line for needle in needles)

    return may_hold_gpus


def workload_trimmer(api_version: str) -> Callable[[JsonObject], JsonObject | None]:
    def trim_workload(obj: JsonObject) -> JsonObject | None:
        spec, status = _map(obj.get("spec")), _map(obj.get("status"))
        pod_sets = []
        for pod_set in _items(spec.get("podSets")):
            fields = _map(pod_set)
            template_spec = _map(_map(fields.get("template")).get("spec"))
            pod_sets.append(
                _some(
                    name=fields.get("name"),
                    count=fields.get("count"),
                    template={"spec": _pod_spec(template_spec)},
                )
            )
        return {
            "apiVersion": obj.get("apiVersion") or api_version,
            "kind": "Workload",
            "metadata": _metadata(obj),
            "spec": _some(queueName=spec.get("queueName"), podSets=pod_sets),
            "status": _some(
                admission=status.get("admission"),
                conditions=[
                    _some(type=_map(c).get("type"), status=_map(c).get("status"))
                    for c in _items(status.get("conditions"))
                ],
            ),
        }

    return trim_workload


def whole_spec_trimmer(api_version: str, kind: str) -> Callable[[JsonObject], JsonObject | None]:
    """Queues are few and small: keep their whole spec (a writer preserves what it does not
    manage), drop status and managedFields."""

    def trim_queue(obj: JsonObject) -> JsonObject | None:
        return {
            "apiVersion": obj.get("apiVersion") or api_version,
            "kind": kind,
            "metadata": _metadata(obj),
            "spec": obj.get("spec") or {},
        }

    return trim_queue


def pod_group_trimmer(api_version: str) -> Callable[[JsonObject], JsonObject | None]:
    def trim_pod_group(obj: JsonObject) -> JsonObject | None:
        spec, status = _map(obj.get("spec")), _map(obj.get("status"))
        return {
            "apiVersion": obj.get("apiVersion") or api_version,
            "kind": "PodGroup",
            "metadata": _metadata(obj),
            "spec": _some(
                queue=spec.get("queue"),
                minMember=spec.get("minMember"),
                minResources=spec.get("minResources"),
            ),
            "status": _some(phase=status.get("phase")),
        }

    return trim_pod_group


def dra_trimmer(api_version: str, kind: str) -> Callable[[JsonObject], JsonObject | None]:
    """ResourceSlices, DeviceClasses and ResourceClaimTemplates whole but for status and
    managedFields; of a ResourceClaim's status only which devices it holds (one claim per
    pod: their statuses would be most of the cache)."""

    def trim_dra_object(obj: JsonObject) -> JsonObject | None:
        trimmed: JsonObject = {
            "apiVersion": obj.get("apiVersion") or api_version,
            "kind": kind,
            "metadata": _metadata(obj),
            "spec": obj.get("spec") or {},
        }
        devices = _map(_map(_map(obj.get("status")).get("allocation")).get("devices"))
        results = [
            _some(
                driver=_map(r).get("driver"),
                pool=_map(r).get("pool"),
                device=_map(r).get("device"),
            )
            for r in _items(devices.get("results"))
        ]
        if results:
            trimmed["status"] = {"allocation": {"devices": {"results": results}}}
        return trimmed

    return trim_dra_object
