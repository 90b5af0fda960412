"""The workload kinds quotaguard admits, and where each keeps its pod templates: one row a kind.

Every kind Kueue v0.17 integrates (plus Volcano Jobs, CronJobs and ReplicaSets, whose pods or
Jobs Kueue manages). A row names the kind, the plural the webhook registrations use, the paths
of its pod templates and the metadata where the Kueue queue label goes. Admission, the sparse
decoder, the shape checks, the webhook registrations (with their CEL matchConditions) and the
simulator all read this table: adding a kind is adding a row.

Paths are dotted field names from the object's root; `field[name]` steps into every entry of a
list, naming the template by the entry's `name` field (`workerGroupSpecs[groupName]`), and
`field{}` into every value of a map, naming it by its key (`pytorchReplicaSpecs{}`: Master,
Worker). The empty path is the object itself (a Pod: `spec`, `metadata`).

Where Kueue reads the queue label (pkg/controller/jobs of v0.17): `metadata.labels` of the
object for every kind; a Deployment's webhook copies it into the pod template, whose pods the
pod integration then judges by their own label, so quotaguard writes both (whichever of the
two webhooks runs first); a StatefulSet's and a LeaderWorkerSet's reconcilers copy the
object's label onto their pods themselves. A CronJob is not a Kueue kind: the Jobs it creates
are, and they take their labels from `spec.jobTemplate.metadata`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

StepKind = Literal["field", "list", "map"]


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a path: a field, every entry of a list (named by `name_field`), or every
    value of a map (named by its key)."""

    kind: StepKind
    field: str
    name_field: str = ""


_STEP = re.compile(r"^(?P<field>[A-Za-z][A-Za-z0-9]*)(?:\[(?P<list>[A-Za-z]+)\]|(?P<map>\{\}))?$")


def parse_path(path: str) -> tuple[Step, ...]:
    """`spec.replicatedJobs[name].template` as steps (the empty path is the object)."""
    steps = []
    for part in path.split(".") if path else ():
        match = _STEP.match(part)
        if match is None:
            raise ValueError(f"bad template path {path!r} at {part!r}")
        if match["list"]:
            steps.append(Step("list", match["field"], match["list"]))
        elif match["map"]:
            steps.append(Step("map", match["field"]))
        else:
            steps.append(Step("field", match["field"]))
    return tuple(steps)


