"""Every answer to an AdmissionReview, built in one place: the live webhook and the offline
`review`, `test` and `simulate` give the same one.

Three kinds of failure, three answers:

- The request is bad (not JSON, not an AdmissionReview, no policy loaded yet): an HTTP error
  with a JSON `{"error": ...}` (`Answer.status` 400 or 503). The API server reports it and the
  registration's failurePolicy applies, which is right: there is no object we could have judged.
- The object is bad, or too large to review (over `MAX_CONTAINERS` containers): an ordinary
  denial inside an HTTP 200 AdmissionReview.
- The engine itself fails on a well-formed review (a bug in quotaguard): logged with the uid and
  answered as HTTP 200 with `allowed: false`, `status.code: 500`. Answering HTTP 500 instead
  would hand the decision to failurePolicy, and with `Ignore` an un-rewritten GPU pod would slip
  past the quota rewrite unseen. A denial is deterministic, names the uid to look for in our
  log, and the user sees an error they can retry once the policy or the code is fixed.

The transport (`quotaguard.webhook.server`) only reads bodies, guards connections and counts;
the few answers it gives before a body is read (a body too slow or unreadable) are built here too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, cast

from quotaguard.admission.decision_cache import DecisionCache, key_of
from quotaguard.admission.engine import OperationPath, review, review_offline
from quotaguard.admission.reviews import API_VERSION, KIND, AdmissionReview, BadReview, encode_json
from quotaguard.admission.sparse import decode_review_body
from quotaguard.kube.dra import DraLookup
from quotaguard.kube.trainingruntime import TrainingRuntimes
from quotaguard.policy.model import TenantPolicy

log = logging.getLogger("quotaguard.webhook")

# Containers (all kinds, every pod template) one object may hold. Kubernetes sets no limit, but
# a 2.5 MiB Pod of 24,000 GPU containers would cost seconds of CPU and a 13 MiB patch; past
# this the object is denied with a message saying so (docs/deploy.md lists it).
MAX_CONTAINERS: Final = 256
_CONTAINER_KEYS: Final = frozenset({"containers", "initContainers", "ephemeralContainers"})
_NESTED: Final = (dict, list)  # a tuple: `dict | list` builds a union object on every test
# Object kinds get their own metric label; anything else is "other", so that a client sending
# made-up kinds cannot grow the number of series without bound.
KNOWN_KINDS: Final = frozenset({"Pod", "Job", "JobSet"})

Result = Literal["allowed", "mutated", "denied", "error", "bad_request"]
Cached = Literal["", "hit", "miss"]


class ReviewFunction(Protocol):
    """`engine.review` as the webhook calls it (the TrainJob runtime cache wraps it)."""

    def __call__(
        self, policy: TenantPolicy, body: object, *, operation_path: OperationPath
    ) -> AdmissionReview: ...


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer: status and JSON body, with the labels the webhook counts it under."""

    status: int
    body: bytes
    kind: str = ""  # the object's kind label (KNOWN_KINDS or "other"); "" when none was read
    result: Result = "bad_request"
    denials: tuple[tuple[str, str], ...] = ()  # (tenant, rule) of each rule that denied
    cached: Cached = ""  # "" when no decision cache was asked (none, or an uncacheable request)


def answer(
    policy: TenantPolicy | None,
    body: bytes,
    operation: OperationPath,
    *,
    review: ReviewFunction = review,
    policy_source: str = "",
    cache: DecisionCache | None = None,
) -> Answer:
    """The answer to one request body on /mutate or /validate; `policy` None: none loaded yet
    from `policy_source`. With `cache`, the answer of an identical request decided before under
    the same policy (see `decision_cache`), the same bytes deciding again would give."""
    if policy is None:
        return Answer(503, error_json(f"no policy loaded from {policy_source} yet"), result="error")
    try:
        document = decode_review_body(body)
    except (ValueError, RecursionError) as exc:
        return bad_request(f"request body is not JSON: {short(exc)}")
    key = key_of(operation, document) if cache is not None and cache.wanted() else None
    if cache is None or key is None:
        return _decided(policy, document, operation, review)
    kept = cache.get(policy, key)
    if kept is not None:
        result = cast(Result, kept.result)  # put only as one of KEPT_RESULTS
        return Answer(200, kept.body(key.uid), kept.kind, result, kept.denials, "hit")
    reads = cache.cluster_reads()
    decided = _decided(policy, document, operation, review, "miss")
    if decided.status == 200 and cache.cluster_reads() == reads:
        cache.put(policy, key, decided.body, (decided.kind, decided.result, decided.denials))
    return decided


