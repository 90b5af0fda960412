"""Reading a cluster: the snapshot parser, capacity per class, demand, current queues."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.policy.loader import load_policy_file
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.class_capacity import class_capacity
from quotaguard.quota.cluster import (
    ParsedObjects,
    ResourceQuota,
    SnapshotError,
    load_snapshot,
    parse_objects,
    parse_snapshot,
)
from quotaguard.quota.demand import ClassDemand, demand_of
from quotaguard.quota.queues import current_state
from tests import policies
from tests.policies import H100

FIXTURE = Path(__file__).parents[1] / "fixtures" / "snapshots" / "cluster.json"
SAMPLE = load_policy_file(Path(__file__).parents[2] / "config" / "policy.yaml")
H100_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def test_fixture_capacity_counts_only_healthy_nodes_and_subtracts_outsiders() -> None:
    snapshot = load_snapshot(FIXTURE, gpu_resources=SAMPLE.gpu_resources)
    assert snapshot.problems == ()
    capacity = class_capacity(SAMPLE, snapshot.nodes, snapshot.pods)
    summary = {
        name: (row.capacity, row.held_outside, row.distributable) for name, row in capacity.items()
    }
    # h100: 6 healthy nodes of 8 (one cordoned, one tainted unhealthy, one NotReady);
    # 95% usable = 45, minus the GPU operator's validator (1) and an unowned job (2).
    assert summary == {
        "h100": (48, 3, 42),
        "h100-1g.10gb": (28, 0, 26),
        "h100-3g.40gb": (8, 0, 7),
        "shared": (32, 0, 30),
    }


def test_fixture_demand_from_workloads() -> None:
    snapshot = load_snapshot(FIXTURE, gpu_resources=SAMPLE.gpu_resources)
    assert demand_of(SAMPLE, snapshot) == {
        "training": {"h100": ClassDemand(usage=20, pending=24)},
        "inference": {
            "h100-1g.10gb": ClassDemand(usage=6, pending=12),
            "h100-3g.40gb": ClassDemand(usage=2, pending=0),
        },
        "notebooks": {
            "shared": ClassDemand(usage=5, pending=3),
            "h100-1g.10gb": ClassDemand(usage=0, pending=1),
        },
    }


def test_fixture_current_queues() -> None:
    snapshot = load_snapshot(FIXTURE, gpu_resources=SAMPLE.gpu_resources)
    current = current_state(SAMPLE, snapshot)
    training = current["training"]
    assert (training.name, training.cohort, training.weight) == ("training", "gpu-pool", 3.0)
    assert training.quotas["h100"] == ResourceQuota(16, 32, 0)
    assert training.quotas["shared"] == ResourceQuota(0, 0, 0)
    assert current["notebooks"].quotas["shared"] == ResourceQuota(8, 24, 0)


def node(name: str, allocatable: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": extra.pop("labels", {})},
        "spec": extra.pop("spec", {}),
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(namespace: str, name: str, gpus: int, node_name: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def test_faulty_label_and_two_whole_gpu_products_split_by_node_selector() -> None:
    policy = policies.policy(
        [],
        classes=[
            {**H100, "nodeSelector": {"product": "h100"}},
            {
                "name": "a10",
                "resource": "nvidia.com/gpu",
                "memory": "24Gi",
                "nodeSelector": {"product": "a10"},
            },
        ],
        name="two-products",
        rebalance={"faultyNodeLabels": {"gpu-health": "failed"}},
    )
    snapshot = parse_objects(
        [
            node("a", {"nvidia.com/gpu": "8"}, labels={"product": "h100"}),
            node("b", {"nvidia.com/gpu": "4"}, labels={"product": "a10"}),
            node("c", {"nvidia.com/gpu": "4"}, labels={"product": "a10", "gpu-health": "failed"}),
            node("d", {"nvidia.com/gpu": "8"}, labels={"product": "h100"}),
            pod("kube-system", "probe", 1, "b"),
        ]
    )
    capacity = class_capacity(policy, snapshot.nodes, snapshot.pods)
    assert (capacity["h100"].capacity, capacity["h100"].distributable) == (16, 16)
    assert (capacity["a10"].capacity, capacity["a10"].distributable) == (4, 3)


def test_demand_falls_back_to_pods_then_reads_pod_groups() -> None:
    snapshot = parse_objects(
        [
            node("h100-1", {"nvidia.com/gpu": "8"}, labels=H100_LABELS),
            pod("training", "a", 4, "h100-1"),
            pod("training", "b", 2),
            pod("notebooks", "done", 1, "h100-1") | {"status": {"phase": "Succeeded"}},
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "pg", "namespace": "serving-x"},
                "spec": {"queue": "inference", "minResources": {"nvidia.com/mig-1g.10gb": "3"}},
                "status": {"phase": "Inqueue"},
            },
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "pg2", "namespace": "serving-x"},
                "spec": {"queue": "inference", "minResources": {"nvidia.com/mig-1g.10gb": "2"}},
                "status": {"phase": "Pending"},
            },
        ],
        gpu_resources=SAMPLE.gpu_resources,
    )
    assert demand_of(SAMPLE, snapshot) == {
        "training": {"h100": ClassDemand(usage=4, pending=2)},
        "inference": {"h100-1g.10gb": ClassDemand(usage=3, pending=2)},
    }


def test_volcano_queue_as_current_state() -> None:
    volcano = SAMPLE.model_copy(
        update={"spec": SAMPLE.spec.model_copy(update={"backend": "volcano"})}
    )
    snapshot = parse_objects(
        [
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": "training"},
                "spec": {
                    "weight": 3,
                    "capability": {"nvidia.com/gpu": "48"},
                    "guarantee": {"resource": {"nvidia.com/gpu": "16"}},
                    "deserved": {"nvidia.com/gpu": "20"},
                },
            }
        ]
    )
    state = current_state(volcano, snapshot)["training"]
    assert state.weight == 3.0
    assert state.quotas == {"h100": ResourceQuota(nominal=20, borrowing_limit=28, lending_limit=4)}


def test_odd_objects_are_named_and_skipped_never_fatal() -> None:
    snapshot = parse_snapshot(
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                42,
                {"apiVersion": "v1", "kind": "Node", "metadata": {}},
                node("bad", {"nvidia.com/gpu": "lots", "nvidia.com/mig-1g.10gb": "7"}),
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bare"}},
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "kind": "Workload",
                    "metadata": {"name": "w", "namespace": "training"},
                    "spec": {"podSets": [{"count": "x"}], "queueName": "training"},
                },
            ],
        }
    )
    assert snapshot.problems == (
        "items[0]: not an object; skipped",
        "Node/?: metadata.name missing; object skipped",
        "Node/bad: status.allocatable[nvidia.com/gpu] is not a quantity: 'lots'",
        "Workload/training/w: spec.podSets[0].count is not a whole number",
    )
    bad, bare = snapshot.nodes
    assert dict(bad.allocatable) == {"nvidia.com/mig-1g.10gb": 7}
    assert (bare.ready, dict(bare.allocatable)) == (False, {})


def test_unusable_files_raise_one_line_naming_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"items": [\n  {"kind": "Node",}\n]}')
    with pytest.raises(SnapshotError, match=r"broken.json:2:19: not JSON"):
        load_snapshot(broken)
    with pytest.raises(SnapshotError, match="cannot read"):
        load_snapshot(tmp_path / "missing.json")
    scalar = tmp_path / "scalar.json"
    scalar.write_text('"hello"')
    with pytest.raises(SnapshotError, match="not a Kubernetes object list"):
        load_snapshot(scalar)
    with pytest.raises(SnapshotError, match="'items' is not a list"):
        parse_snapshot({"items": {}})


FIELDS = st.sampled_from(
    [
        "metadata", "name", "namespace", "spec", "status", "allocatable", "conditions",
        "taints", "podSets", "count", "template", "containers", "resources", "limits",
        "nvidia.com/gpu", "admission", "podSetAssignments", "resourceGroups", "flavors",
        "nominalQuota", "fairSharing", "weight", "minResources", "labels", "nodeName",
        "queueName", "clusterQueue", "resourceUsage", "coveredResources", "type", "key",
    ]
)  # fmt: skip
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 50) | st.text(max_size=4) | st.just("8"),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(FIELDS, inner, max_size=4),
    max_leaves=25,
)
KINDS = st.sampled_from(
    [
        ("v1", "Node"),
        ("v1", "Pod"),
        ("kueue.x-k8s.io/v1beta2", "Workload"),
        ("kueue.x-k8s.io/v1beta1", "ClusterQueue"),
        ("scheduling.volcano.sh/v1beta1", "PodGroup"),
        ("scheduling.volcano.sh/v1beta1", "Queue"),
    ]
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(KINDS, st.dictionaries(FIELDS, JSON, max_size=5)), max_size=6))
def test_arbitrary_objects_never_crash_the_reader(items: list[Any]) -> None:
    objects = [
        {
            **body,
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": "x"}
            | (body.get("metadata") if isinstance(body.get("metadata"), dict) else {}),
        }
        for (api_version, kind), body in items
    ]
    snapshot = parse_snapshot(json.loads(json.dumps({"items": objects})))
    class_capacity(SAMPLE, snapshot.nodes, snapshot.pods)
    demand_of(SAMPLE, snapshot)
    current_state(SAMPLE, snapshot)


@settings(max_examples=60)
@given(st.lists(st.sampled_from(range(8)), max_size=12), st.booleans())
def test_a_memo_changes_nothing_the_parse_says(replaced: list[int], other_resources: bool) -> None:
    """Parsing the same cache each interval with a memo gives what a fresh parse gives, when
    objects are replaced (the watch caches' contract), with their problems, and after the
    policy's GPU resources change."""
    document = json.loads(FIXTURE.read_text())
    items: list[Any] = document["items"]
    items.append({"kind": "Pod", "apiVersion": "v1", "metadata": {}})  # a problem to repeat
    memo = ParsedObjects()
    gpus = SAMPLE.gpu_resources
    parse_objects(items, gpu_resources=gpus, memo=memo)
    for index in replaced:
        if index < len(items):
            items[index] = json.loads(json.dumps(items[index]))  # a new object
            items[index].setdefault("metadata", {})["name"] = f"renamed-{index}"
    if other_resources:
        gpus = gpus | {"example.com/gpu"}
    assert parse_objects(items, gpu_resources=gpus, memo=memo) == parse_objects(
        items, gpu_resources=gpus
    )


def test_the_first_tenant_naming_a_queue_owns_it() -> None:
    tenants = [
        {"name": "a", "namespaces": ["a"], "queue": "shared", "localQueue": "a-local"},
        {"name": "b", "namespaces": ["b"], "queue": "b", "localQueue": "shared"},
        {"name": "c", "namespaces": ["c"]},
    ]
    document = SAMPLE.model_dump(by_alias=True)
    document["spec"]["tenants"] = [{**t, "quota": {}} for t in tenants]
    policy = TenantPolicy.model_validate(document)
    owners = {
        q: (t.name if t else None)
        for q in ("shared", "a-local", "b", "c", "x")
        for t in [policy.tenant_of_queue(q)]
    }
    assert owners == {"shared": "a", "a-local": "a", "b": "b", "c": "c", "x": None}
