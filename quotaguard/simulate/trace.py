"""Workload traces for `quotaguard simulate`: the cluster and what arrives when.

```yaml
horizon: 24h                  # optional: how long to simulate (default: until the last
                              # arrival plus the longest run time)
nodes:                        # or: snapshot: cluster.json (a kubectl `v1 List`, as for plan)
  - {name: gpu-1, allocatable: {nvidia.com/gpu: "8"}, labels: {...}}
  - name: mig                   # `count` nodes mig-001, mig-002, ... alike
    count: 2
    gpus: 4                     # physical GPUs; what they offer follows from the labels:
    labels:
      nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
      nvidia.com/mig.config: mixed-1g-3g          # a config of migConfig, or built in
  - {name: ts, gpus: 4, labels: {nvidia.com/device-plugin.config: time-sliced-4, ...}}
migConfig:                      # optional: a mig-parted config (version: v1, mig-configs)
  version: v1
  mig-configs: {mixed-1g-3g: [{devices: [0, 1], mig-enabled: true, mig-devices: {1g.10gb: 7}},
                              {devices: [2, 3], mig-enabled: true, mig-devices: {3g.40gb: 2}}]}
devicePluginConfigs:            # optional: NVIDIA device plugin configs by name
  time-sliced-4: {version: v1, sharing: {timeSlicing: {renameByDefault: true,
                  resources: [{name: nvidia.com/gpu, replicas: 4}]}}}
workloads:
  - {at: 0, duration: 3600, namespace: research, count: 4, every: 60, pod: {...}}
  - {at: 60, duration: 600, namespace: research, priority: 100, pod: {...}}
  - {at: 0, duration: 8h, namespace: research, checkpointEvery: 30m, pod: {...}}
  - {at: 0, duration: 1h, namespace: serving, uses: 0.2, pod: {...}}
```

A node with `gpus` offers what its GPUs become: whole `nvidia.com/gpu`, the MIG instances of
the layout its `nvidia.com/mig.config` label names (resolved through `migConfig`, else the
built-in configs of `quotaguard.policy.migconfig` for the GPU model its
`nvidia.com/gpu.product` label names), and, when its `nvidia.com/device-plugin.config` label
names a time-slicing config, `replicas` units per GPU (renamed `<resource>.shared` with
`renameByDefault`). A node without `gpus` offers its `allocatable` as written (older traces).

`uses` is the share of what the workload asks for *as written* (whole GPUs) that it keeps
busy, as DCGM would show (default 1): an arm that gives it a smaller slice keeps the same
work busy on less.

`priority` is the workload's priority as Kueue sees it (a WorkloadPriorityClass or the pod's
PriorityClass value; default 0): it orders a queue and decides who may preempt whom.
`checkpointEvery` says the job saves its progress that often: evicted by preemption, it
resumes from its last checkpoint and loses only the work since. Without it an evicted job
starts over.

`dra: true` and `draObjects` (the claims' templates and DeviceClasses): see `trace_dra`.

`clusters` (a MultiKueue fleet's workers, instead of `nodes`) and a workload's `cluster`: see
`fleet_trace`.

Times are seconds or Go-style durations (`90s`, `2h`). Every problem of a trace is reported at
once as FILE:LINE:COLUMN. The common case (a valid trace) is read with the fast C YAML loader;
only when something is wrong is the file read again with line numbers to place the problems.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quotaguard.kube.documents import TRACE as TRACE_LIMITS
from quotaguard.kube.documents import (
    DocumentError,
    load_json,
    load_yaml,
    read_error,
    read_input,
    source_name,
)
from quotaguard.kube.dra import NO_DRA_OBJECTS, DraObjects
from quotaguard.kube.quantity import QuantityError, parse_quantity
from quotaguard.policy.migconfig import MigConfig, parse_mig_configs
from quotaguard.policy.problems import Path as FieldPath
from quotaguard.policy.problems import format_path
from quotaguard.quota.cluster import Node, Pod, SnapshotError, load_snapshot
from quotaguard.simulate.devices import DeviceError, TimeSlicing, node_offer, parse_plugin_configs
from quotaguard.simulate.fleet_trace import (
    TraceCluster,
    check_workload_clusters,
    fleet_nodes,
    read_clusters,
)
from quotaguard.simulate.trace_checker import TraceChecker
from quotaguard.simulate.trace_dra import read_dra_flag, read_dra_objects

TOP_FIELDS = frozenset(
    {
        "horizon",
        "nodes",
        "snapshot",
        "workloads",
        "description",
        "manifests",
        "migConfig",
        "devicePluginConfigs",
        "draObjects",
        "clusters",
    }
)
NODE_FIELDS = frozenset(
    {"name", "allocatable", "labels", "taints", "ready", "unschedulable", "gpus", "count"}
)
WORKLOAD_FIELDS = frozenset(
    {
        "at",
        "duration",
        "namespace",
        "count",
        "every",
        "pod",
        "name",
        "priority",
        "checkpointEvery",
        "uses",
        "dra",
        "cluster",
    }
)
MAX_NODES = 100_000
MAX_GPUS_PER_NODE = 64
MAX_REPLICAS = 64
MAX_COUNT = 1_000_000  # workloads of one entry; a trace is replayed in memory
PRIORITY_RANGE = (-(2**31), 2**31 - 1)  # Kueue priorities are int32


class TraceInvalid(Exception):
    """A trace that cannot be simulated; each line of str() is FILE:LINE:COLUMN: problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True, slots=True)
