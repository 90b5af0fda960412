"""maxGPUsPerPod counts a pod as Kubernetes reserves it: a sidecar (an init container with
`restartPolicy: Always`) keeps its GPUs while the init containers declared after it run."""

from __future__ import annotations

from quotaguard.admission import review_offline
from quotaguard.admission.reviews import make_review
from quotaguard.policy.model import TenantPolicy

from .builders import container, gpu, pod


def _sidecar(count: int) -> dict[str, object]:
    return container("proxy", limits={"nvidia.com/gpu": count}, restartPolicy="Always")


def test_a_sidecar_before_an_init_container_is_counted_beside_it(policy: TenantPolicy) -> None:
    # training: whole H100s, maxGPUsPerPod 8. 8 + 8 are held at once during the init phase.
    obj = pod(gpu(1), init=[_sidecar(8), gpu(8, name="warmup")])
    response, _ = review_offline(policy, make_review(obj, namespace="training"))
    answer = response["response"]
    assert answer["allowed"] is False
    message = answer["status"]["message"]
    assert "pod asks for 16" in message
    assert "each beside the sidecars declared before it" in message


def test_a_sidecar_after_the_init_container_is_not(policy: TenantPolicy) -> None:
    later = pod(gpu(1), init=[gpu(7, name="warmup"), _sidecar(1)])
    response, _ = review_offline(policy, make_review(later, namespace="training"))
    assert response["response"]["allowed"] is True  # max(1 + 1, 7 + 0) = 7
