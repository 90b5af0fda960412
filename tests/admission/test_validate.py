"""Validation rows of the admission contract: each denial, its message, and what is allowed."""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from quotaguard.admission import validate
from quotaguard.admission.names import KUEUE_QUEUE_LABEL, VOLCANO_QUEUE_ANNOTATION
from quotaguard.admission.validate import _upper_bound_within
from quotaguard.admission.workload import GpuContainer

from .builders import container, gpu, job, pod, recorded, template, volcano_job

SHARED = "nvidia.com/gpu.shared"
MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"


DENIED = [
    # (id, object, namespace, rule, fragments of the message)
    ("fraction", pod(gpu("0.5")), "training", "gpu-value", ['"0.5"', "whole"]),
    ("negative", pod(gpu(-1, resource=MIG_3G)), "training", "gpu-value", [MIG_3G]),
    ("milli", pod(gpu("1500m", resource=SHARED)), "nb-a", "gpu-value", ['"1500m"']),
    ("junk", pod(gpu("lots")), "training", "gpu-value", ['"lots"']),
    (
        "requests only",
        pod(container(requests={"nvidia.com/gpu": 1})),
        "training",
        "requests-only",
        ["only in requests", "limits"],
    ),
    (
        "requests != limits",
        pod(container(limits={MIG_3G: 2}, requests={MIG_3G: 1})),
        "training",
        "requests-limits",
        ["requests nvidia.com/mig-3g.40gb=1", "limits it to 2"],
    ),
    (
        "class not allowed",
        pod(gpu(1, resource=SHARED)),
        "training",
        "class-not-allowed",
        ['tenant "training"', 'class "shared"', "allowedClasses: h100, h100-3g.40gb"],
    ),
    (
        "unknown GPU resource",
        pod(gpu(1, resource="nvidia.com/mig-2g.20gb")),
        "training",
        "class-not-allowed",
        ["no GPU class of the policy offers"],
    ),
    (
        "whole GPU for a MIG-only tenant",
        pod(gpu(1)),
        "inference",
        "class-not-allowed",
        ['class "h100"', "quotaguard.dev/gpu-memory"],
    ),
    (
        "class hint not allowed",
        pod(gpu(1, resource=MIG_1G), annotations={"quotaguard.dev/gpu-class": "h100"}),
        "inference",
        "class-not-allowed",
        ['quotaguard.dev/gpu-class "h100"', "allowedClasses"],
    ),
    (
        "class hint unknown",
        pod(gpu(1, resource=MIG_1G), annotations={"quotaguard.dev/gpu-class": "a100"}),
        "inference",
        "class-not-allowed",
        ['"a100" is not a GPU class'],
    ),
    (
        "too many GPUs",
        pod(gpu(9)),
        "training",
        "max-gpus-per-pod",
        ["at most 8 GPU-equivalents per pod (maxGPUsPerPod)", "pod asks for 9"],
    ),
    (
        "too many slices",
        pod(gpu(3, resource=MIG_3G)),
        "inference",
        "max-gpus-per-pod",
        ["at most 1 GPU-equivalent per pod", "1.29", "(main: nvidia.com/mig-3g.40gb: 3 = 1.29)"],
    ),
    (
        "summed over containers",
        pod(gpu(5, name="a"), gpu(4, name="b")),
        "training",
        "max-gpus-per-pod",
        ["pod asks for 9", "(a: nvidia.com/gpu: 5, b: nvidia.com/gpu: 4)"],
    ),
    (
        "init container larger than the rest",
        pod(gpu(1), init=[gpu(9, name="warmup")]),
        "training",
        "max-gpus-per-pod",
        ["pod asks for 9", "init containers count as the largest one"],
    ),
    (
        "sidecar adds to the main containers",
        pod(
            gpu(5), init=[container("proxy", limits={"nvidia.com/gpu": 4}, restartPolicy="Always")]
        ),
        "training",
        "max-gpus-per-pod",
        ["pod asks for 9"],
    ),
    (
        "shared class more than one unit",
        pod(gpu(2, resource=SHARED)),
        "nb-a",
        "shared-units",
        ['shared class "shared"', "ask for nvidia.com/gpu.shared: 1"],
    ),
    (
        "two classes in one container",
        pod(container(limits={"nvidia.com/gpu": 1, MIG_3G: 1})),
        "training",
        "two-classes",
        ["2 GPU classes (nvidia.com/gpu, nvidia.com/mig-3g.40gb)"],
    ),
    (
        "kueue queue of another tenant",
        pod(gpu(1, resource=SHARED), labels={KUEUE_QUEUE_LABEL: "training"}),
        "nb-a",
        "queue-isolation",
        ['queue "training"', 'belongs to tenant "training"', 'set it to "notebooks"'],
    ),
    (
        "volcano queue of another tenant",
        pod(gpu(1, resource=SHARED), annotations={VOLCANO_QUEUE_ANNOTATION: "inference"}),
        "nb-a",
        "queue-isolation",
        [VOLCANO_QUEUE_ANNOTATION, 'belongs to tenant "inference"'],
    ),
    (
        "volcano job queue of another tenant",
        volcano_job(("w", template(gpu(1, resource=MIG_3G))), queue="inference"),
        "training",
        "queue-isolation",
        ["spec.queue"],
    ),
    (
        "queue on a job template",
        job(template(gpu(2), labels={KUEUE_QUEUE_LABEL: "notebooks"})),
        "training",
        "queue-isolation",
        ['queue "notebooks"'],
    ),
    (
        "unowned queue from an unowned namespace",
        pod(gpu(1), labels={KUEUE_QUEUE_LABEL: "training"}),
        "kube-public",
        "queue-isolation",
        ['belongs to tenant "training"'],
    ),
    (
        "namespace without tenant",
        pod(gpu(1)),
        "default",
        "unmatched-namespace",
        ['namespace "default" belongs to no tenant', "unmatchedNamespaces is deny"],
    ),
]


