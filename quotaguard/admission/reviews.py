"""AdmissionReview (admission.k8s.io/v1) shapes, decoding and the response builder.

TypedDicts rather than models: a review is read once and answered, and validating it into
objects would cost more than the decision itself.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Required, TypedDict, cast

import msgspec

from quotaguard.admission.decision import Decision

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
MAX_WARNINGS = 20  # per response: each one is shown to the user by kubectl
MAX_WARNING_LENGTH = 119  # the API server truncates warnings at 120 characters
# Built once: `json.dumps` with any non-default argument builds a new encoder on every call.
# ASCII output: a lone surrogate (valid JSON, invalid UTF-8) is escaped.
_COMPACT_ASCII_JSON = json.JSONEncoder(separators=(",", ":"))
_msgspec_encode = msgspec.json.Encoder().encode


def encode_json(document: Any) -> bytes:
    """Compact JSON, UTF-8. msgspec writes it ~8x faster than the standard library; a string
    that is no valid Unicode (a lone surrogate a client sent) falls back to ASCII escapes."""
    try:
        return _msgspec_encode(document)
    except UnicodeEncodeError:
        return _COMPACT_ASCII_JSON.encode(document).encode()


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class GroupVersionResource(TypedDict):
    group: str
    version: str
    resource: str


class UserInfo(TypedDict, total=False):
    username: str
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]


class AdmissionRequest(TypedDict, total=False):
    uid: Required[str]
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: str
    name: str
    namespace: str
    operation: str
    userInfo: UserInfo
    object: dict[str, Any] | None
    oldObject: dict[str, Any] | None
    dryRun: bool
    options: dict[str, Any] | None


class ReviewStatus(TypedDict, total=False):
    code: int
    message: str
    reason: str


class AdmissionResponse(TypedDict, total=False):
    uid: Required[str]
    allowed: Required[bool]
    patch: str
    patchType: Literal["JSONPatch"]
    warnings: list[str]
    status: ReviewStatus
    auditAnnotations: dict[str, str]


class AdmissionReview(TypedDict, total=False):
    apiVersion: Required[str]
    kind: Required[str]
    request: AdmissionRequest
    response: AdmissionResponse


class BadReview(ValueError):
    """The request is not an AdmissionReview that can be answered (HTTP 400, not a denial)."""

    # What the error is, ahead of its message in the webhook's 400 and in `quotaguard review`.
    problem: ClassVar[str] = "not an AdmissionReview"


def decode_review(body: object) -> AdmissionRequest:
    """The request of a decoded AdmissionReview body, checked just enough to answer it (the
    fields of the object are checked as admission reads them: see `shape`)."""
    if not isinstance(body, dict):
        raise BadReview(f"an AdmissionReview must be a JSON object, not {_kind_of(body)}")
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        raise BadReview(
            f"expected apiVersion {API_VERSION} and kind {KIND}, got "
            f"apiVersion {body.get('apiVersion')!r} and kind {body.get('kind')!r}"
        )
    request = body.get("request")
    if not isinstance(request, dict):
        raise BadReview("the AdmissionReview has no request")
    _check_request(request)
    return cast(AdmissionRequest, request)


def _check_request(request: Mapping[str, object]) -> None:
    """The fields of `request` an answer depends on: uid, operation, object, namespace."""
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid is missing or not a string")
    operation = request.get("operation", "CREATE")
    if not isinstance(operation, str) or operation not in OPERATIONS:
        raise BadReview(f"request.operation {operation!r} is not one of {sorted(OPERATIONS)}")
    obj = request.get("object")
    # DELETE and CONNECT carry no object; every other operation must.
    if not isinstance(obj, dict) and not (obj is None and operation in ("DELETE", "CONNECT")):
        raise BadReview(f"request.object must be an object, not {_kind_of(obj)}")
    namespace = request.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise BadReview("request.namespace must be a string")
    old = request.get("oldObject")
    if old is not None and not isinstance(old, dict):
        raise BadReview(f"request.oldObject must be an object or null, not {_kind_of(old)}")


def _kind_of(value: object) -> str:
    return "null" if value is None else type(value).__name__


def request_namespace(request: AdmissionRequest) -> str:
    namespace = request.get("namespace")
    if namespace:
        return namespace
    obj = request.get("object")
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    found = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return found if isinstance(found, str) else ""


def build_response(uid: str, decision: Decision) -> AdmissionReview:
    response: AdmissionResponse = {"uid": uid, "allowed": decision.allowed}
    if decision.allowed and decision.patch:
        response["patch"] = base64.b64encode(encode_json(decision.patch)).decode("ascii")
        response["patchType"] = "JSONPatch"
    if decision.warnings:
        warnings = [_warning(text) for text in decision.warnings[:MAX_WARNINGS]]
        if len(decision.warnings) > MAX_WARNINGS:
            warnings[-1] = f"... and {len(decision.warnings) - MAX_WARNINGS + 1} more"
        response["warnings"] = warnings
    if not decision.allowed:
        response["status"] = {
            "code": decision.code,
            "reason": "Forbidden",
            "message": decision.message,
        }
    if decision.audit:
        response["auditAnnotations"] = dict(decision.audit)
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def _warning(text: str) -> str:
    line = " ".join(text.split())
    if len(line) <= MAX_WARNING_LENGTH:
        return line
    return line[: MAX_WARNING_LENGTH - 1] + "…"


def make_review(
    obj: Mapping[str, Any],
    *,
    namespace: str,
    operation: str = "CREATE",
    uid: str | None = None,
    dry_run: bool = False,
    old_object: Mapping[str, Any] | None = None,
    username: str | None = None,
) -> AdmissionReview:
    """The AdmissionReview the API server would send for `obj` (for review, test, simulate);
    `old_object` is the stored object an UPDATE replaces, `username` who sends it (its
    `userInfo`).

    A manifest without apiVersion and kind is taken as a Pod, as in simulator traces.
    """
    if "apiVersion" not in obj and "kind" not in obj:
        obj = {"apiVersion": "v1", "kind": "Pod", **obj}
    api_version = str(obj.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    kind = str(obj.get("kind", ""))
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    request: AdmissionRequest = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "namespace": namespace,
        "operation": operation,
        "object": dict(obj),
        "oldObject": None if old_object is None else dict(old_object),
        "dryRun": dry_run,
    }
    if isinstance(name, str):
        request["name"] = name
    if username is not None:
        request["userInfo"] = {"username": username}
    return {"apiVersion": API_VERSION, "kind": KIND, "request": request}