class TraceWorkload:
    """One entry of `workloads`: `count` identical workloads, `every` seconds apart."""

    index: int  # position in the trace's workloads list, for messages
    at: float
    duration: float
    namespace: str
    count: int
    every: float
    manifest: Mapping[str, Any]
    name: str | None = None
    priority: int = 0
    checkpoint_every: float | None = None  # seconds; None: an evicted run starts over
    uses: float = 1.0  # share of the GPUs asked for as written that it keeps busy
    dra: bool = False  # `dra: true`: its GPUs come through DRA (see trace_dra)
    cluster: str | None = None  # a fleet trace's worker it is created on (None: the manager)

    def arrival_times(self) -> Iterator[float]:
        for copy in range(self.count):
            yield self.at + copy * self.every


@dataclass(frozen=True, slots=True)
class Trace:
    source: str
    nodes: tuple[Node, ...]
    # pods of a snapshot that hold GPUs (those outside every tenant reduce what is distributable)
    pods: tuple[Pod, ...]
    workloads: tuple[TraceWorkload, ...]
    horizon: float | None = None
    description: str | None = None
    dra_objects: DraObjects = NO_DRA_OBJECTS  # what the workloads' claims name
    clusters: tuple[TraceCluster, ...] = ()  # a fleet's workers (fleet_trace); nodes: all theirs

    @property
    def size(self) -> int:
        """How many workloads arrive (copies counted)."""
        return sum(entry.count for entry in self.workloads)

    @property
    def end(self) -> float:
        """The simulated span: the horizon, else the last arrival plus the longest run time."""
        if self.horizon is not None:
            return self.horizon
        last = max((w.at + (w.count - 1) * w.every for w in self.workloads), default=0.0)
        longest = max((w.duration for w in self.workloads), default=0.0)
        return last + longest


@dataclass(frozen=True, slots=True)
class _Devices:
    """The trace's MIG and device plugin configs, to resolve nodes given by `gpus`."""

    mig: Mapping[str, MigConfig]
    plugin: Mapping[str, TimeSlicing]


def _allocatable(check: TraceChecker, node: Mapping[str, Any], path: FieldPath) -> dict[str, int]:
    allocatable: dict[str, int] = {}
    found = check.mapping(node.get("allocatable", {}), (*path, "allocatable"), "allocatable")
    for resource, amount in (found or {}).items():
        if "/" not in str(resource):
            continue  # cpu, memory, pods: not what the simulator schedules
        try:
            value = parse_quantity(amount)
        except QuantityError:
            value = None
        if value is None or value.denominator != 1 or value < 0:
            check.problem(
                (*path, "allocatable", str(resource)),
                f"must be a whole number of devices, not {amount!r}",
            )
            continue
        allocatable[str(resource)] = int(value)
    return allocatable


