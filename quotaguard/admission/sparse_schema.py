"""The object part of the sparse decoding schema, built from the kind table.

Every kind's template paths (and queue-label places) are merged into one tree of field names
from the object's root: `spec` holds a Pod's pod-spec fields and a Job's `template`, a JobSet's
`replicatedJobs`, a LeaderWorkerSet's `leaderWorkerTemplate`, a PyTorchJob's
`pytorchReplicaSpecs` and so on side by side, since no two kinds of the table give one field
two different shapes (a kind that did would fail here, at import). The tree becomes msgspec
Structs: a list step is a list of entries that keep their name field, a map step a map of
entries, a pod template its metadata and the pod-spec fields admission reads. Adding a row to
the table adds its paths here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union

import msgspec
from msgspec import UNSET, UnsetType

from quotaguard.kube.kinds import KINDS, Step, parse_path

Holder = Literal["field", "list", "map"]
# Leaves the engine reads outside any template: a Volcano Job's queue, an AppWrapper's
# components (any kind inside, found by their podSets paths: decoded whole).
_ANY_LEAVES = ("apiVersion", "kind", "spec.queue")


@dataclass
class _Node:
    holder: Holder = "field"
    name_field: str = ""
    children: dict[str, _Node] = field(default_factory=dict)
    leaf: str = ""  # "metadata", "resources" or "any"
    pod_spec: bool = False


def _descend(node: _Node, steps: tuple[Step, ...]) -> _Node:
    for step in steps:
        child = node.children.setdefault(step.field, _Node(step.kind, step.name_field))
        if (child.holder, child.name_field) != (step.kind, step.name_field):
            raise ValueError(f"two kinds give field {step.field!r} two shapes")
        node = child
    return node


def _mark(node: _Node, leaf: str) -> None:
    if node.leaf and node.leaf != leaf:
        raise ValueError(f"a field is both {node.leaf} and {leaf}")
    node.leaf = leaf


def schema_tree() -> _Node:
    """Every path the engine reads, over every kind of the table."""
    root = _Node()
    _mark(_descend(root, parse_path("metadata")), "metadata")
    for path in _ANY_LEAVES:
        _mark(_descend(root, parse_path(path)), "any")
    for kind in KINDS:
        if kind.components is not None:
            _mark(_descend(root, parse_path(kind.components)), "any")
        if kind.runtime_ref is not None:  # a TrainJob's runtime: see admission.runtimes
            _mark(_descend(root, parse_path(kind.runtime_ref)), "any")
        for path in (kind.suspend, *kind.pod_counts) if kind.suspend else ():
            _mark(_descend(root, parse_path(path)), "any")  # Kueue's hold: admission.holds
        for place in kind.templates:
            node = _descend(root, place.steps)
            if place.form == "resources":
                _mark(node, "resources")
                continue
            if place.form == "spark-role":  # its own pod-spec fields, then its template
                node.pod_spec = True
                for field in ("sidecars", "gpu", "labels", "annotations"):
                    _mark(_descend(node, parse_path(field)), "any")
                node = _descend(node, parse_path("template"))
            _mark(_descend(node, parse_path("metadata")), "metadata")
            _descend(node, parse_path("spec")).pod_spec = True
        for path in kind.queue_labels:
            _mark(_descend(root, parse_path(path)), "metadata")
    return root


def object_schema(metadata: type, pod_spec: type, resources: type) -> Any:
    """The Struct type of an object of any kind of the table."""
    leaves = {"metadata": metadata, "resources": resources, "any": Any}
    pod_spec_fields = [(info.name, info.type, UNSET) for info in msgspec.structs.fields(pod_spec)]
    return _struct(schema_tree(), "Object", leaves, pod_spec_fields)


def _struct(
    node: _Node, name: str, leaves: dict[str, Any], pod_spec_fields: list[tuple[str, Any, Any]]
) -> Any:
    if node.leaf:
        if node.children or node.pod_spec:
            raise ValueError(f"{name} is both a {node.leaf} and a struct")
        return leaves[node.leaf]
    fields: list[tuple[str, Any, Any]] = list(pod_spec_fields) if node.pod_spec else []
    taken = {f[0] for f in fields}
    for child_name, child in node.children.items():
        if child_name in taken:
            raise ValueError(f"field {child_name!r} of {name} is also a pod-spec field")
        inner = _struct(child, f"{name}_{child_name}", leaves, pod_spec_fields)
        if child.holder == "list":
            inner = list[inner]  # type: ignore[valid-type]
        elif child.holder == "map":
            inner = dict[str, inner]  # type: ignore[valid-type]
        fields.append((child_name, Union[inner, UnsetType, None], UNSET))  # noqa: UP007
    if node.name_field and node.name_field not in taken | set(node.children):
        fields.append((node.name_field, Any, UNSET))
    return msgspec.defstruct(name, fields, omit_defaults=True)
