"""AdmissionReview decoding (bad requests are BadReview, i.e. HTTP 400) and response building."""

from __future__ import annotations

import base64
import json

import pytest

from quotaguard.admission import BadReview, Decision, Denial, build_response, decode_review
from quotaguard.admission.decision import deny
from quotaguard.admission.reviews import make_review

from .builders import gpu, pod


def review_of(request):
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


GOOD = {"uid": "u-1", "operation": "CREATE", "namespace": "training", "object": pod()}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("not json at all", "must be a JSON object, not str"),
        ([GOOD], "not list"),
        (None, "not null"),
        ({**review_of(GOOD), "apiVersion": "admission.k8s.io/v1beta1"}, "admission.k8s.io/v1beta1"),
        ({**review_of(GOOD), "kind": "Pod"}, "kind 'Pod'"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "no request"),
        (review_of("uid"), "no request"),
        (review_of({**GOOD, "uid": ""}), "request.uid"),
        (review_of({k: v for k, v in GOOD.items() if k != "uid"}), "request.uid"),
        (review_of({**GOOD, "uid": 7}), "request.uid"),
        (review_of({**GOOD, "object": "pod"}), "request.object must be an object, not str"),
        (review_of({**GOOD, "object": None}), "not null"),
        (review_of({**GOOD, "operation": "PATCH"}), "request.operation 'PATCH'"),
        (review_of({**GOOD, "namespace": ["a"]}), "request.namespace"),
    ],
)
def test_malformed_reviews_are_bad_requests(body, fragment):
    with pytest.raises(BadReview) as caught:
        decode_review(body)
    assert fragment in str(caught.value)


def test_delete_without_object_is_a_valid_review():
    request = decode_review(review_of({"uid": "u", "operation": "DELETE", "object": None}))
    assert request["uid"] == "u"


def test_allowed_response_carries_the_patch():
    ops = ({"op": "add", "path": "/metadata/labels", "value": {"a": "b"}},)
    review = build_response("u-1", Decision(patch=ops, warnings=("w",), audit={"tenant": "t"}))
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    response = review["response"]
    assert response["uid"] == "u-1"
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == list(ops)
    assert response["warnings"] == ["w"]
    assert response["auditAnnotations"] == {"tenant": "t"}
    assert "status" not in response


def test_no_patch_fields_without_a_patch():
    response = build_response("u", Decision())["response"]
    assert response == {"uid": "u", "allowed": True}


def test_denied_response_has_status_403_and_no_patch():
    decision = deny([Denial("two-classes", "first"), Denial("shared-units", "second")])
    response = build_response("u", decision)["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"] == "(1) first (2) second"
    assert response["auditAnnotations"]["denied"] == "two-classes,shared-units"
    assert "patch" not in response


def test_warnings_are_one_line_and_under_120_characters():
    long = "main: " + "x" * 300
    response = build_response("u", Decision(warnings=(long, "a\nb")))["response"]
    assert all(len(w) < 120 for w in response["warnings"])
    assert response["warnings"][0].endswith("…")
    assert response["warnings"][1] == "a b"


def test_make_review_takes_a_bare_manifest_as_a_pod():
    body = make_review({"spec": {"containers": [gpu()]}}, namespace="nb-a", uid="x")
    request = decode_review(body)
    assert request["object"]["kind"] == "Pod"
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["namespace"] == "nb-a"
    assert request["operation"] == "CREATE"
