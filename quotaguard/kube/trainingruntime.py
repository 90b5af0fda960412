"""A TrainJob's runtime (trainer.kubeflow.org ClusterTrainingRuntime / TrainingRuntime): where
its trainer node's resources are, and the runtimes admission was given.

A TrainJob holds only what each node asks for (`spec.trainer.resourcesPerNode`), and often not
even that: the built-in torchtune runtimes ask `nvidia.com/gpu: 2` per node in the runtime's
own JobSet template. Admission is pure, so the runtimes come in as data (`TrainingRuntimes`):
the webhook keeps them in a cache it refreshes with the API client, `quotaguard review` reads
them from `--runtime FILE`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from quotaguard.kube.values import mapping as _mapping

GROUP = "trainer.kubeflow.org"
CLUSTER_RUNTIME = "ClusterTrainingRuntime"
RUNTIME = "TrainingRuntime"
RUNTIME_KINDS = (CLUSTER_RUNTIME, RUNTIME)
# The trainer's replicated job and container in Kubeflow Trainer's runtimes; the label marks
# the trainer step when the job is named otherwise.
TRAINER_JOB = "node"
TRAINER_CONTAINER = "node"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"

RuntimeKey = tuple[str, str, str]  # (kind, namespace or "" for a cluster runtime, name)


@dataclass(frozen=True, slots=True)
class TrainingRuntimes:
    """The runtimes admission may read, by (kind, namespace, name); `error` says why they could
    not be read at all (then every lookup finds nothing)."""

    found: Mapping[RuntimeKey, Mapping[str, Any]] = field(default_factory=dict)
    error: str | None = None

    def lookup(self, key: RuntimeKey) -> Mapping[str, Any] | None:
        return None if self.error else self.found.get(key)


def runtimes_of(documents: Iterable[object]) -> TrainingRuntimes:
    """The runtimes among `documents` (others are skipped)."""
    found: dict[RuntimeKey, Mapping[str, Any]] = {}
    for document in documents:
        key = key_of_runtime(document)
        if key is not None and isinstance(document, Mapping):
            found[key] = document
    return TrainingRuntimes(found)


def key_of_runtime(document: object) -> RuntimeKey | None:
    if not isinstance(document, Mapping) or document.get("kind") not in RUNTIME_KINDS:
        return None
    api_version = document.get("apiVersion")
    if not isinstance(api_version, str) or not api_version.startswith(GROUP + "/"):
        return None
    metadata = _mapping(document.get("metadata"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return None
    kind = str(document["kind"])
    namespace = metadata.get("namespace") if kind == RUNTIME else ""
    return (kind, namespace if isinstance(namespace, str) else "", name)


def runtime_ref(trainjob: Mapping[str, Any], namespace: str) -> RuntimeKey | None:
    """The runtime a TrainJob names (`spec.runtimeRef`; kind ClusterTrainingRuntime unless
    it says TrainingRuntime, which lives in the TrainJob's namespace)."""
    ref = _mapping(_mapping(trainjob.get("spec")).get("runtimeRef"))
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        return None
    kind = ref.get("kind") or CLUSTER_RUNTIME
    if kind not in RUNTIME_KINDS:
        return (str(kind), namespace, name)
    return (str(kind), namespace if kind == RUNTIME else "", name)


def trainer_resources(runtime: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The resources of the trainer node's container in a runtime's JobSet template: the
    replicated job named `node` (or labelled as the trainer step), its container `node` (or
    its first)."""
    template_spec = _mapping(_mapping(_mapping(runtime.get("spec")).get("template")).get("spec"))
    jobs = template_spec.get("replicatedJobs")
    for job in jobs if isinstance(jobs, list) else ():
        job_template = _mapping(_mapping(job).get("template"))
        labels = _mapping(_mapping(job_template.get("metadata")).get("labels"))
        if _mapping(job).get("name") != TRAINER_JOB and labels.get(ANCESTOR_LABEL) != "trainer":
            continue
        pod_spec = _mapping(
            _mapping(_mapping(job_template.get("spec")).get("template")).get("spec")
        )
        containers = [c for c in pod_spec.get("containers") or () if isinstance(c, Mapping)]
        named = [c for c in containers if c.get("name") == TRAINER_CONTAINER]
        chosen = named or containers
        resources = chosen[0].get("resources") if chosen else None
        return resources if isinstance(resources, Mapping) else None
    return None


def with_runtime_resources(
    trainjob: Mapping[str, Any], runtime: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The TrainJob as the trainer will run it: the runtime's trainer resources as its
    `resourcesPerNode` when it sets none (None when there is nothing to add)."""
    trainer = _mapping(_mapping(trainjob.get("spec")).get("trainer"))
    if trainer.get("resourcesPerNode") is not None:
        return None
    resources = trainer_resources(runtime)
    if not resources:
        return None
    found = copy.deepcopy(dict(trainjob))
    spec = found.setdefault("spec", {})
    if not isinstance(spec, dict):
        return None
    trainer_field = spec.setdefault("trainer", {})
    if not isinstance(trainer_field, dict):
        return None
    trainer_field["resourcesPerNode"] = copy.deepcopy(dict(resources))
    return found
