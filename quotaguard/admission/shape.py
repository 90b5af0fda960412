"""The types of the workload fields admission reads, checked as it reads them.

The API server decodes every object into its Go types before a webhook sees it, so labels that
are a list, containers that are a map or limits that are a number cannot come from it: such an
object is a bad request (`ShapeError`, a `BadReview`: HTTP 400) naming the field, not something
to decide on. Checked are the maps and lists admission walks or writes a patch into, the names
it shows, and labels, annotations and nodeSelector as maps of strings. `null` is accepted
wherever it stands, as Go decodes it: as if the field were absent. GPU amounts are left to the
quantity parser, which refuses `true` or `[1]` as it refuses "lots": a denial that tells the
user what to write. Objects admission does not read (other kinds, exempt namespaces) are not
checked.

The walker of `workload.template_views` calls `check_object` for the skeleton (metadata, the pod
templates down to their nodeSelector) and checks the containers itself as it walks them, with
`wrong` and `pointer_where`: it reads every container for every request anyway. This runs on
every request, so no path is built unless a field is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any, NoReturn

from quotaguard.admission.reviews import BadReview
from quotaguard.kube.kinds import Kind, Step, kind_of, parse_path

# A field path as a chain of (parent, part) links, joined only to report an error.
Where = tuple["Where", str | int] | str

_STRING_MAPS = ("labels", "annotations")
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class ShapeError(BadReview):
    """A field has a type the API server could not have decoded. `path` names it, e.g.
    `request.object.spec.containers[0].resources` or `request.object.metadata.labels[app]`."""

    problem = "invalid object"

    def __init__(self, where: Where, expected: str, value: object) -> None:
        self.path = field_path(where)
        super().__init__(f"{self.path} must be {expected}, not {_described(value)}")


def field_path(where: Where) -> str:
    """`request.object.spec.containers[0].resources`, as Kubernetes names fields."""
    parts: list[str] = []
    while isinstance(where, tuple):
        where, part = where
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(part if part.startswith("[") else f".{part}")
    return where + "".join(reversed(parts))


def pointer_where(root: str, pointer: str, *fields: str) -> Where:
    """The field path of a JSON Pointer the walker built (`/spec/containers/0` -> `spec.
    containers[0]`), with `fields` below it."""
    where: Where = root
    for part in pointer.split("/")[1:]:
        where = (where, int(part) if part.isdigit() else part.replace("~1", "/").replace("~0", "~"))
    for field in fields:
        where = (where, field)
    return where


def _described(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    kinds = ((dict, "a map"), (list, "a list"), (str, "a string"), (int | float, "a number"))
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)


def wrong(where: Where, expected: str, value: object) -> NoReturn:
    raise ShapeError(where, expected, value)


def check_object(obj: Mapping[str, Any], root: str) -> None:
    """Raise `ShapeError` for the first field of the skeleton of an object of a handled kind
    whose type the API server could not have decoded (`root` names the object, e.g.
    `request.object`); other kinds pass unread."""
    check_kind_object(obj, kind_of(obj), root)


def check_kind_object(obj: Mapping[str, Any], kind: Kind | None, root: str) -> None:
    """`check_object` of an object whose kind is known (`kind_of(obj)`)."""
    if kind is None:
        return
    metadata = obj.get("metadata")
    if metadata is not None:
        _metadata(metadata, root)
    spec = obj.get("spec")
    if spec is None:
        return
    if not isinstance(spec, dict):
        wrong((root, "spec"), "a map", spec)
    if kind.id == "Pod":
        _pod_spec(spec, root, "spec")
        return
    _templates(obj, kind, root)
    _queue_label_places(obj, kind, root)
    if kind.components is not None:
        _components(obj, kind.components, root)


def _templates(obj: Mapping[str, Any], kind: Kind, root: str) -> None:
    for place in kind.templates:
        for where, value in _along(obj, place.steps, root):
            if place.form == "resources":
                _map(value, where)
            elif place.form == "spark-role":
                _spark_role(value, where)
            else:
                _pod_template(value, where)


def _spark_role(value: object, where: Where) -> None:
    """A SparkApplication's driver or executor: a pod template, container lists, the GPU
    map, and labels, annotations and nodeSelector of its own."""
    role = _map(value, where)
    template = role.get("template")
    if template is not None:
        _pod_template(template, (where, "template"))
    for field in ("sidecars", "initContainers"):
        _maps(role.get(field), (where, field))
    gpu = _map(role.get("gpu"), (where, "gpu"))
    _name(gpu, (where, "gpu"))
    for field in (*_STRING_MAPS, "nodeSelector"):
        values = role.get(field)
        if values is not None:
            _string_map(values, where, field)


def _queue_label_places(obj: Mapping[str, Any], kind: Kind, root: str) -> None:
    for path, steps in zip(kind.queue_labels, kind.queue_label_steps, strict=True):
        if path == "metadata":
            continue  # the object's, checked first
        for where, parent in _along(obj, steps[:-1], root):
            found = _map(parent, where).get("metadata")
            if found is not None:
                _metadata(found, where)


def _components(obj: Mapping[str, Any], path: str, root: str) -> None:
    """An AppWrapper's components: maps, whose templates are checked as objects of their own."""
    for where, components in _along(obj, parse_path(path), root):
        for item_where, item in _maps(components, where):
            template = _map(item.get("template"), (item_where, "template"))
            _maps(item.get("podSets"), (item_where, "podSets"))
            if template:
                check_object(template, field_path((item_where, "template")))


