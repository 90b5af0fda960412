"""The few fields of Kubernetes objects the quota planner reads, parsed from plain dicts.

Input is what `kubectl get nodes,pods,clusterqueues,workloads -A -o json` prints (a `v1 List`),
or the same objects from watch caches. Objects are parsed into small frozen values; the
Kubernetes client's models are not used (building them is slow and they drop unknown CRDs).

Odd or missing fields never raise: a field that cannot be read takes its neutral value and the
object is named in `ClusterSnapshot.problems`. Only input that is not a list of objects at all
raises `SnapshotError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quotaguard.kube.dra import PodClaim, is_dra_kind, pod_claims
from quotaguard.kube.names import (
    KUEUE_CONFIG_KEY,
    KUEUE_CONFIGMAP,
    KUEUE_GROUP,
    KUEUE_QUEUE_LABEL,
    MIG_PARTED_CONFIG_KEY,
    MIG_PARTED_CONFIGMAP,
    VOLCANO_GROUP,
)
from quotaguard.kube.podspec import is_gpu_resource, pod_gpus
from quotaguard.kube.quantity import QuantityError, parse_gpu_count, parse_quantity
from quotaguard.kube.values import mapping as _map
from quotaguard.kube.values import unix_seconds

VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
OWN_ANNOTATIONS = "quotaguard.dev/"  # the only node annotations read (the layout progress)


class SnapshotError(ValueError):
    """The input is not a Kubernetes object list; str() is one line naming the file."""


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    ready: bool
    unschedulable: bool
    taints: tuple[str, ...]
    labels: Mapping[str, str]
    # Extended resources only (names with a slash): GPUs, MIG slices, shared GPUs.
    allocatable: Mapping[str, int]
    annotations: Mapping[str, str] = field(default_factory=dict)  # quotaguard.dev/ ones only
    # Condition types other than Ready whose status is True (e.g. a node-problem-detector's)
    conditions: frozenset[str] = frozenset()
    # Condition types other than Ready not True now -> when they last changed (Unix seconds,
    # lastTransitionTime): a GPU-health condition that cleared is still within its quiet period
    cleared_at: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    phase: str
    node_name: str | None
    queue_name: str | None
    pod_group: str | None
    owner: str | None
    node_selector: Mapping[str, str]
    gpus: Mapping[str, int]
    claims: tuple[PodClaim, ...] = ()  # DRA: quotaguard.quota.drademand counts them

    @property
    def active(self) -> bool:
        """Holds or waits for GPUs: neither succeeded nor failed."""
        return self.phase not in TERMINATED_PHASES

    @property
    def bound(self) -> bool:
        return self.active and self.node_name is not None


@dataclass(frozen=True, slots=True)
class PodSet:
    name: str
    count: int
    per_pod: Mapping[str, int]
    node_selector: Mapping[str, str]
    # the DRA claims of its pod template (quotaguard.quota.drademand counts them)
    claims: tuple[PodClaim, ...] = ()


@dataclass(frozen=True, slots=True)
class PodSetAssignment:
    name: str
    # resource -> ResourceFlavor name
    flavors: Mapping[str, str]
    # resource -> total amount admitted for the pod set
    usage: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Workload:
    namespace: str
    name: str
    queue_name: str | None
    cluster_queue: str | None
    pod_sets: tuple[PodSet, ...]
    assignments: tuple[PodSetAssignment, ...]
    quota_reserved: bool
    admitted: bool
    finished: bool

    @property
    def holds_quota(self) -> bool:
        return (self.quota_reserved or self.admitted) and not self.finished


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    name: str
    api_version: str
    cohort: str | None
    fair_weight: float | None
    # (flavor, resource) -> quota, over every resource group
    quotas: Mapping[tuple[str, str], ResourceQuota]
    # the object's spec as read, so a writer can keep what it does not manage
    spec: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PodGroup:
    namespace: str
    name: str
    queue: str | None
    min_resources: Mapping[str, int]
    phase: str


@dataclass(frozen=True, slots=True)
class VolcanoQueue:
    name: str
    weight: float | None
    capability: Mapping[str, int]
    guarantee: Mapping[str, int]
    deserved: Mapping[str, int]
    spec: Mapping[str, Any]
    parent: str | None = None  # spec.parent: the hierarchical queue above this one


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    nodes: tuple[Node, ...] = ()
    pods: tuple[Pod, ...] = ()
    workloads: tuple[Workload, ...] = ()
    cluster_queues: tuple[ClusterQueue, ...] = ()
    pod_groups: tuple[PodGroup, ...] = ()
    volcano_queues: tuple[VolcanoQueue, ...] = ()
    # namespace -> the `config.yaml` of a GPU operator's default-mig-parted-config ConfigMap
    mig_parted_configs: Mapping[str, str] = field(default_factory=dict)
    # namespace -> Kueue's Configuration text (ConfigMap kueue-manager-config): its
    # deviceClassMappings name the resources DRA classes are counted under
    kueue_configs: Mapping[str, str] = field(default_factory=dict)
    # one line per object that could not be read completely
    problems: tuple[str, ...] = field(default=())
    # ResourceSlices, DeviceClasses, ResourceClaims and ResourceClaimTemplates as they came
    # (quotaguard.quota.dracapacity reads them)
    dra_objects: tuple[Mapping[str, Any], ...] = ()


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _labels(value: object) -> dict[str, str]:
    return {k: v for k, v in _map(value).items() if isinstance(k, str) and isinstance(v, str)}


@dataclass(frozen=True)
class _MigPartedConfig:
    namespace: str
    text: str


@dataclass(frozen=True)
class _KueueConfig:
    namespace: str
    text: str


class _Reader:
    """Parses objects one by one and collects what it could not read."""

    def __init__(self, gpu_resources: frozenset[str]) -> None:
        self.gpu_resources = gpu_resources
        self.problems: list[str] = []
        self._where = ""

    def problem(self, message: str) -> None:
        self.problems.append(f"{self._where}: {message}")

    def counts(self, value: object, what: str, *, only_gpus: bool = False) -> dict[str, int]:
        """Whole amounts of extended resources in a resource list (cpu/memory are skipped)."""
        found: dict[str, int] = {}
        for name, amount in _map(value).items():
            if not isinstance(name, str) or "/" not in name:
                continue
            if only_gpus and not self._gpu(name):
                continue
            try:
                found[name] = int(parse_quantity(amount))
            except QuantityError:
                self.problem(f"{what}[{name}] is not a quantity: {amount!r}")
        return found

    def _gpu(self, resource: str) -> bool:
        return is_gpu_resource(resource, self.gpu_resources)

    def read(self, item: Mapping[str, Any]) -> object | None:
        kind = item.get("kind")
        api_version = item.get("apiVersion")
        name, namespace = self._identify(kind, _map(item.get("metadata")))
        if name is None:
            self.problem("metadata.name missing; object skipped")
            return None
        if kind == "Node":
            return self.node(item, name)
        if kind == "Pod":
            return self.pod(item, name, namespace)
        if kind == "ConfigMap" and name == MIG_PARTED_CONFIGMAP:
            return self.mig_parted_config(item, namespace)
        if kind == "ConfigMap" and name == KUEUE_CONFIGMAP:
            text = _map(item.get("data")).get(KUEUE_CONFIG_KEY)
            return _KueueConfig(namespace, text) if isinstance(text, str) else None
        if isinstance(api_version, str):
            return self._queueing(item, kind, api_version, name, namespace)
        return None

    def _queueing(
        self, item: Mapping[str, Any], kind: object, api_version: str, name: str, namespace: str
    ) -> object | None:
        """An object of Kueue's or Volcano's API groups (their queues and workloads)."""
        group = api_version.split("/")[0]
        if group == KUEUE_GROUP:
            if kind == "Workload":
                return self.workload(item, name, namespace)
            if kind == "ClusterQueue":
                return self.cluster_queue(item, name, api_version)
        elif group == VOLCANO_GROUP:
            if kind == "PodGroup":
                return self.pod_group(item, name, namespace)
            if kind == "Queue":
                return self.volcano_queue(item, name)
        return None

    def mig_parted_config(self, item: Mapping[str, Any], namespace: str) -> _MigPartedConfig | None:
        text = _map(item.get("data")).get(MIG_PARTED_CONFIG_KEY)
        if not isinstance(text, str):
            self.problem(f"data.{MIG_PARTED_CONFIG_KEY} missing; ConfigMap skipped")
            return None
        return _MigPartedConfig(namespace, text)

    def _identify(self, kind: object, metadata: Mapping[str, Any]) -> tuple[str | None, str]:
        """The object's name and namespace ("default" when unset); problems name it from now."""
        name = _str(metadata.get("name"))
        namespace = _str(metadata.get("namespace"))
        self._where = f"{kind}/{namespace + '/' if namespace else ''}{name or '?'}"
        return name, namespace or "default"

    def node(self, item: Mapping[str, Any], name: str) -> Node:
        spec, status = _map(item.get("spec")), _map(item.get("status"))
        true_conditions = {
            kind
            for c in _list(status.get("conditions"))
            if _map(c).get("status") == "True" and isinstance(kind := _map(c).get("type"), str)
        }
        ready = "Ready" in true_conditions
        cleared_at = {
            kind: at
            for c in _list(status.get("conditions"))
            if isinstance(kind := _map(c).get("type"), str)
            and kind not in true_conditions
            and kind != "Ready"
            and (at := unix_seconds(_map(c).get("lastTransitionTime"))) is not None
        }
        taints = tuple(key for t in _list(spec.get("taints")) if (key := _str(_map(t).get("key"))))
        return Node(
            name=name,
            ready=ready,
            unschedulable=spec.get("unschedulable") is True,
            taints=taints,
            labels=_labels(_map(item.get("metadata")).get("labels")),
            allocatable=self.counts(status.get("allocatable"), "status.allocatable"),
            annotations={
                key: value
                for key, value in _labels(_map(item.get("metadata")).get("annotations")).items()
                if key.startswith(OWN_ANNOTATIONS)
            },
            conditions=frozenset(true_conditions - {"Ready"}),
            cleared_at=cleared_at,
        )

    def pod(self, item: Mapping[str, Any], name: str, namespace: str) -> Pod:
        metadata, spec = _map(item.get("metadata")), _map(item.get("spec"))
        labels = _labels(metadata.get("labels"))
        annotations = _labels(metadata.get("annotations"))
        owners = [_map(o) for o in _list(metadata.get("ownerReferences"))]
        owner = next(
            (f"{o.get('kind')}/{o.get('name')}" for o in owners if o.get("controller") is True),
            f"{owners[0].get('kind')}/{owners[0].get('name')}" if owners else None,
        )
        return Pod(
            namespace=namespace,
            name=name,
            phase=_str(_map(item.get("status")).get("phase")) or "Pending",
            node_name=_str(spec.get("nodeName")),
            queue_name=labels.get(KUEUE_QUEUE_LABEL),
            pod_group=annotations.get(VOLCANO_GROUP_ANNOTATION),
            owner=owner,
            node_selector=_labels(spec.get("nodeSelector")),
            gpus=pod_gpus(spec, self.gpu_resources),
            claims=pod_claims(spec),
        )

    def workload(self, item: Mapping[str, Any], name: str, namespace: str) -> Workload:
        spec, status = _map(item.get("spec")), _map(item.get("status"))
        pod_sets = []
        for index, raw in enumerate(_list(spec.get("podSets"))):
            pod_set = _map(raw)
            count = parse_gpu_count(pod_set.get("count", 1))
            if count is None:
                self.problem(f"spec.podSets[{index}].count is not a whole number")
                count = 0
            template_spec = _map(_map(pod_set.get("template")).get("spec"))
            pod_sets.append(
                PodSet(
                    name=_str(pod_set.get("name")) or "main",
                    count=count,
                    per_pod=pod_gpus(template_spec, self.gpu_resources),
                    node_selector=_labels(template_spec.get("nodeSelector")),
                    claims=pod_claims(template_spec),
                )
            )
        admission = _map(status.get("admission"))
        assignments = tuple(
            PodSetAssignment(
                name=_str(_map(a).get("name")) or "main",
                flavors=_labels(_map(a).get("flavors")),
                usage=self.counts(
                    _map(a).get("resourceUsage"),
                    "status.admission.resourceUsage",
                    only_gpus=True,
                ),
            )
            for a in _list(admission.get("podSetAssignments"))
        )
        conditions = {
            _map(c).get("type"): _map(c).get("status") == "True"
            for c in _list(status.get("conditions"))
        }
        return Workload(
            namespace=namespace,
            name=name,
            queue_name=_str(spec.get("queueName")),
            cluster_queue=_str(admission.get("clusterQueue")),
            pod_sets=tuple(pod_sets),
            assignments=assignments,
            quota_reserved=bool(conditions.get("QuotaReserved")),
            admitted=bool(conditions.get("Admitted")),
            finished=bool(conditions.get("Finished")),
        )

    def cluster_queue(self, item: Mapping[str, Any], name: str, api_version: str) -> ClusterQueue:
        spec = _map(item.get("spec"))
        quotas: dict[tuple[str, str], ResourceQuota] = {}
        for group_index, group in enumerate(_list(spec.get("resourceGroups"))):
            for flavor in _list(_map(group).get("flavors")):
                flavor_name = _str(_map(flavor).get("name"))
                for resource in _list(_map(flavor).get("resources")):
                    resource_name = _str(_map(resource).get("name"))
                    if flavor_name is None or resource_name is None:
                        self.problem(f"spec.resourceGroups[{group_index}]: unnamed flavor")
                        continue
                    quotas[(flavor_name, resource_name)] = self._quota(_map(resource))
        weight = _map(spec.get("fairSharing")).get("weight")
        # v1beta2 names the field cohortName; v1beta1 cohort.
        cohort = _str(spec.get("cohortName")) or _str(spec.get("cohort"))
        return ClusterQueue(
            name=name,
            api_version=api_version,
            cohort=cohort,
            fair_weight=self._number(weight, "spec.fairSharing.weight"),
            quotas=quotas,
            spec=spec,
        )

    def _quota(self, resource: Mapping[str, Any]) -> ResourceQuota:
        amounts: list[int | None] = []
        for key in ("nominalQuota", "borrowingLimit", "lendingLimit"):
            value = resource.get(key)
            number = None if value is None else self._number(value, key)
            amounts.append(None if number is None else int(number))
        return ResourceQuota(amounts[0] or 0, amounts[1], amounts[2])

    def _number(self, value: object, what: str) -> float | None:
        if value is None:
            return None
        try:
            return float(parse_quantity(value))
        except QuantityError:
            self.problem(f"{what} is not a quantity: {value!r}")
            return None

    def pod_group(self, item: Mapping[str, Any], name: str, namespace: str) -> PodGroup:
        spec = _map(item.get("spec"))
        return PodGroup(
            namespace=namespace,
            name=name,
            queue=_str(spec.get("queue")),
            min_resources=self.counts(spec.get("minResources"), "spec.minResources"),
            phase=_str(_map(item.get("status")).get("phase")) or "Pending",
        )

    def volcano_queue(self, item: Mapping[str, Any], name: str) -> VolcanoQueue:
        spec = _map(item.get("spec"))
        return VolcanoQueue(
            name=name,
            weight=self._number(spec.get("weight"), "spec.weight"),
            capability=self.counts(spec.get("capability"), "spec.capability"),
            guarantee=self.counts(
                _map(spec.get("guarantee")).get("resource"), "spec.guarantee.resource"
            ),
            deserved=self.counts(spec.get("deserved"), "spec.deserved"),
            spec=spec,
            parent=_str(spec.get("parent")),
        )


