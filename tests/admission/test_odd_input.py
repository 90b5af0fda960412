"""Odd input: well-shaped AdmissionReviews with a wrong type somewhere in the object.

Whatever the object holds, the engine either answers (a response the API server can use: its
patch applies to the object) or raises `BadReview` (HTTP 400), never anything else.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaguard.admission import BadReview, make_review, review, review_offline

from .builders import at, gpu, inference_pod, job, jobset, pod, template, volcano_job
from .strategies import GPU_RESOURCES, NAMESPACES, workloads

# Field names of the objects admission reads, so that junk also lands where a field was absent.
FIELDS = [
    "metadata",
    "spec",
    "name",
    "namespace",
    "labels",
    "annotations",
    "ownerReferences",
    "template",
    "tasks",
    "replicatedJobs",
    "containers",
    "initContainers",
    "resources",
    "limits",
    "requests",
    "nodeSelector",
    "schedulerName",
    "priorityClassName",
    "queue",
    "restartPolicy",
    "kind",
    "apiVersion",
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "kueue.x-k8s.io/queue-name",
    "scheduling.volcano.sh/queue-name",
    "quotaguard.dev/gpu-class",
    "quotaguard.dev/gpu-memory",
    "quotaguard.dev/rewrite",
    "quotaguard.dev/rewritten",
    "nvidia.com/gpu.product",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.sampled_from([float("inf"), float("-inf"), float("nan"), 1.5, 10**30])
    | st.text(max_size=6)
    | st.sampled_from(["1", "8Gi", "1e999999999", "h100", "false", "training", ""])
)
junk = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def sometimes_junk(value: st.SearchStrategy[Any], one_in: int = 25) -> st.SearchStrategy[Any]:
    """`value`, or now and then junk or null (which Go decodes as an absent field) in its place."""
    return st.integers(1, one_in).flatmap(
        lambda n: junk if n == 1 else st.none() if n == 2 else value
    )


def string_map(keys: list[str], values: list[str]) -> st.SearchStrategy[Any]:
    return sometimes_junk(
        st.dictionaries(st.sampled_from(keys), sometimes_junk(st.sampled_from(values)), max_size=3)
    )


quantities = sometimes_junk(
    st.sampled_from(
        ["1", "2", "8", "0", "0.5", "8Gi", "1e999999999", "9" * 5000, 1, 2, 4, 9, -1, 1.0, 1e300]
    )
)
resource_lists = sometimes_junk(
    st.dictionaries(
        st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu", *GPU_RESOURCES, "cpu"]),
        quantities,
        max_size=3,
    )
)
containers = sometimes_junk(
    st.lists(
        sometimes_junk(
            st.fixed_dictionaries(
                {"name": sometimes_junk(st.sampled_from(["main", "side", "init"]))},
                optional={
                    "resources": sometimes_junk(
                        st.fixed_dictionaries(
                            {"limits": resource_lists}, optional={"requests": resource_lists}
                        )
                    ),
                    "restartPolicy": sometimes_junk(st.just("Always")),
                },
            )
        ),
        min_size=1,
        max_size=3,
    )
)
pod_specs = sometimes_junk(
    st.fixed_dictionaries(
        {"containers": containers},
        optional={
            "initContainers": containers,
            "nodeSelector": string_map(
                ["nvidia.com/gpu.product", "zone"],
                ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "a"],
            ),
            "schedulerName": sometimes_junk(st.sampled_from(["volcano", "default-scheduler", ""])),
            "priorityClassName": sometimes_junk(st.sampled_from(["interactive", "batch"])),
        },
    )
)
annotations = string_map(
    [
        "quotaguard.dev/gpu-class",
        "quotaguard.dev/gpu-memory",
        "quotaguard.dev/gpu-memory",
        "quotaguard.dev/rewrite",
        "quotaguard.dev/rewritten",
        "scheduling.volcano.sh/queue-name",
    ],
    ["h100", "h100-1g.10gb", "shared", "8Gi", "40Gi", "1e999999999", "false", "training", ""],
)
labels = string_map(["kueue.x-k8s.io/queue-name", "app"], ["training", "inference", "web"])
owner_references = sometimes_junk(
    st.lists(
        sometimes_junk(
            st.fixed_dictionaries(
                {
                    "apiVersion": sometimes_junk(st.sampled_from(["batch/v1", "apps/v1"])),
                    "kind": sometimes_junk(st.sampled_from(["Job", "ReplicaSet"])),
                    "name": st.just("parent"),
                    "uid": st.just("00000000-0000-4000-8000-000000000001"),
                }
            )
        ),
        max_size=2,
    )
)
metadatas = sometimes_junk(
    st.fixed_dictionaries(
        {"name": sometimes_junk(st.just("work"))},
        optional={
            "namespace": sometimes_junk(st.sampled_from(NAMESPACES)),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": owner_references,
        },
    )
)
templates = sometimes_junk(
    st.fixed_dictionaries({"spec": pod_specs}, optional={"metadata": metadatas})
)
names = sometimes_junk(st.sampled_from(["workers", "ps"]))


def kind(api_version: str, kind: str, spec: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {"apiVersion": st.just(api_version), "kind": st.just(kind), "spec": spec},
        optional={"metadata": metadatas},
    )


def listed(item: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return sometimes_junk(st.lists(sometimes_junk(item), min_size=1, max_size=2))


schema_objects = st.one_of(
    kind("v1", "Pod", pod_specs),
    kind("batch/v1", "Job", sometimes_junk(st.fixed_dictionaries({"template": templates}))),
    kind(
        "batch.volcano.sh/v1alpha1",
        "Job",
        sometimes_junk(
            st.fixed_dictionaries(
                {"tasks": listed(st.fixed_dictionaries({"name": names, "template": templates}))},
                optional={
                    "queue": sometimes_junk(st.sampled_from(["training", "inference", ""])),
                    "schedulerName": sometimes_junk(st.sampled_from(["volcano", ""])),
                },
            )
        ),
    ),
    kind(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        sometimes_junk(
            st.fixed_dictionaries(
                {
                    "replicatedJobs": listed(
                        st.fixed_dictionaries(
                            {
                                "name": names,
                                "template": sometimes_junk(
                                    st.fixed_dictionaries(
                                        {
                                            "spec": sometimes_junk(
                                                st.fixed_dictionaries({"template": templates})
                                            )
                                        }
                                    )
                                ),
                            }
                        )
                    )
                }
            )
        ),
    ),
)


def places(node: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """The path of every value inside `node` (maps and lists included), `node` first."""
    found = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            found.extend(places(value, (*path, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(places(value, (*path, index)))
    return found


@st.composite
def junk_injected(draw: st.DrawFn) -> dict[str, Any]:
    """A well-formed workload with one to three values replaced by (or fields added as) junk."""
    obj = draw(workloads())
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(places(obj)[1:]))
        target = at(obj, path)
        value = draw(junk)
        if isinstance(target, dict) and draw(st.booleans()):
            target[draw(st.sampled_from(FIELDS))] = value
        else:
            at(obj, path[:-1])[path[-1]] = value
    return obj


# Every field of the schema junk now and then, and junk anywhere in generated workloads.
odd_objects = schema_objects | junk_injected()


def assert_answer(answer: Any, uid: str, obj: dict[str, Any]) -> None:
    """A response the API server can use: encodable as strict JSON, and a patch that applies."""
    json.dumps(answer, allow_nan=False)
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == uid
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert response["status"]["code"] == 403
        assert response["status"]["message"]
        assert "patch" not in response
    if "patch" in response:
        ops = json.loads(base64.b64decode(response["patch"]))
        jsonpatch.apply_patch(obj, ops)


def assert_bad_review_names_a_field(error: BadReview) -> None:
    assert "request.object" in str(error) or "request.oldObject" in str(error), str(error)


@pytest.fixture(scope="module")
def policies(policy, make_policy):
    return {"kueue": policy, "volcano": make_policy(backend="volcano")}


SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
operations = st.sampled_from(["CREATE", "CREATE", "CREATE", "UPDATE"])


def body_of(obj: dict[str, Any], namespace: str, operation: str, old: Any) -> dict[str, Any]:
    body: dict[str, Any] = make_review(obj, namespace=namespace, operation=operation, uid="odd")
    if operation == "UPDATE":
        body["request"]["oldObject"] = old
    return body


@SETTINGS
@given(
    obj=odd_objects,
    namespace=st.sampled_from([*NAMESPACES, "gpu-operator"]),
    backend=st.sampled_from(["kueue", "volcano"]),
    operation_path=st.sampled_from(["mutate", "validate"]),
    operation=operations,
    old=st.none() | workloads() | odd_objects,
)
def test_review_answers_or_raises_bad_review(
    policies, obj, namespace, backend, operation_path, operation, old
):
    original = copy.deepcopy(obj)
    body = body_of(obj, namespace, operation, old)
    try:
        answer = review(policies[backend], body, operation_path=operation_path)
    except BadReview as error:
        assert_bad_review_names_a_field(error)
        return
    assert_answer(answer, "odd", original)
    assert obj == original  # deciding never changes the request


@SETTINGS
@given(
    obj=odd_objects,
    namespace=st.sampled_from([*NAMESPACES, "gpu-operator"]),
    backend=st.sampled_from(["kueue", "volcano"]),
    operation=operations,
    old=st.none() | odd_objects,
)
def test_offline_review_answers_or_raises_bad_review(
    policies, obj, namespace, backend, operation, old
):
    original = copy.deepcopy(obj)
    try:
        answer, stored = review_offline(policies[backend], body_of(obj, namespace, operation, old))
    except BadReview as error:
        assert_bad_review_names_a_field(error)
        return
    assert_answer(answer, "odd", original)
    assert isinstance(stored, dict)
    assert obj == original


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            inference_pod(("metadata labels", [])),
            "request.object.metadata.labels must be a map of strings, not a list",
        ),
        (
            inference_pod(("metadata annotations", {"quotaguard.dev/gpu-class": ["h100"]})),
            "request.object.metadata.annotations[quotaguard.dev/gpu-class] must be a string, "
            "not a list",
        ),
        (
            inference_pod(("metadata annotations", {"quotaguard.dev/rewrite": False})),
            "annotations[quotaguard.dev/rewrite] must be a string, not a boolean",
        ),
        (inference_pod(("metadata", [])), "request.object.metadata must be a map, not a list"),
        (
            inference_pod(("spec initContainers", [{"name": "a", "resources": {"limits": 8}}])),
            "request.object.spec.initContainers[0].resources.limits must be a map, not a number",
        ),
        (inference_pod(("spec", "x")), "request.object.spec must be a map, not a string"),
        (
            inference_pod(("spec nodeSelector", {"zone": 1})),
            "spec.nodeSelector[zone] must be a string, not a number",
        ),
        (inference_pod(("spec containers", {})), "spec.containers must be a list, not a map"),
        (inference_pod(("spec containers 0", "main")), "spec.containers[0] must be a map"),
        (inference_pod(("spec containers 0 name", ["a"])), "containers[0].name must be a string"),
        (
            inference_pod(("spec containers 0 resources", [])),
            "spec.containers[0].resources must be a map, not a list",
        ),
        (
            inference_pod(("spec containers 0 resources requests", [])),
            "spec.containers[0].resources.requests must be a map, not a list",
        ),
        (
            job(template(gpu(), labels={"team": 1})),
            "request.object.spec.template.metadata.labels[team] must be a string",
        ),
        (job({"spec": []}), "request.object.spec.template.spec must be a map, not a list"),
        (
            {**volcano_job(), "spec": {"tasks": "workers"}},
            "request.object.spec.tasks must be a list, not a string",
        ),
        (
            {**volcano_job(), "spec": {"tasks": [{"name": 3}]}},
            "request.object.spec.tasks[0].name must be a string, not a number",
        ),
        (
            {**jobset(), "spec": {"replicatedJobs": [{"template": {"spec": {"template": []}}}]}},
            "request.object.spec.replicatedJobs[0].template.spec.template must be a map",
        ),
    ],
)
def test_fields_the_api_server_cannot_decode_are_bad_requests(policy, obj, message):
    for operation_path in ("mutate", "validate"):
        body = make_review(obj, namespace="inference")
        with pytest.raises(BadReview) as caught:
            review(policy, body, operation_path=operation_path)
        assert message in str(caught.value)


def test_an_old_object_of_the_wrong_shape_is_a_bad_request(policy):
    body = make_review(inference_pod(), namespace="inference", operation="UPDATE")
    body["request"]["oldObject"] = inference_pod(("metadata labels", "x"))
    with pytest.raises(BadReview, match=r"request\.oldObject\.metadata\.labels must be a map"):
        review(policy, body, operation_path="validate")
    body["request"]["oldObject"] = ["not", "an", "object"]
    with pytest.raises(BadReview, match=r"request\.oldObject must be an object or null"):
        review(policy, body, operation_path="validate")


def test_other_kinds_are_not_checked(policy):
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"labels": []}}
    answer = review(policy, make_review(config_map, namespace="inference"), operation_path="mutate")
    assert answer["response"] == {"uid": answer["response"]["uid"], "allowed": True}


def mutated(policy, obj, namespace="inference"):
    """The object as stored after mutation, and the answer of validating it."""
    answer, stored = review_offline(policy, make_review(obj, namespace=namespace, uid="u"))
    return answer["response"], stored


@pytest.mark.parametrize(
    "changes",
    [
        [("metadata labels", None)],
        [("metadata annotations", {"quotaguard.dev/gpu-memory": "8Gi", "note": None})],
        [("spec nodeSelector", None)],
        [("spec initContainers", [None])],
        [("spec containers 0 resources requests", None)],
        [("spec containers 0 resources limits cpu", None)],
        [("spec containers 0 resources limits nvidia.com/gpu", 1.0)],
    ],
)
def test_null_and_float_fields_decide_as_go_decodes_them(policy, changes):
    """null is an absent field, 1.0 a quantity: the pod is rewritten as if they were not odd."""
    answer, stored = mutated(policy, inference_pod(*changes))
    assert answer["allowed"], answer
    limits = stored["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/mig-1g.10gb"] == "1"
    assert stored["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "inference"


def test_owner_references_of_odd_types_are_no_owners(policy):
    owners = [{"apiVersion": "batch/v1", "kind": {"a": 1}}, "x", None]
    answer, _ = mutated(policy, inference_pod(("metadata ownerReferences", owners)))
    assert answer["allowed"]
    assert answer["auditAnnotations"]["rewritten"].endswith("nvidia.com/mig-1g.10gb=1")


def test_a_null_metadata_is_filled_in(policy):
    obj = pod(gpu(4))
    obj["metadata"] = None
    answer, stored = mutated(policy, obj, "training")
    assert answer["allowed"]
    assert stored["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "training"}


@pytest.mark.parametrize(
    "amount",
    [None, True, [1], {"n": 1}, float("inf"), float("nan"), "1e999999999", "9" * 5000, "1e-99999"],
)
def test_gpu_amounts_that_are_no_whole_number_are_denied_at_once(policy, amount):
    answer, _ = mutated(policy, pod(gpu(amount)), "training")
    assert not answer["allowed"]
    assert answer["auditAnnotations"]["denied"] == "gpu-value"


def test_an_absurd_memory_hint_is_ignored_with_a_warning(policy):
    obj = pod(gpu(), annotations={"quotaguard.dev/gpu-memory": "1e999999999"})
    answer, _ = mutated(policy, obj, "training")
    assert answer["allowed"]
    assert any("is not a memory size" in warning for warning in answer["warnings"])


def test_exempt_namespaces_are_not_read(policy):
    odd = inference_pod(("metadata labels", []))
    answer = review(policy, make_review(odd, namespace="kube-system"), operation_path="validate")
    assert answer["response"]["allowed"]