def _along(node: object, steps: tuple[Step, ...], where: Where) -> Iterator[tuple[Where, object]]:
    """Every value at `steps` below `node` with its path; a step through a value of the wrong
    type raises `ShapeError`, null is as if absent."""
    if not steps:
        yield where, node
        return
    step, rest = steps[0], steps[1:]
    fields = _map(node, where)
    value = fields.get(step.field)
    if value is None:
        return
    here: Where = (where, step.field)
    if step.kind == "field":
        yield from _along(value, rest, here)
    elif step.kind == "list":
        for item_where, item in _maps(value, here):
            if step.name_field:
                _name(item, item_where, step.name_field)
            yield from _along(item, rest, item_where)
    else:
        for key, item in _map(value, here).items():
            yield from _along(item, rest, (here, f"[{key}]"))


def _map(value: object, where: Where) -> Mapping[str, Any]:
    """`value` when it is a map, an empty map when it is null (as Go decodes it)."""
    if isinstance(value, dict):
        return value
    if value is None:
        return _EMPTY
    wrong(where, "a map", value)


def _maps(value: object, where: Where) -> list[tuple[Where, Mapping[str, Any]]]:
    """The entries of a list of maps with their paths (built here: such lists are short)."""
    if value is None:
        return []
    if not isinstance(value, list):
        wrong(where, "a list", value)
    return [((where, index), _map(item, (where, index))) for index, item in enumerate(value)]


def _name(fields: Mapping[str, Any], where: Where, field: str = "name") -> None:
    name = fields.get(field)
    if name is not None and not isinstance(name, str):
        wrong((where, field), "a string", name)


# The checks below run for every request: paths are built only on the way to an error, and
# the loops are inline rather than in helpers.


def _string_map(value: object, parent: Where, field: str) -> None:
    if not isinstance(value, dict):
        wrong((parent, field), "a map of strings", value)
    for item in value.values():
        if not isinstance(item, str) and item is not None:
            _odd_string(value, (parent, field))


def _odd_string(values: Mapping[str, Any], where: Where) -> NoReturn:
    for key, value in values.items():
        if not isinstance(value, str) and value is not None:
            wrong((where, f"[{key}]"), "a string", value)
    raise AssertionError("no value is odd")  # pragma: no cover - called for an odd value


def _metadata(metadata: object, parent: Where) -> None:
    if not isinstance(metadata, dict):
        wrong((parent, "metadata"), "a map", metadata)
    for field in _STRING_MAPS:
        values = metadata.get(field)
        if values is None:
            continue
        if not isinstance(values, dict):
            wrong(((parent, "metadata"), field), "a map of strings", values)
        for value in values.values():
            if not isinstance(value, str) and value is not None:
                _odd_string(values, ((parent, "metadata"), field))


def _pod_template(value: object, where: Where) -> None:
    template = _map(value, where)
    metadata = template.get("metadata")
    if metadata is not None:
        _metadata(metadata, where)
    _pod_spec(_map(template.get("spec"), (where, "spec")), where, "spec")


def _pod_spec(spec: Mapping[str, Any], parent: Where, field: str) -> None:
    node_selector = spec.get("nodeSelector")
    if node_selector is not None:
        _string_map(node_selector, (parent, field), "nodeSelector")
