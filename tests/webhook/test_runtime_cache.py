"""The webhook's cache of TrainJob runtimes: what admission is given when the API answers,
when the Trainer is not installed, and when the runtimes cannot be read."""

from __future__ import annotations

from typing import Any

from quotaguard.admission.reviews import make_review
from quotaguard.policy.loader import load_policy_file
from quotaguard.webhook.runtime_cache import RuntimeCache, cluster_cache
from tests.admission.conftest import SAMPLE_POLICY
from tests.admission.test_trainjob_runtime import runtime, trainjob


class Failure(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.reason = "Forbidden" if status == 403 else "Not Found"


def lister(answers: dict[str, Any]) -> Any:
    def listed(plural: str) -> list[Any]:
        answer = answers[plural]
        if isinstance(answer, Exception):
            raise answer
        return list(answer)

    return listed


def verdict(cache: RuntimeCache, namespace: str = "training") -> dict[str, Any]:
    policy = load_policy_file(SAMPLE_POLICY)
    body = make_review(trainjob(), namespace=namespace)
    return cache.review(policy, body, operation_path="validate")["response"]


def test_listed_runtimes_judge_the_trainjob() -> None:
    cache = RuntimeCache(lister({"clustertrainingruntimes": [runtime(9)], "trainingruntimes": []}))
    cache.refresh()
    answer = verdict(cache)
    assert not answer["allowed"]
    assert "at most 8 GPU-equivalents per pod" in answer["status"]["message"]


def test_before_the_first_list_a_trainjob_naming_a_runtime_is_denied() -> None:
    cache = RuntimeCache(lister({"clustertrainingruntimes": Failure(403)}))
    cache.refresh()
    answer = verdict(cache)
    assert not answer["allowed"]
    assert "HTTP 403 Forbidden" in answer["status"]["message"]


def test_a_failed_list_keeps_the_runtimes_read_before() -> None:
    answers: dict[str, Any] = {"clustertrainingruntimes": [runtime(2)], "trainingruntimes": []}
    cache = RuntimeCache(lister(answers))
    cache.refresh()
    answers["clustertrainingruntimes"] = Failure(403)
    cache.refresh()
    assert verdict(cache)["allowed"]


def test_without_the_trainers_crds_there_are_no_runtimes() -> None:
    cache = RuntimeCache(
        lister({"clustertrainingruntimes": Failure(404), "trainingruntimes": Failure(404)})
    )
    cache.refresh()
    assert cache.snapshot.error is None
    assert "cannot be read by quotaguard" in verdict(cache)["status"]["message"]


def test_without_cluster_access_the_snapshot_says_so(tmp_path: Any) -> None:
    cache = cluster_cache(str(tmp_path / "missing-kubeconfig"))
    cache.refresh()
    assert cache.snapshot.error is not None
    assert "no Kubernetes API configuration" in cache.snapshot.error
    assert not verdict(cache)["allowed"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_runtime_created_since_the_last_list_is_read_on_the_miss() -> None:
    asked: list[Any] = []

    def getter(key: Any) -> Any:
        asked.append(key)
        return runtime(2)

    cache = RuntimeCache(
        lister({"clustertrainingruntimes": [], "trainingruntimes": []}), getter, clock=Clock()
    )
    cache.refresh()
    assert verdict(cache)["allowed"]
    assert asked == [("ClusterTrainingRuntime", "", "torchtune-llama3.2-1b")]
    assert verdict(cache)["allowed"]  # kept: not asked again
    assert len(asked) == 1


def test_reads_on_a_miss_are_bounded() -> None:
    asked: list[Any] = []

    def getter(key: Any) -> Any:
        asked.append(key)
        raise Failure(404)

    clock = Clock()
    cache = RuntimeCache(
        lister({"clustertrainingruntimes": [], "trainingruntimes": []}), getter, clock=clock
    )
    cache.refresh()
    for _ in range(3):  # the same name: asked once per window
        assert not verdict(cache)["allowed"]
    assert len(asked) == 1
    for name in ("a", "b", "c", "d"):  # other names: at most 3 reads per window
        cache.read_missing(("ClusterTrainingRuntime", "", name))
    assert len(asked) == 3
    clock.now += 11
    assert not verdict(cache)["allowed"]
    assert len(asked) == 4