def _taints(check: TraceChecker, node: Mapping[str, Any], path: FieldPath) -> tuple[str, ...]:
    taints: list[str] = []
    raw_taints = node.get("taints", [])
    if not isinstance(raw_taints, list):
        check.problem((*path, "taints"), "must be a list of taint keys")
        raw_taints = []
    for position, taint in enumerate(raw_taints):
        key = taint.get("key") if isinstance(taint, Mapping) else taint
        if isinstance(key, str) and key:
            taints.append(key)
        else:
            check.problem((*path, "taints", position), "a taint is a key or {key: ...}")
    return tuple(taints)


def _flags(check: TraceChecker, node: Mapping[str, Any], path: FieldPath) -> dict[str, bool]:
    flags: dict[str, bool] = {}
    for flag, default in (("ready", True), ("unschedulable", False)):
        setting = node.get(flag, default)
        if not isinstance(setting, bool):
            check.problem((*path, flag), f"must be true or false, not {setting!r}")
            setting = default
        flags[flag] = setting
    return flags


def _gpu_offer(
    check: TraceChecker,
    node: Mapping[str, Any],
    path: FieldPath,
    labels: Mapping[str, str],
    allocatable: Mapping[str, int],
    devices: _Devices,
) -> dict[str, int]:
    """What a node given by `gpus` offers (its labels decide), or nothing."""
    gpus = node.get("gpus")
    if gpus is None:
        return {}
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= MAX_GPUS_PER_NODE:
        check.problem((*path, "gpus"), f"must be a whole number from 0 to {MAX_GPUS_PER_NODE}")
        return {}
    if any(resource.startswith("nvidia.com/") for resource in allocatable):
        check.problem(
            (*path, "allocatable"),
            "give gpus (and the layout labels) or nvidia.com allocatable, not both",
        )
        return {}
    try:
        return node_offer(gpus, labels, devices.mig, devices.plugin)
    except DeviceError as exc:
        check.problem((*path, "labels"), str(exc))
        return {}


def _node(check: TraceChecker, raw: object, index: int, devices: _Devices) -> list[Node]:
    path: FieldPath = ("nodes", index)
    node = check.mapping(raw, path, "a node")
    if node is None:
        return []
    check.unknown(node, NODE_FIELDS, path)
    name = node.get("name")
    if not isinstance(name, str) or not name:
        check.problem((*path, "name"), "a node needs a name")
        name = f"node-{index}"
    allocatable = _allocatable(check, node, path)
    taints = _taints(check, node, path)
    flags = _flags(check, node, path)
    labels = check.string_map(node.get("labels", {}), (*path, "labels"))
    allocatable.update(_gpu_offer(check, node, path, labels, allocatable, devices))
    count = node.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_NODES:
        check.problem((*path, "count"), f"must be a whole number from 1 to {MAX_NODES:,}")
        count = 1
    names = [name] if "count" not in node else [f"{name}-{n:03d}" for n in range(1, count + 1)]
    return [
        Node(
            name=each,
            ready=flags["ready"],
            unschedulable=flags["unschedulable"],
            taints=taints,
            labels=labels,
            allocatable=allocatable,
        )
        for each in names
    ]


def _devices(check: TraceChecker, top: Mapping[str, Any]) -> _Devices:
    mig: dict[str, MigConfig] = {}
    if top.get("migConfig") is not None:
        mig, problems = parse_mig_configs(top["migConfig"], ("migConfig",))
        for problem in problems:
            check.problem(tuple(problem.path), problem.message)
    plugin: dict[str, TimeSlicing] = {}
    if top.get("devicePluginConfigs") is not None:
        plugin, found = parse_plugin_configs(top["devicePluginConfigs"])
        for where, message in found:
            check.problem(("devicePluginConfigs", *where), message)
    return _Devices(mig, plugin)


def _share(check: TraceChecker, value: object, path: FieldPath) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        check.problem(path, f"must be a share from 0 to 1, not {value!r}")
        return 1.0
    return float(value)