def _decided(
    policy: TenantPolicy,
    document: Any,
    operation: OperationPath,
    review: ReviewFunction,
    cached: Cached = "",
) -> Answer:
    refused = over_the_limit(document)
    if refused is not None:
        return Answer(200, encode_json(refused), kind_label(document), "denied", (), cached)
    try:
        response = review(policy, document, operation_path=operation)
        payload = encode_json(response)
    except BadReview as exc:
        return bad_request(f"{exc.problem}: {short(exc)}")
    except Exception:
        failed = internal_error(document, operation)
        if failed is None:
            return bad_request("not an AdmissionReview: request.uid missing")
        return Answer(200, encode_json(failed), kind_label(document), "error", (), cached)
    result = result_of(response)
    denials = tuple(denial_labels(response)) if result == "denied" else ()
    return Answer(200, payload, kind_label(document), result, denials, cached)


def answer_offline(
    policy: TenantPolicy,
    body: object,
    runtimes: TrainingRuntimes | None = None,
    *,
    dra: DraLookup | None = None,
) -> tuple[AdmissionReview, dict[str, Any]]:
    """Mutation, then validation of the mutated object, as the webhook answers them: the
    response the user would see and the object as it would be stored (the original one when
    denied). Bounded and failing as the live webhook is; a bad request raises `BadReview`."""
    refused = over_the_limit(body)
    if refused is not None:
        return refused, _request_field(body, "object")
    try:
        return review_offline(policy, body, runtimes, dra=dra)
    except BadReview:
        raise
    except Exception:
        failed = internal_error(body, "review")
        if failed is None:
            raise BadReview("request.uid is missing or not a string") from None
        obj = _request_field(body, "object")
        return failed, obj if isinstance(obj, dict) else {}


def over_the_limit(document: object) -> AdmissionReview | None:
    """The denial of an object of more than `MAX_CONTAINERS` containers, None for any other
    (a review without a uid goes on, to be refused as a bad request)."""
    containers = _container_count(_request_field(document, "object"))
    uid = _uid(document)
    if containers <= MAX_CONTAINERS or uid is None:
        return None
    message = (
        f"quotaguard reviews at most {MAX_CONTAINERS} containers per object; "
        f"this one has {containers}: split the workload"
    )
    return _refusal(uid, 403, "Forbidden", message)


def internal_error(document: object, operation: str) -> AdmissionReview | None:
    """Logged with its traceback; the denial that names the uid to look for in the log, None
    when the review has no uid to answer."""
    uid = _uid(document)
    log.exception("admission engine failed", extra={"uid": uid, "operation": operation})
    if uid is None:
        return None
    return _refusal(
        uid, 500, "InternalError", f"quotaguard failed on this request (uid {uid}); see its log"
    )


def _refusal(uid: str, code: int, reason: str, message: str) -> AdmissionReview:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "response": {
            "uid": uid,
            "allowed": False,
            "status": {"code": code, "reason": reason, "message": message},
        },
    }


def bad_request(message: str) -> Answer:
    return Answer(400, error_json(message))


def body_too_slow(timeout: float) -> Answer:
    return Answer(408, error_json(f"request body not received within {timeout:g}s"))


def body_unreadable(exc: BaseException) -> Answer:
    """A body that is not what its headers say (e.g. gzip that is not)."""
    return bad_request(f"request body unreadable: {short(exc)}")


def error_json(message: str) -> bytes:
    return encode_json({"error": message})


def short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _container_count(obj: Any) -> int:
    """Containers anywhere in an object (pod templates of every kind), without recursion."""
    total = 0
    pending = [obj]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(value, _NESTED):
                    continue  # most values are strings: one test for them
                if key in _CONTAINER_KEYS and isinstance(value, list):
                    total += len(value)
                else:
                    pending.append(value)
        elif isinstance(node, list):
            pending.extend(item for item in node if isinstance(item, _NESTED))
    return total


def _request_field(document: Any, name: str) -> Any:
    request = document.get("request") if isinstance(document, dict) else None
    return request.get(name) if isinstance(request, dict) else None


def _uid(document: Any) -> str | None:
    uid = _request_field(document, "uid")
    return uid if isinstance(uid, str) and uid else None


def kind_label(document: Any) -> str:
    kind = _request_field(document, "kind")
    name = kind.get("kind") if isinstance(kind, dict) else None
    return name if isinstance(name, str) and name in KNOWN_KINDS else "other"


def denial_labels(review: AdmissionReview) -> list[tuple[str, str]]:
    """(tenant, rule) of each rule that denied the object, from the response's audit
    annotations: tenants come from the policy and rules from a fixed list, so the series stay
    bounded whatever clients send."""
    response = review.get("response")
    audit = response.get("auditAnnotations", {}) if response is not None else {}
    tenant = audit.get("tenant", "")
    return [(tenant, rule) for rule in audit.get("denied", "").split(",") if rule]


def result_of(review: AdmissionReview) -> Result:
    response = review.get("response")
    if response is None or not response.get("allowed"):
        return "denied"
    return "mutated" if response.get("patch") else "allowed"
