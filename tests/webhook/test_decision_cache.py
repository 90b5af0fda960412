"""The webhook's decision cache: replica pods answered from it, and never an answer the engine
would not give now.

The property at the end sends random sequences of requests (replicas, UPDATEs, denials, every
endpoint, usernames, dry runs) with policy swaps between them to a live webhook with the cache,
and holds each answer byte-identical to the uncached answer of the same bytes under the policy
then in force.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaguard.admission.answers import answer
from quotaguard.admission.decision_cache import (
    ENTRY_OVERHEAD_BYTES,
    SAMPLE_WHEN_COLD,
    WINDOW,
    DecisionCache,
    key_of,
)
from quotaguard.admission.reviews import make_review
from quotaguard.admission.sparse import decode_review_body
from quotaguard.kube.dra import DraObjects
from quotaguard.metrics.registry import REGISTRY
from quotaguard.policy.loader import load_policy_file, load_policy_text
from quotaguard.policy.model import TenantPolicy
from quotaguard.serve.policystore import PolicyStore
from quotaguard.webhook.runtime_cache import RuntimeCache
from tests.admission.test_trainjob_runtime import runtime, trainjob
from tests.webhook.test_runtime_cache import lister

from .conftest import SAMPLE_POLICY, Certificates, LiveServer, loaded_certificate
from .test_same_answers import RawClient

SAMPLE_TEXT = SAMPLE_POLICY.read_text()
# The sample policy, and two that answer the same pods otherwise: the inference tenant's pods
# go to the larger slice and `serving-*` moves to training; unowned namespaces are allowed and
# training may ask only 1 GPU per pod.
POLICY_TEXTS = (
    SAMPLE_TEXT,
    SAMPLE_TEXT.replace("        - when: {gpus: 1}\n          to: best-fit\n", "")
    .replace('namespaces: [inference, "serving-*"]', "namespaces: [inference]")
    .replace('namespaces: [training, "research-*"]', 'namespaces: [training, "serving-*"]'),
    SAMPLE_TEXT.replace("unmatchedNamespaces: deny", "unmatchedNamespaces: allow").replace(
        "maxGPUsPerPod: 8", "maxGPUsPerPod: 1"
    ),
)
REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"


def replica(
    gpus: Any = "1",
    *,
    memory: str | None = "10Gi",
    owner: str | None = "ReplicaSet",
    labels: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod of a ReplicaSet as its controller sends it: a new name and uid every time."""
    suffix = uuid.uuid4().hex[:5]
    metadata: dict[str, Any] = {
        "name": f"embedder-7d4f9c-{suffix}",
        "generateName": "embedder-7d4f9c-",
        "uid": str(uuid.uuid4()),
        "labels": labels
        if labels is not None
        else {"app": "embedder", "pod-template-hash": "7d4f9c"},
    }
    if memory is not None:
        metadata["annotations"] = {"quotaguard.dev/gpu-memory": memory}
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner, "name": "embedder-7d4f9c", "uid": "rs-1",
             "controller": True},
        ]  # fmt: skip
    resources = {"limits": {"nvidia.com/gpu": gpus}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "main", "image": "embedder:1", "resources": resources}]},
    }


def review_body(
    obj: dict[str, Any],
    namespace: str = "inference",
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    username: str | None = REPLICASET_CONTROLLER,
    uid: str | None = None,
    dry_run: bool = False,
    name: str | None = None,
) -> bytes:
    review = make_review(
        obj,
        namespace=namespace,
        operation=operation,
        old_object=old,
        username=username,
        uid=uid,
        dry_run=dry_run,
    )
    request: dict[str, Any] = dict(review["request"])
    request.pop("name", None)  # the API server sends no name for a generated one
    if name is not None:
        request["name"] = name
    if username is not None:
        request["userInfo"] = {"username": username, "groups": [f"g-{uuid.uuid4().hex[:4]}"]}
    return json.dumps({**review, "request": request}).encode()


@pytest.fixture
def policy() -> TenantPolicy:
    return load_policy_file(SAMPLE_POLICY)


def test_replica_pods_are_answered_from_the_cache_as_the_engine_would(policy) -> None:
    cache = DecisionCache()
    first, second = review_body(replica()), review_body(replica())
    assert answer(policy, first, "mutate", cache=cache).cached == "miss"
    hit = answer(policy, second, "mutate", cache=cache)
    assert hit.cached == "hit"
    assert (hit.status, hit.body, hit.kind, hit.result) == _uncached(policy, second, "mutate")
    assert json.loads(hit.body)["response"]["uid"] == json.loads(second)["request"]["uid"]
    assert hit.result == "mutated"