@pytest.mark.parametrize(
    ("obj", "namespace", "rule", "fragments"),
    [case[1:] for case in DENIED],
    ids=[case[0] for case in DENIED],
)
def test_denied(policy, obj, namespace, rule, fragments):
    decision = validate(policy, obj, namespace)
    assert not decision.allowed
    assert rule in decision.rules
    assert decision.code == 403
    for fragment in fragments:
        assert fragment in decision.message


ALLOWED = [
    ("whole GPUs within the limit", pod(gpu(8)), "training"),
    ("split over containers within the limit", pod(gpu(4, name="a"), gpu(4, name="b")), "training"),
    ("init containers are not summed", pod(gpu(8), init=[gpu(8, name="w")]), "training"),
    ("one MIG slice", pod(gpu(1, resource=MIG_1G)), "inference"),
    ("two 3g slices are 6/7 of a GPU", pod(gpu(2, resource=MIG_3G)), "inference"),
    ("shared units in separate containers", pod(gpu(1, SHARED, "a"), gpu(1, SHARED, "b")), "nb-a"),
    (
        "quantities as strings",
        pod(container(limits={MIG_3G: "1"}, requests={MIG_3G: 1})),
        "training",
    ),
    ("own queue", pod(gpu(2), labels={KUEUE_QUEUE_LABEL: "training"}), "training"),
    ("no GPUs in an unowned namespace", pod(container(limits={"cpu": "1"})), "default"),
    ("exempt namespace, anything goes", pod(gpu("0.5"), gpu(99, name="b")), "kube-system"),
    (
        "rewrite false on a whole GPU tenant",
        pod(gpu(1), annotations={"quotaguard.dev/rewrite": "false"}),
        "training",
    ),
    (
        "other kinds",
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "spec": {"template": template(gpu(99))}},
        "training",
    ),
]


@pytest.mark.parametrize(
    ("obj", "namespace"), [case[1:] for case in ALLOWED], ids=[case[0] for case in ALLOWED]
)
def test_allowed(policy, obj, namespace):
    decision = validate(policy, obj, namespace)
    assert decision.allowed, decision.message
    assert decision.patch == ()


def test_every_violation_is_reported_in_one_message(policy):
    obj = pod(
        gpu("0.5", name="half"),
        container("both", limits={"nvidia.com/gpu": 1, SHARED: 1}),
        gpu(2, SHARED, "many"),
        labels={KUEUE_QUEUE_LABEL: "training"},
    )
    decision = validate(policy, obj, "nb-a")
    assert set(decision.rules) >= {"gpu-value", "two-classes", "shared-units", "queue-isolation"}
    for number in range(1, len(decision.denials) + 1):
        assert f"({number}) " in decision.message
    assert decision.audit["denied"].split(",")[0] == "gpu-value"


