"""Admission: the transport-free engine behind the webhook, `review`, `test` and `simulate`.

AdmissionReview -> decode -> tenant_of(ns) -> mutate -> validate -> patch -> encode
"""

from quotaguard.admission.answers import answer_offline
from quotaguard.admission.decision import Decision, Denial, PatchOp, Rule
from quotaguard.admission.engine import OperationPath, decide, review, review_offline
from quotaguard.admission.mutate import mutate
from quotaguard.admission.reviews import (
    AdmissionRequest,
    AdmissionResponse,
    AdmissionReview,
    BadReview,
    build_response,
    decode_review,
    make_review,
)
from quotaguard.admission.validate import validate

__all__ = [
    "AdmissionRequest",
    "AdmissionResponse",
    "AdmissionReview",
    "BadReview",
    "Decision",
    "Denial",
    "OperationPath",
    "PatchOp",
    "Rule",
    "answer_offline",
    "build_response",
    "decide",
    "decode_review",
    "make_review",
    "mutate",
    "review",
    "review_offline",
    "validate",
]