class ParsedObjects:
    """What `parse_objects` made of each object the last time, so that a caller parsing the
    same cache every interval re-reads only the objects that changed (at 50,000 pods and their
    Workloads, parsing everything was most of an interval's CPU). The objects must be replaced,
    never mutated, when they change (the controller's watch caches are): an object is known by
    its identity. Holds the last call's objects only."""

    def __init__(self) -> None:
        self._gpu_resources: frozenset[str] | None = None
        self._entries: dict[int, tuple[object, object | None, tuple[str, ...]]] = {}

    def reuse(
        self, gpu_resources: frozenset[str]
    ) -> dict[int, tuple[object, object | None, tuple[str, ...]]]:
        """The entries made with these `gpu_resources` (none after a change of them)."""
        if gpu_resources != self._gpu_resources:
            self._gpu_resources, self._entries = gpu_resources, {}
        return self._entries

    def keep(self, entries: dict[int, tuple[object, object | None, tuple[str, ...]]]) -> None:
        self._entries = entries


def parse_objects(
    items: Iterable[object],
    *,
    gpu_resources: frozenset[str] = frozenset(),
    memo: ParsedObjects | None = None,
) -> ClusterSnapshot:
    """Parse Kubernetes objects (plain dicts) of any kinds; others are ignored.

    `gpu_resources` names resources that count as GPUs besides `nvidia.com/gpu*` and
    `nvidia.com/mig-*` (pass `policy.gpu_resources`). Pods without GPUs are dropped. With
    `memo`, an object parsed by the previous call with it is not parsed again.
    """
    reader = _Reader(gpu_resources)
    found: dict[type, list[Any]] = {}
    known = memo.reuse(gpu_resources) if memo is not None else {}
    kept: dict[int, tuple[object, object | None, tuple[str, ...]]] = {}
    dra: list[Mapping[str, Any]] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            reader.problems.append(f"items[{index}]: not an object; skipped")
            continue
        if is_dra_kind(item):
            dra.append(item)
            continue
        entry = known.get(id(item))
        if entry is not None and entry[0] is item:
            parsed, problems = entry[1], entry[2]
            reader.problems.extend(problems)
        else:
            before = len(reader.problems)
            parsed = reader.read(item)
            problems = tuple(reader.problems[before:])
        if memo is not None:
            kept[id(item)] = (item, parsed, problems)
        if parsed is None or (isinstance(parsed, Pod) and not parsed.gpus and not parsed.claims):
            continue
        found.setdefault(type(parsed), []).append(parsed)
    if memo is not None:
        memo.keep(kept)
    return ClusterSnapshot(
        nodes=tuple(found.get(Node, ())),
        pods=tuple(found.get(Pod, ())),
        workloads=tuple(found.get(Workload, ())),
        cluster_queues=tuple(found.get(ClusterQueue, ())),
        pod_groups=tuple(found.get(PodGroup, ())),
        volcano_queues=tuple(found.get(VolcanoQueue, ())),
        mig_parted_configs={c.namespace: c.text for c in found.get(_MigPartedConfig, ())},
        kueue_configs={c.namespace: c.text for c in found.get(_KueueConfig, ())},
        problems=tuple(reader.problems),
        dra_objects=tuple(dra),
    )


