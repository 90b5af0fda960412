"""Properties over generated workloads: idempotence, patches that apply, no crash on junk."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaguard.admission import make_review, mutate, review_offline, validate
from quotaguard.admission.names import KUEUE_QUEUE_LABEL

from .builders import applied

NAMESPACES = ["inference", "serving-a", "training", "research-x", "nb-a", "notebooks", "default"]
GPU_RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpu",
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-3g.40gb",
    "nvidia.com/gpu.shared",
]
counts = st.one_of(st.integers(0, 9), st.sampled_from(["1", "2", "8", "0.5", "x"]))


@st.composite
def containers(draw, name):
    resources = {}
    shape = draw(st.integers(0, 9))
    if shape < 6:  # the common case: a few whole GPUs, as users write them
        limits = {"nvidia.com/gpu": draw(st.sampled_from([1, 1, "1", 2, 4]))}
        if draw(st.booleans()):
            limits["cpu"] = "1"
        resources["limits"] = limits
    elif shape < 9:
        limits = draw(st.dictionaries(st.sampled_from(GPU_RESOURCES), counts, max_size=2))
        if draw(st.booleans()):
            limits["cpu"] = "1"
        resources["limits"] = limits
        if draw(st.integers(0, 3)) == 0:
            resources["requests"] = dict(limits)
    found = {"name": name, "image": "app"}
    if resources or draw(st.booleans()):
        found["resources"] = resources
    return found


annotations = st.dictionaries(
    st.sampled_from(
        [
            "quotaguard.dev/gpu-memory",
            "quotaguard.dev/gpu-class",
            "quotaguard.dev/rewrite",
            "a.example/b~c",
        ]
    ),
    st.sampled_from(["8Gi", "24Gi", "40Gi", "100Gi", "h100", "h100-1g.10gb", "shared", "false"]),
    max_size=3,
)


@st.composite
def pod_specs(draw):
    names = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))
    spec = {"containers": [draw(containers(n)) for n in names]}
    if draw(st.booleans()):
        spec["initContainers"] = [draw(containers("init"))]
    if draw(st.integers(0, 3)) == 0:
        spec["nodeSelector"] = draw(
            st.sampled_from([{"zone": "a"}, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}])
        )
    if draw(st.integers(0, 3)) == 0:
        spec["priorityClassName"] = "interactive"
    return spec


@st.composite
def metadatas(draw):
    metadata = {"name": "w"}
    if draw(st.booleans()):
        metadata["annotations"] = draw(annotations)
    if draw(st.integers(0, 3)) == 0:
        metadata["labels"] = {KUEUE_QUEUE_LABEL: draw(st.sampled_from(["training", "x"]))}
    return metadata


@st.composite
def workloads(draw):
    kind = draw(st.sampled_from(["Pod", "Pod", "Job", "VolcanoJob", "JobSet"]))
    metadata = draw(metadatas())
    template = {"spec": draw(pod_specs())}
    if draw(st.booleans()):
        template["metadata"] = draw(metadatas())
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}
    if kind == "Job":
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata,
            "spec": {"template": template},
        }
    if kind == "VolcanoJob":
        other = {"spec": draw(pod_specs())}
        return {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": metadata,
            "spec": {
                "tasks": [{"name": "a", "template": template}, {"name": "b", "template": other}]
            },
        }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {"replicatedJobs": [{"name": "r", "template": {"spec": {"template": template}}}]},
    }


@pytest.fixture(scope="module")
def volcano_policy(make_policy):
    return make_policy(backend="volcano")


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(workloads(), st.sampled_from(NAMESPACES), st.booleans())
def test_mutating_the_mutated_object_yields_no_patch(
    policy, volcano_policy, obj, namespace, volcano
):
    chosen = volcano_policy if volcano else policy
    original = copy.deepcopy(obj)
    first = mutate(chosen, obj, namespace)
    assert obj == original  # pure
    if not first.allowed:
        return
    once = applied(obj, first)
    second = mutate(chosen, once, namespace)
    assert second.allowed
    assert second.patch == (), second.patch


@SETTINGS
@given(workloads(), st.sampled_from(NAMESPACES))
def test_offline_review_returns_the_patched_object(policy, obj, namespace):
    response, patched = review_offline(policy, make_review(obj, namespace=namespace, uid="u"))
    answer = response["response"]
    assert answer["uid"] == "u"
    if answer["allowed"]:
        mutation = mutate(policy, obj, namespace)
        assert patched == applied(obj, mutation)
        assert validate(policy, patched, namespace).allowed
    else:
        assert patched == obj
        assert answer["status"]["code"] == 403
        assert "patch" not in answer


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "spec",
                    "metadata",
                    "containers",
                    "resources",
                    "limits",
                    "requests",
                    "nvidia.com/gpu",
                    "template",
                    "tasks",
                    "annotations",
                    "labels",
                    "name",
                    "initContainers",
                    "nodeSelector",
                    "ownerReferences",
                    "replicatedJobs",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=30,
)


@settings(max_examples=120, deadline=None)
@given(
    st.sampled_from(
        [
            ("v1", "Pod"),
            ("batch/v1", "Job"),
            ("batch.volcano.sh/v1alpha1", "Job"),
            ("jobset.x-k8s.io/v1alpha2", "JobSet"),
        ]
    ),
    st.dictionaries(st.sampled_from(["spec", "metadata"]), json_values, max_size=2),
    st.sampled_from(NAMESPACES),
)
def test_malformed_objects_never_crash(policy, type_meta, body, namespace):
    obj = {"apiVersion": type_meta[0], "kind": type_meta[1], **body}
    decision = mutate(policy, obj, namespace)
    if decision.allowed and decision.patch:
        applied(obj, decision)
    validate(policy, obj, namespace)
