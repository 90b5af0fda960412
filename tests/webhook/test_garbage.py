"""Whatever arrives, the webhook answers 200 or 400 (JSON), never 5xx, and keeps answering."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import Certificates, Client, LiveServer, loaded_certificate, loaded_sample_store

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Lone surrogates are valid in JSON ("\ud800") but cannot be encoded as UTF-8.
texts = st.text(max_size=20) | st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3)
scalars = st.none() | st.booleans() | st.integers() | st.floats() | texts
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)


def shaped(value: st.SearchStrategy[Any], junk_one_in: int = 3) -> st.SearchStrategy[Any]:
    """`value`, or now and then junk in its place: any field of a review can have a wrong type."""
    return st.integers(1, junk_one_in).flatmap(lambda n: json_values if n == 1 else value)


def envelope(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Junk rarely, so that most reviews get past decoding and exercise the engine."""
    return shaped(value, junk_one_in=12)


quantities = st.sampled_from(["1", "2", "8", "0", "-1", "1.5", "abc", "8Gi", ""]) | st.integers(
    -2, 9
)
gpu_resources = st.sampled_from(
    [
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-9g",
        "cpu",
    ]
)
resource_lists = shaped(st.dictionaries(gpu_resources, shaped(quantities), max_size=3))
containers = st.lists(
    st.fixed_dictionaries(
        {
            "name": shaped(st.sampled_from(["main", "side", ""])),
            "resources": shaped(
                st.fixed_dictionaries(
                    {"limits": resource_lists}, optional={"requests": resource_lists}
                )
            ),
        }
    ),
    max_size=3,
)
pod_specs = st.fixed_dictionaries(
    {"containers": shaped(containers)},
    optional={
        "initContainers": shaped(containers),
        "nodeSelector": shaped(
            st.dictionaries(st.sampled_from(["nvidia.com/gpu.product", "x"]), st.text(max_size=8))
        ),
        "schedulerName": shaped(st.sampled_from(["volcano", "default-scheduler", ""])),
        "priorityClassName": shaped(st.text(max_size=8)),
    },
)
metadata = st.fixed_dictionaries(
    {},
    optional={
        "name": shaped(st.text(max_size=8)),
        "labels": shaped(
            st.dictionaries(
                st.sampled_from(["kueue.x-k8s.io/queue-name", "app"]),
                shaped(st.sampled_from(["inference", "training", "x"])),
            )
        ),
        "annotations": shaped(
            st.dictionaries(
                st.sampled_from(
                    [
                        "quotaguard.dev/gpu-class",
                        "quotaguard.dev/gpu-memory",
                        "quotaguard.dev/rewrite",
                        "scheduling.volcano.sh/queue-name",
                    ]
                ),
                shaped(
                    st.sampled_from(
                        [
                            "h100",
                            "h100-1g.10gb",
                            "shared",
                            "best-fit",
                            "8Gi",
                            "30Gi",
                            "false",
                            "nope",
                        ]
                    )
                ),
            )
        ),
        "ownerReferences": shaped(st.just([{"kind": "Job", "name": "j", "controller": True}])),
    },
)


def workload(api_version: str, kind: str, spec: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {"apiVersion": shaped(st.just(api_version), 12), "kind": shaped(st.just(kind), 12)},
        optional={"metadata": shaped(metadata), "spec": shaped(spec)},
    )


def template(spec: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {"template": shaped(st.fixed_dictionaries({"metadata": metadata, "spec": spec}))}
    )


objects = st.one_of(
    workload("v1", "Pod", pod_specs),
    workload("batch/v1", "Job", template(shaped(pod_specs))),
    workload(
        "batch.volcano.sh/v1alpha1",
        "Job",
        st.fixed_dictionaries(
            {"tasks": shaped(st.lists(template(shaped(pod_specs)), max_size=2))},
            optional={"queue": shaped(st.text(max_size=8))},
        ),
    ),
    workload(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        st.fixed_dictionaries(
            {
                "replicatedJobs": shaped(
                    st.lists(
                        template(
                            shaped(
                                st.fixed_dictionaries(
                                    {"template": shaped(template(shaped(pod_specs)))}
                                )
                            )
                        ),
                        max_size=2,
                    )
                )
            }
        ),
    ),
    workload("apps/v1", "Deployment", template(pod_specs)),
)
reviews = st.fixed_dictionaries(
    {
        "apiVersion": envelope(st.just("admission.k8s.io/v1")),
        "kind": envelope(st.just("AdmissionReview")),
        "request": envelope(
            st.fixed_dictionaries(
                {"uid": envelope(texts)},
                optional={
                    "kind": shaped(
                        st.fixed_dictionaries(
                            {
                                "group": shaped(st.text(max_size=5)),
                                "version": shaped(st.text(max_size=5)),
                                "kind": shaped(st.sampled_from(["Pod", "Job", "JobSet"])),
                            }
                        )
                    ),
                    "namespace": envelope(
                        st.sampled_from(
                            ["inference", "training", "notebooks", "kube-system", "nobody", ""]
                        )
                    ),
                    "operation": envelope(
                        st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"])
                    ),
                    "object": envelope(objects),
                    "oldObject": shaped(objects),
                    "dryRun": shaped(st.booleans()),
                },
            )
        ),
    }
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Client, LiveServer]]:
    directory = tmp_path_factory.mktemp("garbage")
    certificates = Certificates(directory)
    certificate = loaded_certificate(certificates)
    store = loaded_sample_store()
    with LiveServer(store, certificate) as server:
        client = Client(server.webhook_port, certificates.client_context())
        yield client, server
        client.close()


def assert_answered(client: Client, path: str, body: bytes) -> None:
    status, answer = client.post(path, body)
    assert status in (200, 400), (status, answer)
    if status == 400:
        assert isinstance(answer["error"], str)
    else:
        assert answer["kind"] == "AdmissionReview"
        assert isinstance(answer["response"]["allowed"], bool)


@SETTINGS
@given(body=st.binary(max_size=300), path=st.sampled_from(["/mutate", "/validate"]))
def test_random_bytes(live: tuple[Client, LiveServer], body: bytes, path: str) -> None:
    assert_answered(live[0], path, body)


@SETTINGS
@given(value=json_values, path=st.sampled_from(["/mutate", "/validate"]))
def test_random_json(live: tuple[Client, LiveServer], value: Any, path: str) -> None:
    assert_answered(live[0], path, json.dumps(value).encode())


@settings(SETTINGS, max_examples=150)
@given(review=reviews, path=st.sampled_from(["/mutate", "/validate"]))
def test_admission_review_shaped_junk(
    live: tuple[Client, LiveServer], review: Any, path: str
) -> None:
    body = json.dumps(review).encode()
    status, answer = live[0].post(path, body)
    assert status in (200, 400), (status, answer)
    if status == 200:
        # As JSON sees it: an escaped surrogate pair is one character once decoded.
        assert answer["response"]["uid"] == json.loads(json.dumps(review["request"]["uid"]))


def test_still_answering_after_the_junk(live: tuple[Client, LiveServer]) -> None:
    from quotaguard.admission.reviews import make_review

    pod = {"kind": "Pod", "apiVersion": "v1", "spec": {"containers": [{"name": "c"}]}}
    body = json.dumps(make_review(pod, namespace="inference", uid="after")).encode()
    status, answer = live[0].post("/validate", body)
    assert (status, answer["response"]["uid"], answer["response"]["allowed"]) == (
        200,
        "after",
        True,
    )
