"""The sparse decoding of review bodies gives the engine the same answer as decoding them whole.

The webhook decodes only the fields admission reads (`quotaguard.admission.sparse`); everything
else is skipped. If the engine ever reads a field the schema leaves out, its answer on the
sparse review differs from its answer on the whole one, and these tests say where.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaguard.admission import BadReview, review
from quotaguard.admission.sparse import decode_review_body
from quotaguard.admission.sparse_schema import schema_tree
from quotaguard.kube.kinds import KINDS

from .builders import at, gpu, of_kind, template
from .strategies import NAMESPACES, table_workloads, workloads
from .test_odd_input import body_of, odd_objects, places

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "admission"

# What real objects carry that admission never reads: these must not change a decision.
padding = st.sampled_from(
    [
        ("image", "registry.example/app:1"),
        ("env", [{"name": "A", "value": "b"}, {"name": "C", "valueFrom": {"fieldRef": {}}}]),
        ("managedFields", [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]),
        ("volumes", [{"name": "v", "emptyDir": {}}]),
        ("uid", "0b8f6f0e-1d7c-4d1c-9a55-2f3c1e0c7a11"),
        ("creationTimestamp", None),
        ("x-unknown", {"nested": [1, 2.5, "three", None, True, 2**80]}),
    ]
)


@st.composite
def padded(draw: st.DrawFn, objects: st.SearchStrategy[Any]) -> Any:
    obj = draw(objects)
    maps = [path for path in places(obj) if isinstance(at(obj, path), dict)]
    for _ in range(draw(st.integers(0, 4))):
        if not maps:
            break
        key, value = draw(padding)
        target = at(obj, draw(st.sampled_from(maps)))
        target.setdefault(key, copy.deepcopy(value))
    return obj


# Fields the engine reads that the shared strategies leave out or only set as junk.
OPTIONAL_FIELDS = {
    "metadata": [
        ("ownerReferences", [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1"}]),
        ("ownerReferences", [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r"}]),
        ("labels", {"team": "a"}),
    ],
    "pod spec": [
        ("schedulerName", "volcano"),
        ("schedulerName", "default-scheduler"),
        ("priorityClassName", "interactive"),
        ("nodeSelector", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
        ("schedulingGates", [{"name": "kueue.x-k8s.io/admission"}]),
    ],
    "workload spec": [
        ("queue", "training"),
        ("queue", "elsewhere"),
        ("suspend", True),
        ("parallelism", 3),
    ],
    "container": [("restartPolicy", "Always")],
}
OPTIONAL_FIELDS["spec"] = OPTIONAL_FIELDS["pod spec"] + OPTIONAL_FIELDS["workload spec"]


def _role(path: tuple[str | int, ...]) -> str | None:
    if path and path[-1] == "metadata":
        return "metadata"
    if path == ("spec",):  # a Pod's spec, or a Job's, JobSet's or Volcano Job's
        return "spec"
    if path and path[-1] == "spec" and (len(path) == 1 or path[-2] == "template"):
        return "pod spec"
    if len(path) > 1 and isinstance(path[-1], int) and path[-2] in ("containers", "initContainers"):
        return "container"
    return None


@st.composite
def rich(draw: st.DrawFn, objects: st.SearchStrategy[Any]) -> Any:
    """`objects` with optional fields the engine reads set, each now and then, where they
    belong."""
    obj = draw(objects)
    targets = [
        (at(obj, path), _role(path)) for path in places(obj) if isinstance(at(obj, path), dict)
    ]
    for target, role in targets:
        for key, value in OPTIONAL_FIELDS.get(role or "", []):
            if draw(st.integers(0, 3)) == 0:
                target[key] = copy.deepcopy(value)
    return obj


def outcome(policy: Any, document: Any, operation_path: str) -> tuple[str, Any]:
    try:
        return "answer", review(policy, document, operation_path=operation_path)  # type: ignore[arg-type]
    except BadReview as error:
        return "bad request", str(error)


@pytest.fixture(scope="module")
def policies(policy, make_policy):
    """The sample policy on both backends, and one whose first rule reads priority and labels."""
    tenants = yaml.safe_load((ROOT / "config" / "policy.yaml").read_text())["spec"]["tenants"]
    training = next(tenant for tenant in tenants if tenant["name"] == "training")
    training["rewrite"][:0] = [
        {"when": {"priorityClassNames": ["interactive"]}, "to": "h100-3g.40gb"},
        {"when": {"matchLabels": {"team": "a"}}, "to": "h100-3g.40gb"},
    ]
    return {
        "kueue": policy,
        "volcano": make_policy(backend="volcano"),
        "rules": make_policy(tenants=tenants),
    }


SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
paths = st.sampled_from(["mutate", "validate"])
operations = st.sampled_from(["CREATE", "CREATE", "UPDATE"])
backends = st.sampled_from(["kueue", "volcano", "rules"])


def assert_same_answer(policy, obj, namespace, operation_path, operation, old):
    body = json.dumps(body_of(obj, namespace, operation, old)).encode()
    whole = outcome(policy, json.loads(body), operation_path)
    assert outcome(policy, decode_review_body(body), operation_path) == whole


@SETTINGS
@given(
    obj=padded(rich(workloads())),
    namespace=st.sampled_from(["inference", "training", "research-x", "nb-a"]),
    backend=backends,
    operation_path=paths,
    operation=operations,
    old=st.none() | padded(rich(workloads())),
)
def test_workloads_in_tenant_namespaces_get_the_same_answer(
    policies, obj, namespace, backend, operation_path, operation, old
):
    assert_same_answer(policies[backend], obj, namespace, operation_path, operation, old)


@SETTINGS
@given(
    obj=padded(odd_objects),
    namespace=st.sampled_from([*NAMESPACES, "gpu-operator"]),
    backend=backends,
    operation_path=paths,
    operation=operations,
    old=st.none() | padded(workloads()) | odd_objects,
)
def test_odd_objects_get_the_same_answer_or_the_same_bad_request(
    policies, obj, namespace, backend, operation_path, operation, old
):
    assert_same_answer(policies[backend], obj, namespace, operation_path, operation, old)


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.json")), ids=lambda path: path.stem)
@pytest.mark.parametrize("operation_path", ["mutate", "validate"])
def test_fixture_reviews_get_the_same_answer(policy, fixture, operation_path):
    body = fixture.read_bytes()
    whole = outcome(policy, json.loads(body), operation_path)
    assert outcome(policy, decode_review_body(body), operation_path) == whole


def test_a_realistic_pod_is_decoded_without_the_fields_admission_does_not_read(policy):
    sys.path.insert(0, str(ROOT))
    from bench.realistic_pod import mutate_and_validate_bodies

    for body, operation_path in zip(
        mutate_and_validate_bodies(), ["mutate", "validate"], strict=True
    ):
        sparse = decode_review_body(body)
        assert len(json.dumps(sparse)) < len(body) / 4
        container = sparse["request"]["object"]["spec"]["containers"][0]
        assert set(container) == {"name", "resources"}
        assert "managedFields" not in sparse["request"]["object"]["metadata"]
        assert outcome(policy, sparse, operation_path) == outcome(
            policy, json.loads(body), operation_path
        )


@pytest.mark.parametrize(
    "body",
    [
        b'{"apiVersion": "admission.k8s.io/v1", "request": {"uid": "\\ud800"}}',  # lone surrogate
        b'{"apiVersion": "admission.k8s.io/v1", "request": {"object": {"spec": NaN}}}',
        b'{"apiVersion": "admission.k8s.io/v1", "request": {"object": {"spec": []}}}',
        b"[1, 2]",
    ],
    ids=["lone-surrogate", "nan", "wrong-type", "not-a-map"],
)
def test_bodies_the_schema_does_not_fit_are_decoded_whole(body):
    assert decode_review_body(body) == json.loads(body)


@pytest.mark.parametrize("body", [b"", b"{", b'{"a": 1} x', b"\xff\xfe"])
def test_a_body_that_is_not_json_raises_value_error(body):
    with pytest.raises(ValueError):
        decode_review_body(body)


def test_a_body_nested_deeper_than_python_decodes_raises_recursion_error():
    body = b'{"request": {"object": {"metadata": {"x": %s}}}}' % (b"[" * 5000 + b"]" * 5000)
    with pytest.raises(RecursionError):
        decode_review_body(body)


@SETTINGS
@given(
    obj=padded(rich(table_workloads())),
    namespace=st.sampled_from(["inference", "training", "research-x", "nb-a"]),
    backend=backends,
    operation_path=paths,
    operation=operations,
    old=st.none() | padded(table_workloads()),
)
def test_every_kind_of_the_table_gets_the_same_answer(
    policies, obj, namespace, backend, operation_path, operation, old
):
    assert_same_answer(policies[backend], obj, namespace, operation_path, operation, old)


@pytest.mark.parametrize("kind", [k.id for k in KINDS])
def test_every_kind_of_the_table_is_decoded_sparse_with_its_templates(policy, kind):
    """Through the API server a PyTorchJob once arrived as `spec: {}` and was never rewritten:
    each kind's templates survive the schema, and what admission does not read is dropped."""
    templates = [template(gpu(1), env=[{"name": "A", "value": "b"}]) for _ in range(2)]
    obj = of_kind(kind, *templates, annotations={"quotaguard.dev/gpu-memory": "8Gi"})
    body = json.dumps(body_of(obj, "inference", "CREATE", None)).encode()
    sparse = decode_review_body(body)
    assert sparse != json.loads(body)
    text = json.dumps(sparse)
    # An AppWrapper's components are kept whole: any kind may be inside.
    assert ('"env"' not in text and '"image"' not in text) or kind == "AppWrapper"
    answer = outcome(policy, sparse, "mutate")
    assert answer == outcome(policy, json.loads(body), "mutate")
    assert answer[1]["response"]["patch"]  # the templates were found, and rewritten


@pytest.mark.parametrize(
    ("api_version", "kind", "spec"),
    [
        ("apps/v1", "DaemonSet", {"template": {"spec": {"containers": [{"name": "a"}]}}}),
        ("example.com/v1", "Trainer", {"replicaSpecs": {"Worker": {"replicas": 1}}}),
    ],
)
def test_kinds_outside_the_table_are_decoded_whole(api_version, kind, spec):
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w"}, "spec": spec}
    body = json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "request": {"uid": "u", "object": obj}}
    ).encode()
    assert decode_review_body(body) == json.loads(body)


def test_the_schema_has_every_path_of_every_kind():
    tree = schema_tree()
    for kind in KINDS:
        for place in kind.templates:
            node = tree
            for step in place.steps:
                node = node.children[step.field]
                assert node.holder == step.kind