@dataclass(frozen=True, slots=True)
class TemplatePath:
    """Where one pod template lives, and what to call it in messages. `form="resources"`: one
    ResourceRequirements map that stands for a pod's one container (a TrainJob's);
    `form="spark-role"`: a SparkApplication's driver or executor, whose pod is its `template`
    plus its `sidecars`, `initContainers` and the `gpu` ({name, quantity}) of Spark's own
    container (see `quotaguard.kube.podspec`)."""

    path: str
    name: str | None = None  # a fixed name (`leader`, `head`); list and map steps name their own
    form: Literal["pod-template", "resources", "spark-role"] = "pod-template"
    steps: tuple[Step, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", parse_path(self.path))


@dataclass(frozen=True, slots=True)
class Kind:
    """One workload kind: identity, registration, templates and queue label places."""

    id: str  # what the code calls it: "Pod", "Job", "VolcanoJob", "PyTorchJob", ...
    group: str  # "" for the core group
    kind: str
    versions: tuple[str, ...]  # the versions the webhooks are registered for
    resource: str  # the plural of the webhook rules
    templates: tuple[TemplatePath, ...]
    # Metadata (as paths) that gets the Kueue queue label; the object's own by default.
    queue_labels: tuple[str, ...] = ("metadata",)
    # AppWrapper: components whose templates are found by their podSets paths.
    components: str | None = None
    # TrainJob: the reference to a runtime whose pods may ask for GPUs the object does not
    # name (see `quotaguard.kube.trainingruntime`); an object with one is always sent.
    runtime_ref: str | None = None
    # The boolean by which Kueue holds an object of the kind until it admits it (Kueue's
    # IsSuspended); None where Kueue gates the pods instead, or does not manage the kind.
    suspend: str | None = None
    # Where the number of pods Kueue admitted is set (`[]`, `{}` steps as in templates): raised
    # on a running object, the extra pods start before Kueue suspends it again.
    pod_counts: tuple[str, ...] = ()

    @property
    def api_versions(self) -> tuple[str, ...]:
        return tuple(f"{self.group}/{v}" if self.group else v for v in self.versions)

    @property
    def queue_label_steps(self) -> tuple[tuple[Step, ...], ...]:
        return tuple(parse_path(path) for path in self.queue_labels)

    def queue_label_metadata(self, obj: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
        """(JSON Pointer, metadata) of every place the queue label goes (a missing one as an
        empty map)."""
        found: list[tuple[str, Mapping[str, Any]]] = []
        for path in self.queue_labels:
            node: object = obj
            for part in path.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            found.append(("/" + path.replace(".", "/"), node if isinstance(node, dict) else {}))
        return found


def _t(path: str, name: str | None = None) -> TemplatePath:
    return TemplatePath(path, name)


def _kubeflow(kind: str, replica_specs: str, version: str = "v1") -> Kind:
    return Kind(
        kind,
        "kubeflow.org",
        kind,
        (version,),
        f"{kind.lower()}s",
        (_t(f"spec.{replica_specs}{{}}.template"),),
        suspend="spec.runPolicy.suspend",
        pod_counts=(f"spec.{replica_specs}{{}}.replicas",),
    )


def _ray(kind: str, cluster: str, *extra: TemplatePath, suspend: str = "spec.suspend") -> Kind:
    prefix = f"spec.{cluster}." if cluster else "spec."
    return Kind(
        kind,
        "ray.io",
        kind,
        ("v1",),
        f"{kind.lower()}s",
        (
            _t(f"{prefix}headGroupSpec.template", "head"),
            _t(f"{prefix}workerGroupSpecs[groupName].template"),
            *extra,
        ),
        suspend=suspend,
        pod_counts=(f"{prefix}workerGroupSpecs[groupName].replicas",),
    )


KINDS: tuple[Kind, ...] = (
    Kind("Pod", "", "Pod", ("v1",), "pods", (_t(""),)),
    Kind(
        "Job",
        "batch",
        "Job",
        ("v1",),
        "jobs",
        (_t("spec.template"),),
        suspend="spec.suspend",
        pod_counts=("spec.parallelism",),
    ),
    Kind(
        "CronJob",
        "batch",
        "CronJob",
        ("v1",),
        "cronjobs",
        (_t("spec.jobTemplate.spec.template"),),
        queue_labels=("spec.jobTemplate.metadata",),
    ),
    Kind(
        "JobSet",
        "jobset.x-k8s.io",
        "JobSet",
        ("v1alpha2",),
        "jobsets",
        (_t("spec.replicatedJobs[name].template.spec.template"),),
        suspend="spec.suspend",
        pod_counts=(
            "spec.replicatedJobs[name].replicas",
            "spec.replicatedJobs[name].template.spec.parallelism",
        ),
    ),
    Kind(
        "VolcanoJob",
        "batch.volcano.sh",
        "Job",
        ("v1alpha1",),
        "jobs",
        (_t("spec.tasks[name].template"),),
    ),
    Kind(
        "Deployment",
        "apps",
        "Deployment",
        ("v1",),
        "deployments",
        (_t("spec.template"),),
        queue_labels=("metadata", "spec.template.metadata"),
    ),
    Kind("StatefulSet", "apps", "StatefulSet", ("v1",), "statefulsets", (_t("spec.template"),)),
    # Not a Kueue kind: its pods are (the pod integration), so the label goes on the template.
    Kind(
        "ReplicaSet",
        "apps",
        "ReplicaSet",
        ("v1",),
        "replicasets",
        (_t("spec.template"),),
        queue_labels=("metadata", "spec.template.metadata"),
    ),
    Kind(
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io",
        "LeaderWorkerSet",
        ("v1",),
        "leaderworkersets",
        (
            _t("spec.leaderWorkerTemplate.leaderTemplate", "leader"),
            _t("spec.leaderWorkerTemplate.workerTemplate", "worker"),
        ),
    ),
    _ray("RayJob", "rayClusterSpec", _t("spec.submitterPodTemplate", "submitter")),
    _ray("RayCluster", ""),
    _ray("RayService", "rayClusterConfig", suspend="spec.rayClusterConfig.suspend"),
    _kubeflow("PyTorchJob", "pytorchReplicaSpecs"),
    _kubeflow("TFJob", "tfReplicaSpecs"),
    _kubeflow("XGBoostJob", "xgbReplicaSpecs"),
    _kubeflow("PaddleJob", "paddleReplicaSpecs"),
    _kubeflow("JAXJob", "jaxReplicaSpecs"),
    _kubeflow("MPIJob", "mpiReplicaSpecs", "v2beta1"),
    # The trainer's pods are built from a runtime; the TrainJob itself holds only what each
    # node asks for. Its podTemplateOverrides / runtimePatches cannot carry resources.
    Kind(
        "TrainJob",
        "trainer.kubeflow.org",
        "TrainJob",
        ("v1alpha1",),
        "trainjobs",
        (TemplatePath("spec.trainer.resourcesPerNode", "trainer", "resources"),),
        runtime_ref="spec.runtimeRef",
        suspend="spec.suspend",
        pod_counts=("spec.trainer.numNodes",),
    ),
    # Spark's operator builds the driver's and the executors' pods from each role: its pod
    # template, its sidecars and init containers, and the GPUs of Spark's own container.
    Kind(
        "SparkApplication",
        "sparkoperator.k8s.io",
        "SparkApplication",
        ("v1beta2",),
        "sparkapplications",
        (
            TemplatePath("spec.driver", "driver", "spark-role"),
            TemplatePath("spec.executor", "executor", "spark-role"),
        ),
        suspend="spec.suspend",
        pod_counts=("spec.executor.instances",),
    ),
    Kind(
        "AppWrapper",
        "workload.codeflare.dev",
        "AppWrapper",
        ("v1beta2",),
        "appwrappers",
        (),
        components="spec.components",
        suspend="spec.suspend",
    ),
)

_BY_API_VERSION: dict[tuple[str, str], Kind] = {
    (api_version, k.kind): k for k in KINDS for api_version in k.api_versions
}
_BY_GROUP: dict[tuple[str, str], Kind] = {(k.group, k.kind): k for k in KINDS}
BY_ID: Mapping[str, Kind] = {k.id: k for k in KINDS}

# Objects owned by one of these were made from a template admission already judged at its
# owner (a Job of a CronJob or JobSet, a Pod of any of them, a LeaderWorkerSet's StatefulSets,
# the worker StatefulSets its leader Pod owns, an AppWrapper's components).
OWNER_KINDS: frozenset[tuple[str, str]] = frozenset(_BY_GROUP)


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def kind_of(obj: Mapping[str, Any]) -> Kind | None:
    """The row of the object's kind, None for kinds admission does not handle. Versions other
    than the registered ones are handled alike: templates move rarely between versions."""
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    found = _BY_API_VERSION.get((api_version, kind))
    if found is None and "/" in api_version:
        found = _BY_GROUP.get((group_of(api_version), kind))
    return found


def owned_by_handled_kind(obj: Mapping[str, Any]) -> bool:
    """Owned by an object of a handled kind (by one of `OWNER_KINDS`)."""
    metadata = obj.get("metadata")
    owners = metadata.get("ownerReferences") if isinstance(metadata, dict) else None
    if not isinstance(owners, list):
        return False
    for owner in owners:
        if not isinstance(owner, dict):
            continue
        kind, api_version = owner.get("kind"), owner.get("apiVersion")
        if (
            isinstance(kind, str)
            and isinstance(api_version, str)
            and (group_of(api_version), kind) in OWNER_KINDS
        ):
            return True
    return False


def walk(
    node: object, steps: tuple[Step, ...], pointer: str = ""
) -> Iterator[tuple[str, Any, str | None]]:
    """(JSON Pointer, value, name) of every value at `steps` below `node`; entries that are not
    maps, and missing fields, are skipped (shape checks report them, see admission.shape)."""
    if not steps:
        yield pointer, node, None
        return
    step, rest = steps[0], steps[1:]
    value = node.get(step.field) if isinstance(node, dict) else None
    here = f"{pointer}/{step.field}"
    if step.kind == "field":
        if value is not None:
            yield from walk(value, rest, here)
    elif step.kind == "list":
        yield from _walk_list(value, step, rest, here)
    elif isinstance(value, dict):
        for key, item in value.items():
            for found_pointer, found, inner in walk(item, rest, f"{here}/{_escape(key)}"):
                yield found_pointer, found, inner or key


def _walk_list(
    value: object, step: Step, rest: tuple[Step, ...], here: str
) -> Iterator[tuple[str, Any, str | None]]:
    for index, item in enumerate(value if isinstance(value, list) else ()):
        if not isinstance(item, dict):
            continue
        name = item.get(step.name_field)
        label = name if isinstance(name, str) and name else f"{step.field}[{index}]"
        for found_pointer, found, inner in walk(item, rest, f"{here}/{index}"):
            yield found_pointer, found, inner or label


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def appwrapper_path(path: object) -> tuple[str, ...] | None:
    """An AppWrapper podSets path (`template.spec.replicatedJobs[0].template.spec.template`,
    relative to its component) as pointer parts, None when it is not one."""
    if not isinstance(path, str) or not (path == "template" or path.startswith("template.")):
        return None
    parts: list[str] = []
    for part in path.split("."):
        match = re.fullmatch(r"([^.\[\]]+)((?:\[\d+\])*)", part)
        if match is None:
            return None
        parts.append(match[1])
        parts.extend(re.findall(r"\[(\d+)\]", match[2]))
    return tuple(parts)