def _check_workload_fields(check: TraceChecker, entry: Mapping[str, Any], path: FieldPath) -> None:
    """namespace, count, pod, name and priority of a workload, in that order."""
    namespace = entry.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        check.problem((*path, "namespace"), "a workload needs a namespace")
    count = entry.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        check.problem(
            (*path, "count"), f"must be a whole number from 1 to {MAX_COUNT:,}, not {count!r}"
        )
    manifest = entry.get("pod")
    if manifest is None:
        check.problem((*path, "pod"), "a workload needs a pod manifest")
    elif check.mapping(manifest, (*path, "pod"), "pod") is not None:
        spec = manifest.get("spec")
        if not isinstance(spec, Mapping):
            check.problem((*path, "pod", "spec"), "the pod manifest needs a spec")
    name = entry.get("name")
    if name is not None and not isinstance(name, str):
        check.problem((*path, "name"), "must be a string")
    priority = entry.get("priority", 0)
    low, high = PRIORITY_RANGE
    if isinstance(priority, bool) or not isinstance(priority, int) or not low <= priority <= high:
        check.problem((*path, "priority"), f"must be a whole number (int32), not {priority!r}")


def _workload(check: TraceChecker, raw: object, index: int) -> TraceWorkload | None:
    path: FieldPath = ("workloads", index)
    entry = check.mapping(raw, path, "a workload")
    if entry is None:
        return None
    check.unknown(entry, WORKLOAD_FIELDS, path)
    before = len(check.problems)
    at = check.seconds(entry.get("at"), (*path, "at"), positive=False)
    duration = check.seconds(entry.get("duration"), (*path, "duration"), positive=True)
    every = check.seconds(entry.get("every"), (*path, "every"), positive=False, default=0.0)
    checkpoint_every = None
    if entry.get("checkpointEvery") is not None:
        checkpoint_every = check.seconds(
            entry.get("checkpointEvery"), (*path, "checkpointEvery"), positive=True
        )
    _check_workload_fields(check, entry, path)
    uses = _share(check, entry.get("uses", 1), (*path, "uses"))
    dra = read_dra_flag(entry, path, check.problem)
    if len(check.problems) > before:
        return None
    assert at is not None and duration is not None and every is not None
    manifest, priority, name = entry["pod"], entry.get("priority", 0), entry.get("name")
    return TraceWorkload(
        index=index,
        at=at,
        duration=duration,
        namespace=str(entry["namespace"]),
        count=int(entry.get("count", 1)),
        every=every,
        manifest=manifest,
        name=name,
        priority=priority,
        checkpoint_every=checkpoint_every,
        uses=uses,
        dra=dra,
        cluster=entry["cluster"] if isinstance(entry.get("cluster"), str) else None,
    )


def _cluster(
    check: TraceChecker,
    top: Mapping[str, Any],
    source: str,
    gpu_resources: frozenset[str],
    devices: _Devices | None = None,
) -> tuple[list[Node], tuple[Pod, ...]]:
    """The trace's nodes (and a snapshot's pods): listed in the trace or read from a snapshot
    file next to it, exactly one of the two."""
    has_nodes, snapshot = "nodes" in top, top.get("snapshot")
    if has_nodes and snapshot is not None:
        check.problem(("snapshot",), "give either nodes or snapshot, not both")
    elif not has_nodes and snapshot is None:
        check.problem((), "a trace needs nodes (a list) or snapshot (a file)")
    if has_nodes:
        return _listed_nodes(check, top, devices), ()
    if isinstance(snapshot, str) and snapshot:
        return _snapshot(check, Path(source).parent / snapshot, gpu_resources)
    if snapshot is not None:
        check.problem(("snapshot",), "must be the path of a snapshot file")
    return [], ()


def _listed_nodes(
    check: TraceChecker, top: Mapping[str, Any], devices: _Devices | None = None
) -> list[Node]:
    raw_nodes = top.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        check.problem(("nodes",), "must be a non-empty list of nodes")
        return []
    devices = devices or _devices(check, top)
    nodes: list[Node] = []
    for index, raw in enumerate(raw_nodes):
        nodes.extend(_node(check, raw, index, devices))
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            check.problem(("nodes",), f"node {node.name!r} appears twice")
        seen.add(node.name)
    return nodes


def _snapshot(
    check: TraceChecker, path: Path, gpu_resources: frozenset[str]
) -> tuple[list[Node], tuple[Pod, ...]]:
    """The nodes and pods of a snapshot file (the one read a trace parse makes)."""
    try:
        cluster = load_snapshot(path, gpu_resources=gpu_resources)
    except SnapshotError as exc:
        check.problem(("snapshot",), str(exc))
        return [], ()
    return list(cluster.nodes), cluster.pods