def _uncached(policy: TenantPolicy, body: bytes, path: Any) -> tuple[int, bytes, str, str]:
    decided = answer(policy, body, path)
    return decided.status, decided.body, decided.kind, decided.result


def test_denials_are_kept_with_their_metric_labels(policy) -> None:
    cache = DecisionCache()
    answer(policy, review_body(replica("2")), "validate", cache=cache)
    hit = answer(policy, review_body(replica("2")), "validate", cache=cache)
    assert (hit.cached, hit.result) == ("hit", "denied")
    assert ("inference", "max-gpus-per-pod") in hit.denials
    assert hit.denials == answer(policy, review_body(replica("2")), "validate").denials


# Each pair differs in one input the engine reads: never one answer for both.
DIFFERENT_INPUTS = {
    "namespace": (review_body(replica()), review_body(replica(), "serving-a")),
    "GPU amount": (review_body(replica()), review_body(replica("2"))),
    "a label": (review_body(replica()), review_body(replica(labels={"app": "other"}))),
    "username": (review_body(replica()), review_body(replica(), username="alice")),
    "no userInfo": (review_body(replica()), review_body(replica(), username=None)),
    "request name": (review_body(replica()), review_body(replica(), name="embedder-x")),
    "operation": (
        review_body(replica()),
        review_body(replica(), operation="UPDATE", old=replica()),
    ),
    "old object": (
        review_body(replica(), operation="UPDATE", old=replica()),
        review_body(replica(), operation="UPDATE", old=replica("2")),
    ),
    "int and string": (review_body(replica(1)), review_body(replica("1"))),
}


@pytest.mark.parametrize("name", list(DIFFERENT_INPUTS))
def test_requests_that_differ_in_what_the_engine_reads_have_different_keys(name) -> None:
    one, other = (decode_review_body(body) for body in DIFFERENT_INPUTS[name])
    assert key_of("mutate", one) != key_of("mutate", other)


def test_what_the_engine_never_reads_shares_a_key() -> None:
    """The pod's name, uid and generateName, the request's uid and dryRun, and userInfo but
    its username."""
    keys = {
        key_of("mutate", decode_review_body(review_body(replica(), dry_run=dry_run))).digest  # type: ignore[union-attr]
        for dry_run in (False, True, False)
    }
    assert len(keys) == 1
    assert key_of("validate", decode_review_body(review_body(replica()))).digest not in keys  # type: ignore[union-attr]


def test_replicas_named_by_the_api_server_share_a_key(policy) -> None:
    """The API server sends each replica's generated name as the request's name."""
    cache = DecisionCache()
    for name in ("embedder-7d4f9c-x1", "embedder-7d4f9c-x2"):
        decided = answer(policy, review_body(replica(), name=name), "validate", cache=cache)
    assert decided.cached == "hit"


def test_a_denial_naming_the_object_is_decided_for_each_name(policy) -> None:
    """A ReplicaSet's Pod created by someone else is refused naming the Pod: never with
    another Pod's name."""
    cache = DecisionCache()
    for name in ("made-by-alice-1", "made-by-alice-2"):
        body = review_body(replica(), username="alice", name=name)
        decided = answer(policy, body, "validate", cache=cache)
        assert f'Pod \\"{name}\\"' in decided.body.decode()
        assert decided.cached == "miss"
        assert decided.body == answer(policy, body, "validate").body
    assert cache.entries == 0


@pytest.mark.parametrize("uid", ['a"b', "a\\b", "é", "\x7f", ""])
def test_a_uid_that_cannot_be_spliced_is_decided_every_time(policy, uid) -> None:
    cache = DecisionCache()
    body = review_body(replica(), uid=uid or None)
    document = json.loads(body)
    document["request"]["uid"] = uid
    body = json.dumps(document).encode()
    for _ in range(2):
        decided = answer(policy, body, "mutate", cache=cache)
        assert decided.cached == ""
        assert decided.body == answer(policy, body, "mutate").body
    assert cache.entries == 0


def test_a_new_policy_empties_the_cache(policy) -> None:
    cache = DecisionCache()
    answer(policy, review_body(replica()), "mutate", cache=cache)
    swapped = load_policy_text(POLICY_TEXTS[1], "swapped.yaml")
    body = review_body(replica())
    decided = answer(swapped, body, "mutate", cache=cache)
    assert decided.cached == "miss"
    assert decided.body == answer(swapped, body, "mutate").body
    assert cache.entries == 1
    assert answer(policy, review_body(replica()), "mutate", cache=cache).cached == "miss"


