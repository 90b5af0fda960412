"""Decode an AdmissionReview body into only the fields admission reads.

An 11 KB Pod review is mostly env vars, probes, volumes and managedFields that admission never
looks at; building Python objects for all of it costs more than the decision. The schema below
names what the engine reads (the review's request, the object's metadata, and for every kind of
`quotaguard.kube.kinds` the pod templates down to container names and resources, built from
the kind table by `sparse_schema`) and msgspec skips the rest without building it. The result
is the review as plain dicts and lists, minus the unread fields, so the engine runs on it
unchanged and its patches address the object as it arrived.

A body the schema does not fit (a field of an unexpected type, a lone surrogate, NaN) is not
refused here: it is decoded whole by the standard library and judged by the engine as before,
so every error message and every decision stays the engine's own. Leaves whose type the engine
checks itself (labels, annotations, nodeSelector, names, GPU amounts) are typed `Any` for the
same reason. `tests/test_sparse.py` holds the contract: the same answer from either decoding.
"""

from __future__ import annotations

import json
from types import UnionType
from typing import Any, TypedDict, Union, get_args, get_origin

import msgspec
from msgspec import UNSET, Struct, UnsetType

from quotaguard.admission.sparse_schema import object_schema
from quotaguard.kube.kinds import kind_of


class _Resources(Struct, omit_defaults=True):
    limits: Any = UNSET
    requests: Any = UNSET


class _Container(Struct, omit_defaults=True):  # Kubernetes names its fields in camelCase
    name: Any = UNSET
    resources: _Resources | UnsetType | None = UNSET
    restartPolicy: Any = UNSET  # noqa: N815 - a sidecar's GPUs count toward the pod's


class _Metadata(Struct, omit_defaults=True):
    namespace: Any = UNSET
    labels: Any = UNSET
    annotations: Any = UNSET
    ownerReferences: Any = UNSET  # noqa: N815


class _PodSpec(Struct, omit_defaults=True):
    containers: list[_Container] | UnsetType | None = UNSET
    initContainers: list[_Container] | UnsetType | None = UNSET  # noqa: N815
    nodeSelector: Any = UNSET  # noqa: N815
    schedulerName: Any = UNSET  # noqa: N815
    priorityClassName: Any = UNSET  # noqa: N815
    resourceClaims: Any = UNSET  # noqa: N815 - DRA claims: see admission.claims
    schedulingGates: Any = UNSET  # noqa: N815 - Kueue's gate: see admission.holds


class _Object(Struct, omit_defaults=True):
    """A Pod, the common case, decoded first (see `decode_review_body`)."""

    apiVersion: Any = UNSET  # noqa: N815
    kind: Any = UNSET
    metadata: _Metadata | UnsetType | None = UNSET
    spec: _PodSpec | UnsetType | None = UNSET


class _Request(Struct, omit_defaults=True):
    uid: Any = UNSET
    kind: Any = UNSET
    name: Any = UNSET
    namespace: Any = UNSET
    operation: Any = UNSET
    userInfo: Any = UNSET  # noqa: N815 - who is asking: see admission.owners
    object: _Object | UnsetType | None = UNSET
    oldObject: _Object | UnsetType | None = UNSET  # noqa: N815
    dryRun: Any = UNSET  # noqa: N815


class _Review(Struct, omit_defaults=True):
    apiVersion: Any = UNSET  # noqa: N815
    kind: Any = UNSET
    request: _Request | UnsetType | None = UNSET


def _as_dicts(schema: Any, made: dict[type, Any]) -> Any:
    """`schema` with each Struct as a TypedDict of its fields (a field left unset is absent):
    msgspec then builds the plain dicts the engine reads while decoding, instead of Structs
    that `msgspec.to_builtins` would copy into dicts afterwards (~4 us of ~15 for an 11 KB
    Pod review). The Structs stay the one place the schema is written."""
    if isinstance(schema, type) and issubclass(schema, Struct):
        if schema not in made:
            fields = {f.name: _as_dicts(f.type, made) for f in msgspec.structs.fields(schema)}
            made[schema] = TypedDict(schema.__name__, fields, total=False)  # type: ignore[operator]
        return made[schema]
    origin, args = get_origin(schema), get_args(schema)
    if origin in (Union, UnionType):
        kept = tuple(_as_dicts(a, made) for a in args if a is not UnsetType)
        return Union[kept]  # noqa: UP007
    if origin is list:
        return list[_as_dicts(args[0], made)]  # type: ignore[misc]
    if origin is dict:  # a map step: its keys are names
        return dict[str, _as_dicts(args[1], made)]  # type: ignore[misc]
    return schema


def _widened(obj: Any) -> Any:
    """`_Review` with `obj` as the type of its object and old object."""
    fields = [
        (f.name, obj | UnsetType | None if f.name in ("object", "oldObject") else f.type, UNSET)
        for f in msgspec.structs.fields(_Request)
    ]
    request = msgspec.defstruct("Request", fields, omit_defaults=True)
    return msgspec.defstruct(
        "Review",
        [
            (f.name, request | UnsetType | None if f.name == "request" else f.type, UNSET)
            for f in msgspec.structs.fields(_Review)
        ],
        omit_defaults=True,
    )


_POD_DECODER = msgspec.json.Decoder(_as_dicts(_Review, {}))
# Every kind of the table: more fields to look up, so a Pod is not decoded with it.
_DECODER = msgspec.json.Decoder(
    _as_dicts(_widened(object_schema(_Metadata, _PodSpec, _Resources)), {})
)
_POD = ("v1", "Pod")


def _kinds(review: Any) -> set[tuple[str, str]] | None:
    """(apiVersion, kind) of the object and old object; None when one is not a string."""
    request = review.get("request")
    if not isinstance(request, dict):
        return set()
    found = set()
    for obj in (request.get("object"), request.get("oldObject")):
        if isinstance(obj, dict):
            api_version, kind = obj.get("apiVersion"), obj.get("kind")
            if not (isinstance(api_version, str) and isinstance(kind, str)):
                return None
            found.add((api_version, kind))
    return found


def decode_review_body(body: bytes) -> Any:
    """The review in `body` with only the fields admission reads; the whole document when the
    schema does not fit it or its object is of a kind the schema does not describe. Raises
    `ValueError` (or `RecursionError`) when `body` is not JSON."""
    try:
        review = _POD_DECODER.decode(body)
    except (msgspec.MsgspecError, RecursionError):
        return json.loads(body)
    kinds = _kinds(review)
    if kinds is None:
        return json.loads(body)
    if not kinds or kinds == {_POD}:
        return review
    # Any other kind of the table is decoded again with its templates; one outside it whole
    # (the schema would drop what such a kind keeps, and the engine allows it unread anyway).
    if not all(kind_of({"apiVersion": a, "kind": k}) for a, k in kinds):
        return json.loads(body)
    try:
        return _DECODER.decode(body)
    except (msgspec.MsgspecError, RecursionError):
        return json.loads(body)