def parse_snapshot(
    document: object, *, gpu_resources: frozenset[str] = frozenset(), source: str = "<snapshot>"
) -> ClusterSnapshot:
    """A `v1 List` (or any object with `items`, or one object) as a snapshot."""
    if isinstance(document, Mapping) and "items" in document:
        items = document["items"]
        if not isinstance(items, list):
            raise SnapshotError(f"{source}: 'items' is not a list")
        return parse_objects(items, gpu_resources=gpu_resources)
    if isinstance(document, Mapping) and "kind" in document:
        return parse_objects([document], gpu_resources=gpu_resources)
    if isinstance(document, list):
        return parse_objects(document, gpu_resources=gpu_resources)
    raise SnapshotError(
        f"{source}: not a Kubernetes object list "
        "(expected the output of kubectl get nodes,pods,clusterqueues,workloads -A -o json)"
    )


def load_snapshot(
    path: str | Path, *, gpu_resources: frozenset[str] = frozenset(), require_nodes: bool = True
) -> ClusterSnapshot:
    """Read a snapshot file (`-`: standard input), the JSON or the YAML of `kubectl get -o`;
    `SnapshotError` (one line naming the file) when unusable, which includes a file without
    Nodes: most likely the wrong file, and a plan or a simulation of no capacity would look
    plausible. A MultiKueue manager has no GPU nodes: `require_nodes=False` reads its
    snapshot."""
    from quotaguard.kube.documents import (
        SNAPSHOT,
        DocumentError,
        load_json,
        load_yaml,
        read_error,
        read_input,
        source_name,
    )

    source = source_name(path)
    try:
        text = read_input(path, SNAPSHOT)
        # kubectl's JSON is strict JSON (a typo in it is reported as JSON); its YAML never
        # starts with a bracket
        documents = (
            [load_json(text, source, SNAPSHOT)]
            if text.lstrip().startswith(("{", "["))
            else load_yaml(text, source, SNAPSHOT)
        )
    except DocumentError as exc:
        raise SnapshotError(str(exc)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{source}: cannot read: {read_error(exc)}") from exc
    document = documents[0] if len(documents) == 1 else [d for d in documents if d is not None]
    snapshot = parse_snapshot(document, gpu_resources=gpu_resources, source=source)
    if require_nodes and not snapshot.nodes:
        found = _kinds(document)
        raise SnapshotError(
            f"{source}: the snapshot holds no Node (expected a kubectl v1 List)"
            + (f"; found {found}" if found else "")
        )
    return snapshot


def _kinds(document: object) -> str:
    items = document.get("items") if isinstance(document, Mapping) else document
    objects = items if isinstance(items, list) else [document]
    kinds = [str(o.get("kind")) for o in objects if isinstance(o, Mapping) and o.get("kind")]
    return ", ".join(f"{kinds.count(kind)} {kind}" for kind in dict.fromkeys(kinds))
