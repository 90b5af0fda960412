"""A pod's GPUs as Kubernetes reserves them (k8s.io/component-helpers resource.PodRequests):
the one count admission (maxGPUsPerPod), the planner's demand and the simulator share."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from quotaguard.kube.podspec import pod_gpus

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
NO_CLASSES: frozenset[str] = frozenset()


def _container(name: str, amounts: dict[str, int], sidecar: bool = False) -> dict[str, Any]:
    found: dict[str, Any] = {"name": name, "resources": {"limits": dict(amounts)}}
    if sidecar:
        found["restartPolicy"] = "Always"
    return found


def kubernetes_pod_requests(spec: dict[str, Any]) -> dict[str, int]:
    """AggregateContainerRequests of k8s.io/component-helpers/resource/helpers.go, line by
    line, on plain dicts (requests default to limits for extended resources)."""

    def requests(container: dict[str, Any]) -> dict[str, int]:
        return dict(container.get("resources", {}).get("limits", {}))

    def add(into: dict[str, int], other: dict[str, int]) -> None:
        for name, value in other.items():
            into[name] = into.get(name, 0) + value

    def maximum(into: dict[str, int], other: dict[str, int]) -> None:
        for name, value in other.items():
            into[name] = max(into.get(name, 0), value)

    reqs: dict[str, int] = {}
    for container in spec.get("containers", []):
        add(reqs, requests(container))
    restartable: dict[str, int] = {}
    init_reqs: dict[str, int] = {}
    for container in spec.get("initContainers", []):
        container_reqs = requests(container)
        if container.get("restartPolicy") == "Always":
            add(reqs, container_reqs)
            add(restartable, container_reqs)
            container_reqs = restartable
        else:
            tmp: dict[str, int] = {}
            add(tmp, container_reqs)
            add(tmp, restartable)
            container_reqs = tmp
        maximum(init_reqs, container_reqs)
    maximum(reqs, init_reqs)
    return {name: value for name, value in reqs.items() if value > 0}


def test_a_sidecar_declared_before_an_init_container_runs_beside_it() -> None:
    spec = {
        "initContainers": [
            _container("proxy", {GPU: 8}, sidecar=True),
            _container("warmup", {GPU: 8}),
        ],
        "containers": [_container("main", {GPU: 1})],
    }
    assert pod_gpus(spec, NO_CLASSES) == {GPU: 16}


def test_a_sidecar_declared_after_an_init_container_does_not() -> None:
    spec = {
        "initContainers": [
            _container("warmup", {GPU: 8}),
            _container("proxy", {GPU: 8}, sidecar=True),
        ],
        "containers": [_container("main", {GPU: 1})],
    }
    assert pod_gpus(spec, NO_CLASSES) == {GPU: 9}


def test_plain_init_containers_are_not_summed() -> None:
    spec = {
        "initContainers": [_container("a", {GPU: 4}), _container("b", {GPU: 6})],
        "containers": [_container("main", {GPU: 2})],
    }
    assert pod_gpus(spec, NO_CLASSES) == {GPU: 6}


_amounts = st.dictionaries(st.sampled_from([GPU, MIG]), st.integers(0, 8), max_size=2)
_init = st.lists(st.tuples(_amounts, st.booleans()), max_size=5)
_regular = st.lists(_amounts, max_size=3)


@given(init=_init, regular=_regular)
def test_the_count_is_kubernetes_pod_requests(
    init: list[tuple[dict[str, int], bool]], regular: list[dict[str, int]]
) -> None:
    spec = {
        "initContainers": [
            _container(f"i{n}", amounts, sidecar) for n, (amounts, sidecar) in enumerate(init)
        ],
        "containers": [_container(f"c{n}", amounts) for n, amounts in enumerate(regular)],
    }
    assert pod_gpus(spec, NO_CLASSES) == kubernetes_pod_requests(spec)