def test_an_answer_that_read_the_cluster_is_not_kept(policy) -> None:
    reads = iter(range(100))
    cache = DecisionCache(cluster_reads=lambda: next(reads))
    for _ in range(2):
        assert answer(policy, review_body(replica()), "mutate", cache=cache).cached == "miss"
    assert cache.entries == 0


def test_a_trainjob_is_decided_with_the_runtimes_read_now(policy) -> None:
    """The runtimes change between two identical TrainJobs: each gets the answer of the
    runtimes of its time, not the first one's."""
    listed: dict[str, Any] = {"clustertrainingruntimes": [runtime(9)], "trainingruntimes": []}
    runtimes = RuntimeCache(lister(listed))
    runtimes.refresh()
    cache = DecisionCache(cluster_reads=runtimes.cluster_reads)
    body = json.dumps(make_review(trainjob(), namespace="training")).encode()
    first = answer(policy, body, "validate", review=runtimes.review, cache=cache)
    listed["clustertrainingruntimes"] = [runtime(2)]
    runtimes.refresh()
    second = answer(policy, body, "validate", review=runtimes.review, cache=cache)
    assert (first.result, second.result) == ("denied", "allowed")
    assert cache.entries == 0


def test_a_pod_with_dra_claims_is_decided_with_the_claims_read_now(policy) -> None:
    runtimes = RuntimeCache(None)
    runtimes.dra = DraObjects()
    cache = DecisionCache(cluster_reads=runtimes.cluster_reads)
    pod = replica()
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    for _ in range(2):
        decided = answer(policy, review_body(pod), "validate", review=runtimes.review, cache=cache)
        assert decided.cached == "miss"
    assert runtimes.cluster_reads() > 0
    assert cache.entries == 0


