"""The admission engine: AdmissionReview in, AdmissionReview out, no transport.

`review` is what the HTTPS server calls for /mutate and /validate; `review_offline` runs both
steps the way the API server chains them, for `quotaguard review`, `quotaguard test` and the
simulator. A malformed review raises `BadReview` (HTTP 400); a bad object is a denial.
"""

from __future__ import annotations

from typing import Any, Literal, cast

import jsonpatch

from quotaguard.admission.claimrules import claim_object_decision
from quotaguard.admission.decision import ALLOWED, Decision, combine, deny
from quotaguard.admission.holds import lifted_hold
from quotaguard.admission.mutate import mutate
from quotaguard.admission.owners import owner_kinds, trusted_creator
from quotaguard.admission.provenance import refused_creation
from quotaguard.admission.reading import Reading
from quotaguard.admission.reviews import (
    AdmissionRequest,
    AdmissionReview,
    build_response,
    decode_review,
    request_namespace,
)
from quotaguard.admission.runtimes import patch_from, unreadable_runtime, with_runtime
from quotaguard.admission.validate import validate
from quotaguard.kube.dra import DraLookup
from quotaguard.kube.trainingruntime import TrainingRuntimes
from quotaguard.policy.model import TenantPolicy

OperationPath = Literal["mutate", "validate"]


def review(
    policy: TenantPolicy,
    body: object,
    *,
    operation_path: OperationPath,
    runtimes: TrainingRuntimes | None = None,
    dra: DraLookup | None = None,
) -> AdmissionReview:
    """Answer one AdmissionReview. dryRun requests get the same answer: deciding has no
    side effects. `runtimes`: the TrainJob runtimes admission may read (None: not known, a
    TrainJob is judged by its own resourcesPerNode alone). `dra` finds the
    ResourceClaimTemplates, ResourceClaims and DeviceClasses that DRA claims name (none known
    without it)."""
    request = decode_review(body)
    decision = decide(policy, request, operation_path=operation_path, runtimes=runtimes, dra=dra)
    return build_response(request["uid"], decision)


def decide(
    policy: TenantPolicy,
    request: AdmissionRequest,
    *,
    operation_path: OperationPath,
    runtimes: TrainingRuntimes | None = None,
    dra: DraLookup | None = None,
) -> Decision:
    given = request.get("object")
    if not isinstance(given, dict):
        return ALLOWED
    namespace = request_namespace(request)
    operation = request.get("operation", "CREATE")
    # The object and the stored one, each read once for every step below.
    reading = _with_runtime(policy, given, namespace, operation, runtimes)
    if isinstance(reading, Decision):
        return reading
    obj = cast(dict[str, Any], reading.obj)
    old = request.get("oldObject")
    old_reading = (
        Reading(old, policy.gpu_resources, "request.oldObject") if isinstance(old, dict) else None
    )
    user_info = request.get("userInfo")
    owners = owner_kinds(obj)
    creator_trusted = trusted_creator(policy, user_info, owners)
    if operation == "CREATE" and owners:
        refused = refused_creation(
            policy,
            obj,
            namespace,
            user_info,
            owners,
            creator_trusted=creator_trusted,
            name=request.get("name"),
            reading=reading,
        )
        if refused is not None:
            return refused
    if operation_path == "mutate":
        mutation = mutate(
            policy,
            obj,
            namespace,
            operation=operation,
            old_object=old if isinstance(old, dict) else None,
            creator_trusted=creator_trusted,
            dra=dra,
            reading=reading,
            old_reading=old_reading,
        )
        return patch_from(given, obj, mutation)
    if operation == "CREATE":
        claim_object = claim_object_decision(policy, obj, namespace, dra)
        if claim_object is not None:
            return claim_object
    elif operation == "UPDATE":
        stored = old if isinstance(old, dict) else None
        lifted = lifted_hold(
            policy, reading, stored, namespace, user_info, owner_controller=creator_trusted
        )
        if lifted is not None:
            return deny([lifted])
    return validate(
        policy,
        obj,
        namespace,
        operation=operation,
        old_object=old if isinstance(old, dict) else None,
        creator_trusted=creator_trusted,
        dra=dra,
        reading=reading,
        old_reading=old_reading,
    )


def _with_runtime(
    policy: TenantPolicy,
    given: dict[str, Any],
    namespace: str,
    operation: str,
    runtimes: TrainingRuntimes | None,
) -> Reading | Decision:
    """The reading of the object; a TrainJob's with its runtime's trainer resources, or the
    denial when that runtime cannot be read."""
    reading = Reading(given, policy.gpu_resources)
    if runtimes is None or reading.kind_id != "TrainJob":
        return reading
    unreadable = unreadable_runtime(policy, given, namespace, operation, runtimes)
    if unreadable is not None:
        return unreadable
    obj = with_runtime(given, namespace, runtimes)
    return reading if obj is given else Reading(obj, policy.gpu_resources)


def review_offline(
    policy: TenantPolicy,
    body: object,
    runtimes: TrainingRuntimes | None = None,
    *,
    dra: DraLookup | None = None,
) -> tuple[AdmissionReview, dict[str, Any]]:
    """Mutation, then validation of the mutated object: the response the user would see and
    the object as it would be stored (the original one when denied)."""
    request = decode_review(body)
    obj = request.get("object")
    if not isinstance(obj, dict):
        return build_response(request["uid"], ALLOWED), {}
    mutation = decide(policy, request, operation_path="mutate", runtimes=runtimes, dra=dra)
    patched = apply_patch(obj, mutation) if mutation.allowed else obj
    validation = decide(
        policy,
        {**request, "object": patched},
        operation_path="validate",
        runtimes=runtimes,
        dra=dra,
    )
    decision = combine(mutation, validation)
    return build_response(request["uid"], decision), patched if decision.allowed else obj


def apply_patch(obj: dict[str, Any], decision: Decision) -> dict[str, Any]:
    if not decision.patch:
        return obj
    patched: dict[str, Any] = jsonpatch.apply_patch(obj, list(decision.patch))
    return patched
