"""A trace that names clusters: a MultiKueue fleet to replay (`simulate.fleet_replay`).

```yaml
clusters:                       # instead of top-level nodes or snapshot
  - name: east                  # a worker cluster (a DNS label; not `manager`)
    nodes: [...]                # as a trace's nodes (with the trace's migConfig)
  - name: west
    snapshot: west.json         # or a snapshot file next to the trace
    down: [{from: 6h, to: 8h}]  # optional: its API server does not answer then
workloads:
  - {at: 0, duration: 1h, namespace: research, pod: {...}}                 # to the manager
  - {at: 0, duration: 1h, namespace: research, cluster: east, pod: {...}}  # to east directly
```

A workload without `cluster` is submitted to the manager and dispatched by MultiKueue; one with
`cluster` is created on that worker. The single-cluster arms replay the fleet's nodes as one
cluster, each node named `<cluster>/<node>`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from quotaguard.quota.cluster import Node, Pod
from quotaguard.simulate.trace_checker import TraceChecker

CLUSTER_FIELDS = frozenset({"name", "nodes", "snapshot", "down"})
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MANAGER = "manager"  # where MultiKueue queues the workloads; no worker may be called so
MAX_CLUSTERS = 64

# A cluster entry read into its nodes and a snapshot's pods, its problems on the checker given
NodesOf = Callable[[Mapping[str, Any], TraceChecker], tuple[list[Node], tuple[Pod, ...]]]


@dataclass(frozen=True, slots=True)
class TraceCluster:
    """One worker cluster of a fleet trace."""

    name: str
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...] = ()
    down: tuple[tuple[float, float], ...] = ()  # [from, to) windows its API server is down

    def answers(self, now: float) -> bool:
        """Whether its API server answers at `now` (MultiKueue can dispatch to it, the fleet
        controller can read and write it)."""
        return not any(start <= now < end for start, end in self.down)


def _name(check: TraceChecker, entry: Mapping[str, Any], path: tuple[Any, ...]) -> str | None:
    name = entry.get("name")
    if not isinstance(name, str) or not DNS_LABEL.match(name) or len(name) > 63:
        check.problem((*path, "name"), f"a cluster needs a name (a DNS label), not {name!r}")
        return None
    if name == MANAGER:
        check.problem((*path, "name"), "`manager` is the cluster workloads without one go to")
        return None
    return name


def _down(check: TraceChecker, raw: object, path: tuple[Any, ...]) -> list[tuple[float, float]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        check.problem(path, "must be a list of {from, to} windows")
        return []
    windows = []
    for index, window in enumerate(raw):
        where = (*path, index)
        found = check.mapping(window, where, "a window")
        if found is None:
            continue
        check.unknown(found, frozenset({"from", "to"}), where)
        start = check.seconds(found.get("from"), (*where, "from"), positive=False)
        end = check.seconds(found.get("to"), (*where, "to"), positive=True)
        if start is not None and end is not None:
            if end <= start:
                check.problem((*where, "to"), "must be after from")
            else:
                windows.append((start, end))
    return windows


def _cluster(
    check: TraceChecker, raw: object, index: int, nodes_of: NodesOf
) -> TraceCluster | None:
    path = ("clusters", index)
    entry = check.mapping(raw, path, "a cluster")
    if entry is None:
        return None
    check.unknown(entry, CLUSTER_FIELDS, path)
    name = _name(check, entry, path)
    down = _down(check, entry.get("down"), (*path, "down"))
    if "nodes" not in entry and "snapshot" not in entry:
        check.problem(path, "a cluster needs nodes (a list) or snapshot (a file)")
        return None
    own = TraceChecker()
    nodes, pods = nodes_of(entry, own)
    for where, message, at_key in own.problems:
        check.problem((*path, *where), message, at_key=at_key)
    if name is None or own.problems:
        return None
    return TraceCluster(name, tuple(nodes), pods, tuple(down))


def read_clusters(
    check: TraceChecker, top: Mapping[str, Any], nodes_of: NodesOf
) -> tuple[TraceCluster, ...]:
    """The trace's `clusters`, every problem located on the checker."""
    raw = top.get("clusters")
    for other in ("nodes", "snapshot"):
        if other in top:
            check.problem((other,), "give either clusters or nodes/snapshot, not both", at_key=True)
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_CLUSTERS:
        check.problem(("clusters",), f"must be a list of 1 to {MAX_CLUSTERS} clusters")
        return ()
    clusters: list[TraceCluster] = []
    seen: set[str] = set()
    for index, entry in enumerate(raw):
        found = _cluster(check, entry, index, nodes_of)
        if found is None:
            continue
        if found.name in seen:
            check.problem(("clusters", index, "name"), f"cluster {found.name!r} appears twice")
            continue
        seen.add(found.name)
        clusters.append(found)
    return tuple(clusters)


def check_workload_clusters(
    check: TraceChecker, raw_workloads: object, clusters: Sequence[TraceCluster]
) -> None:
    """Each workload's `cluster` names one of the trace's clusters."""
    if not isinstance(raw_workloads, list):
        return
    names = [cluster.name for cluster in clusters]
    for index, entry in enumerate(raw_workloads):
        if not isinstance(entry, Mapping) or "cluster" not in entry:
            continue
        named = entry["cluster"]
        path = ("workloads", index, "cluster")
        if not names:
            check.problem(path, "the trace names no clusters (give `clusters` to replay a fleet)")
        elif named not in names:
            known = ", ".join(names)
            check.problem(path, f"unknown cluster {named!r}; the trace's clusters: {known}")


def fleet_nodes(clusters: Sequence[TraceCluster]) -> tuple[tuple[Node, ...], tuple[Pod, ...]]:
    """Every worker's nodes and pods as one cluster, named `<cluster>/<node>`."""
    nodes = tuple(
        replace(node, name=f"{cluster.name}/{node.name}")
        for cluster in clusters
        for node in cluster.nodes
    )
    pods = tuple(
        replace(pod, node_name=f"{cluster.name}/{pod.node_name}" if pod.node_name else None)
        for cluster in clusters
        for pod in cluster.pods
    )
    return nodes, pods