def _workloads(check: TraceChecker, raw_workloads: object) -> list[TraceWorkload]:
    if not isinstance(raw_workloads, list) or not raw_workloads:
        check.problem(("workloads",), "must be a non-empty list of workloads")
        return []
    workloads = []
    for index, raw in enumerate(raw_workloads):
        found = _workload(check, raw, index)
        if found is not None:
            workloads.append(found)
    return workloads


def parse_trace(
    document: object,
    source: str,
    *,
    gpu_resources: frozenset[str] = frozenset(),
) -> tuple[Trace | None, list[tuple[FieldPath, str, bool]]]:
    """The trace of a plain document, and every (field path, message, at key) problem."""
    check = TraceChecker()
    top = check.mapping(document, (), "a trace")
    if top is None:
        return None, check.problems
    check.unknown(top, TOP_FIELDS, ())
    horizon = None
    if top.get("horizon") is not None:
        horizon = check.seconds(top.get("horizon"), ("horizon",), positive=True)
    clusters: tuple[TraceCluster, ...] = ()
    if "clusters" in top:
        devices = _devices(check, top)
        clusters = read_clusters(
            check, top, lambda entry, own: _cluster(own, entry, source, gpu_resources, devices)
        )
        nodes, pods = fleet_nodes(clusters)
    else:
        listed, pods = _cluster(check, top, source, gpu_resources)
        nodes = tuple(listed)
    workloads = _workloads(check, top.get("workloads"))
    check_workload_clusters(check, top.get("workloads"), clusters)
    claimed = read_dra_objects(top, check.problem)
    description = top.get("description")
    if check.problems:
        return None, check.problems
    trace = Trace(
        source=source,
        nodes=nodes,
        pods=pods,
        workloads=tuple(workloads),
        horizon=horizon,
        description=description if isinstance(description, str) else None,
        dra_objects=claimed,
        clusters=clusters,
    )
    return trace, []


def _fast_load(text: str, source: str) -> object:
    """The trace document, read within the trace reader's bounds (`DocumentError` past them)."""
    if source.endswith(".json"):
        return load_json(text, source, TRACE_LIMITS)
    documents = load_yaml(text, source, TRACE_LIMITS)
    if len(documents) > 1:
        raise DocumentError(source, 1, 1, f"{len(documents)} YAML documents; a trace is one")
    return documents[0] if documents else None


def _with_lines(text: str) -> object:
    """The document read again, keeping the line and column of every node (slow; errors only)."""
    from quotaguard.policy.loader import yaml_documents

    try:
        roots = yaml_documents(text, "", TRACE_LIMITS)
    except Exception:  # placing a problem must never hide it
        return None
    return roots[0] if roots else None


def load_trace_text(
    text: str, source: str = "<trace>", *, gpu_resources: frozenset[str] = frozenset()
) -> Trace:
    """A trace from YAML or JSON text; `TraceInvalid` with every located problem otherwise."""
    try:
        document = _fast_load(text, source)
    except DocumentError as exc:
        raise TraceInvalid([str(exc)]) from exc
    if isinstance(document, Mapping) and isinstance(document.get("kind"), str):
        # a Kubernetes object (the policy given as --trace, a manifest): say what was meant
        found = f"{document['kind']} ({document.get('apiVersion')})"
        raise TraceInvalid(
            [f"{source}: expected a trace (workloads, and nodes or a snapshot); found {found}"]
        )
    trace, problems = parse_trace(document, source, gpu_resources=gpu_resources)
    if trace is not None:
        return trace
    from quotaguard.policy.loader import position

    root = _with_lines(text)
    located = []
    for path, message, at_key in problems:
        line, column = position(root, path, at_key=at_key)
        field = format_path(path)
        located.append(f"{source}:{line}:{column}: {field + ': ' if field else ''}{message}")
    raise TraceInvalid(located)


def load_trace(path: str | Path, *, gpu_resources: frozenset[str] = frozenset()) -> Trace:
    """Read a trace file (`-`: standard input); `TraceInvalid` (one line naming the file) when
    unreadable or wrong."""
    source = source_name(path)
    try:
        text = read_input(path, TRACE_LIMITS)
    except DocumentError as exc:
        raise TraceInvalid([str(exc)]) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceInvalid([f"{source}: cannot read: {read_error(exc)}"]) from exc
    return load_trace_text(text, source, gpu_resources=gpu_resources)