def test_entries_and_bytes_are_bounded(policy) -> None:
    cache = DecisionCache(max_entries=3)
    for gpus in range(1, 6):
        answer(policy, review_body(replica(str(gpus))), "mutate", cache=cache)
    assert cache.entries == 3
    one_entry = cache.size_bytes // 3
    small = DecisionCache(max_bytes=2 * one_entry + ENTRY_OVERHEAD_BYTES // 2)
    for gpus in range(1, 6):
        answer(policy, review_body(replica(str(gpus))), "mutate", cache=small)
    assert small.entries == 2
    assert small.size_bytes <= small.max_bytes
    # the most recently used stays: gpus 4 and 5
    assert answer(policy, review_body(replica("5")), "mutate", cache=small).cached == "hit"


def test_a_cache_that_finds_nothing_looks_up_one_request_in_eight(policy) -> None:
    """Distinct requests cost the key on every request only until a window shows the cache
    finds nothing; replicas after them are found again from the second sampled one."""
    cache = DecisionCache()
    for index in range(WINDOW):
        answer(policy, review_body(replica(labels={"n": str(index)})), "mutate", cache=cache)
    assert cache.cold
    looked_up = [
        answer(policy, review_body(replica(labels={"m": str(i)})), "mutate", cache=cache).cached
        for i in range(2 * SAMPLE_WHEN_COLD)
    ]
    assert looked_up.count("miss") == 2
    assert looked_up.count("") == 2 * SAMPLE_WHEN_COLD - 2
    replicas = [
        answer(policy, review_body(replica()), "mutate", cache=cache).cached
        for _ in range(3 * SAMPLE_WHEN_COLD)
    ]
    assert not cache.cold
    assert replicas[-SAMPLE_WHEN_COLD:] == ["hit"] * SAMPLE_WHEN_COLD


def test_an_answer_that_echoes_its_uid_elsewhere_is_not_kept(policy) -> None:
    cache = DecisionCache()
    key = key_of("mutate", json.loads(review_body(replica(), uid="u-42")))
    assert key is not None
    body = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u-42"'
    labels = ("Pod", "denied", ())
    assert not cache.put(policy, key, body + b',"status":{"message":"uid u-42"}}}', labels)
    assert cache.put(policy, key, body + b',"allowed":false}}', labels)
    assert not cache.put(policy, key, body + b"}}", ("Pod", "error", ()))


# -- through the live webhook ------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RawClient, PolicyStore, Path]]:
    directory = tmp_path_factory.mktemp("decision-cache")
    policy_file = directory / "policy.yaml"
    policy_file.write_text(POLICY_TEXTS[0])
    store = PolicyStore(policy_file)
    store.load()
    certificates = Certificates(directory)
    cache = DecisionCache(sample_when_cold=1)  # every request looked up, whatever it finds
    with LiveServer(store, loaded_certificate(certificates), cache=cache) as server:
        yield RawClient(server.webhook_port, certificates), store, policy_file


def _swap(store: PolicyStore, policy_file: Path, index: int) -> None:
    if policy_file.read_text() != POLICY_TEXTS[index]:
        policy_file.write_text(POLICY_TEXTS[index])
        assert store.reload_if_changed()


def _counted(name: str, operation: str) -> float:
    value = REGISTRY.get_sample_value(f"quotaguard_webhook_decision_cache_{name}_total",
                                      {"operation": operation})  # fmt: skip
    return value or 0.0


def test_a_policy_reload_is_seen_by_the_next_request(live) -> None:
    client, store, policy_file = live
    _swap(store, policy_file, 0)
    hits = _counted("hits", "mutate")
    for _ in range(2):
        status, sent = client.post("/mutate", review_body(replica(memory="10Gi")))
        assert "nvidia.com/mig-1g.10gb" in _patch_of(sent)
    assert _counted("hits", "mutate") == hits + 1
    _swap(store, policy_file, 1)  # no best-fit rule: the larger slice
    status, sent = client.post("/mutate", review_body(replica(memory="10Gi")))
    assert status == 200
    assert "nvidia.com/mig-3g.40gb" in _patch_of(sent)
    _swap(store, policy_file, 0)


def test_a_namespace_moved_to_another_tenant_is_seen_by_the_next_request(live) -> None:
    """Tenants are the policy's namespace patterns (no namespace label is read): a policy
    that moves `serving-*` from inference to training answers its next pod as training's."""
    client, store, policy_file = live
    _swap(store, policy_file, 0)
    for _ in range(2):
        _, sent = client.post("/validate", review_body(replica("2"), "serving-a"))
        assert json.loads(sent)["response"]["allowed"] is False
    _swap(store, policy_file, 1)
    _, sent = client.post("/validate", review_body(replica("2"), "serving-a"))
    assert json.loads(sent)["response"]["allowed"] is True
    _swap(store, policy_file, 0)


def _patch_of(sent: bytes) -> str:
    import base64

    return base64.b64decode(json.loads(sent)["response"].get("patch", "")).decode()


OWNERS = st.sampled_from([None, "ReplicaSet", "Job"])
PODS = st.builds(
    lambda gpus, memory, owner, app: replica(gpus, memory=memory, owner=owner, labels=app),
    st.sampled_from(["1", "2", "0", "1.5", 1, "x", "9"]),
    st.sampled_from([None, "10Gi", "40Gi", "lots"]),
    OWNERS,
    st.sampled_from([None, {"app": "a"}, {"kueue.x-k8s.io/queue-name": "training"}]),
)
# What a request is made of but its name: a few of them per example, each sent many times
# (replicas), so that most requests could be answered from the cache.
REQUESTS = st.fixed_dictionaries(
    {
        "pod": PODS,
        "namespace": st.sampled_from(
            ["inference", "training", "serving-a", "nb-1", "kube-system", "nobody"]
        ),
        "path": st.sampled_from(["mutate", "validate"]),
        "update_of": st.one_of(st.none(), st.none(), PODS),  # CREATEs twice as often
        "username": st.sampled_from([REPLICASET_CONTROLLER, "alice", "alice", None]),
        "dry_run": st.booleans(),
    }
)
NAMES = st.sampled_from([None, "", "p-1", "p-2", "p-3", "inference", 'q"1'])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("swap"), st.integers(0, len(POLICY_TEXTS) - 1), st.none()),
        st.tuples(st.just("send"), st.integers(0, 2), NAMES),
    ),
    min_size=4,
    max_size=16,
)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(requests=st.lists(REQUESTS, min_size=1, max_size=2), steps=STEPS)
def test_cached_answers_are_the_engine_s_byte_for_byte(live, requests, steps) -> None:
    client, store, policy_file = live
    for action, which, name in steps:
        if action == "swap":
            _swap(store, policy_file, which)
            continue
        sent = requests[which % len(requests)]
        old = sent["update_of"]
        body = review_body(
            _renamed(sent["pod"]),
            sent["namespace"],
            operation="CREATE" if old is None else "UPDATE",
            old=old,
            username=sent["username"],
            dry_run=sent["dry_run"],
            name=name,
        )
        expected = answer(store.policy, body, sent["path"])
        assert client.post(f"/{sent['path']}", body) == (expected.status, expected.body)


def _renamed(pod: dict[str, Any]) -> dict[str, Any]:
    """Another replica of `pod`: a new name and uid."""
    metadata = {**pod["metadata"], "name": f"p-{uuid.uuid4().hex[:5]}", "uid": str(uuid.uuid4())}
    return {**pod, "metadata": metadata}