def test_unmatched_namespaces_allowed_by_policy(make_policy):
    lenient = make_policy(unmatchedNamespaces="allow")
    assert validate(lenient, pod(gpu(64)), "default").allowed
    # tenant-free rules still hold outside tenants
    assert validate(lenient, pod(gpu("0.5")), "default").rules == ("gpu-value",)


def test_hint_denial_does_not_repeat_as_class_denial(policy):
    obj = pod(gpu(1), annotations={"quotaguard.dev/gpu-class": "h100"})
    assert validate(policy, obj, "inference").rules == ("class-not-allowed",)


def test_rewrite_false_on_a_mig_tenant_says_what_to_do(policy):
    obj = pod(gpu(1), annotations={"quotaguard.dev/rewrite": "false"})
    decision = validate(policy, obj, "inference")
    assert 'remove the quotaguard.dev/rewrite: "false" annotation' in decision.message


# --- UPDATE: a queue change, or changed GPU requests, is judged -----------------------------------


def test_update_moving_to_another_tenants_queue_is_denied(policy):
    old = job(template(gpu(2)), labels={KUEUE_QUEUE_LABEL: "training"})
    new = job(template(gpu(2)), labels={KUEUE_QUEUE_LABEL: "inference"})
    decision = validate(policy, new, "training", operation="UPDATE", old_object=old)
    assert decision.rules == ("queue-isolation",)


def test_update_that_keeps_the_queue_is_allowed_even_if_now_invalid(policy):
    old = pod(gpu(9), labels={KUEUE_QUEUE_LABEL: "training"})
    new = pod(gpu(9), labels={KUEUE_QUEUE_LABEL: "training", "team": "x"})
    assert validate(policy, new, "training", operation="UPDATE", old_object=old).allowed


def test_update_that_raises_a_suspended_jobs_gpus_is_judged_again(policy):
    old = job(template(gpu(8)), labels={KUEUE_QUEUE_LABEL: "training"})
    new = recorded(job(template(gpu(9)), labels={KUEUE_QUEUE_LABEL: "training"}))
    decision = validate(policy, new, "training", operation="UPDATE", old_object=old)
    assert decision.rules == ("max-gpus-per-pod",)
    assert "8" in decision.message


def test_update_that_keeps_the_gpus_is_not_judged_again_after_a_policy_change(policy):
    stored = job(template(gpu(9)), labels={KUEUE_QUEUE_LABEL: "training"})
    unsuspended = job(template(gpu(9)), labels={KUEUE_QUEUE_LABEL: "training", "x": "y"})
    assert validate(policy, unsuspended, "training", operation="UPDATE", old_object=stored).allowed


def test_an_update_without_the_old_object_is_judged_in_full_as_a_create(policy):
    obj = job(template(gpu(9)), labels={KUEUE_QUEUE_LABEL: "inference"})
    decision = validate(policy, obj, "training", operation="UPDATE", old_object=None)
    assert decision.rules == ("max-gpus-per-pod", "queue-isolation")


def test_delete_is_allowed(policy):
    assert validate(policy, pod(gpu(99)), "training", operation="DELETE").allowed


WORTHS = {
    "nvidia.com/gpu": Fraction(1),
    MIG_1G: Fraction(1, 7),
    MIG_3G: Fraction(3, 7),
    SHARED: Fraction(1, 28),
    "example.com/third": Fraction(2, 3),
}


@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(WORTHS)), st.integers(0, 16), st.booleans()),
        max_size=12,
    ),
    st.fractions(min_value=Fraction(1, 84), max_value=32, max_denominator=84),
)
@example([("nvidia.com/gpu", 1, True), (MIG_1G, 1, True)], Fraction(1))
@example([(MIG_3G, 7, True), ("nvidia.com/gpu", 10**6, False)], Fraction(10**6 + 3))
def test_the_per_pod_bound_is_the_exact_sum_of_what_containers_ask(asked, ceiling):
    containers = tuple(
        GpuContainer(f"c{i}", "", "", False, {r: str(n)} if in_limits else {}, {r: n})
        for i, (r, n, in_limits) in enumerate(asked)
    )
    view = SimpleNamespace(gpu_containers=containers)
    exact = sum((Fraction(n) * WORTHS[r] for r, n, _ in asked), Fraction(0))
    assert _upper_bound_within(view, WORTHS.__getitem__, ceiling) == (exact <= ceiling)
