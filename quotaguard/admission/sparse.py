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
from typing import Any

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


_Object: Any = object_schema(_Metadata, _PodSpec, _Resources)


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


_DECODER = msgspec.json.Decoder(_Review)
_to_builtins = msgspec.to_builtins


def _schema_fits(review: _Review) -> bool:
    """The object is of a kind of the table (any other kind is decoded whole: the schema
    would drop what such a kind keeps, and the engine allows it unread anyway)."""
    request = review.request
    if not isinstance(request, _Request):
        return True
    obj = request.object if isinstance(request.object, _Object) else request.oldObject
    if not isinstance(obj, _Object):
        return True
    return kind_of({"apiVersion": obj.apiVersion, "kind": obj.kind}) is not None


def decode_review_body(body: bytes) -> Any:
    """The review in `body` with only the fields admission reads; the whole document when the
    schema does not fit it or its object is of a kind the schema does not describe. Raises
    `ValueError` (or `RecursionError`) when `body` is not JSON."""
    try:
        review = _DECODER.decode(body)
    except (msgspec.MsgspecError, RecursionError):
        return json.loads(body)
    if not _schema_fits(review):
        return json.loads(body)
    return _to_builtins(review)
