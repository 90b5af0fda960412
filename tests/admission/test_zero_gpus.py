"""`nvidia.com/gpu: 0` (charts set it to switch GPUs off) asks for no GPU: Kubernetes accepts
it, so admission neither denies nor rewrites it."""

from __future__ import annotations

import pytest

from quotaguard.admission import make_review, review_offline

from .builders import container, gpu, pod

ZEROS = [0, "0", "00", "0k", "0.0"]


@pytest.mark.parametrize("zero", ZEROS, ids=repr)
@pytest.mark.parametrize("namespace", ["inference", "training", "nb-a", "no-tenant-here"])
def test_a_zero_gpu_request_is_no_gpu(policy, zero, namespace):
    obj = pod(
        container(limits={"nvidia.com/gpu": zero, "cpu": "1"}, requests={"nvidia.com/gpu": zero})
    )
    response, patched = review_offline(policy, make_review(obj, namespace=namespace))
    answer = response["response"]
    assert answer["allowed"], answer
    assert "patch" not in answer
    assert "warnings" not in answer
    assert patched == obj


def test_a_zero_next_to_a_real_request_leaves_only_the_real_one_rewritten(policy):
    obj = pod(gpu(0, name="sidecar"), gpu(1, name="main"))
    response, patched = review_offline(policy, make_review(obj, namespace="nb-a"))
    assert response["response"]["allowed"]
    sidecar, main = patched["spec"]["containers"]
    assert sidecar["resources"]["limits"] == {"nvidia.com/gpu": 0}
    assert main["resources"]["limits"] == {"nvidia.com/gpu.shared": "1"}


def test_a_negative_or_fractional_count_is_still_denied(policy):
    for value in (-1, "-1", "0.5"):
        obj = pod(gpu(value))
        response, _ = review_offline(policy, make_review(obj, namespace="training"))
        assert response["response"]["auditAnnotations"]["denied"] == "gpu-value"
