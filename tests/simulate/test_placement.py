"""Pods onto nodes: what kube-scheduler would do after Kueue admitted a workload."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from quotaguard.policy.loader import load_policy_file
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.cluster import Node
from quotaguard.simulate.cohort import CohortConfig, QueueConfig, Quota
from quotaguard.simulate.placement import Cluster, PodNeed
from quotaguard.simulate.queued import QueuedWorkload
from quotaguard.simulate.queueing import QueueModel
from quotaguard.simulate.simulation import simulate
from quotaguard.simulate.trace import load_trace_text

SAMPLE_POLICY = Path(__file__).parents[2] / "config" / "policy.yaml"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


@pytest.fixture(scope="module")
def policy() -> TenantPolicy:
    return load_policy_file(SAMPLE_POLICY)


def node(name: str, gpus: int = 8, labels: dict[str, str] | None = None, **extra: int) -> Node:
    allocatable = {"nvidia.com/gpu": gpus} if gpus else {}
    allocatable.update({f"nvidia.com/{key.replace('_', '-')}": n for key, n in extra.items()})
    return Node(name, True, False, (), labels or H100, allocatable)


def whole(gpus: int, pods: int = 1) -> tuple[PodNeed, ...]:
    return (PodNeed(pods, (("h100", gpus),)),)


def test_free_gpus_spread_over_nodes_do_not_hold_a_pod_that_needs_them_on_one(policy):
    cluster = Cluster(policy, [node("a"), node("b")])
    for _ in range(2):  # LeastAllocated spreads: one 4-GPU pod on each node
        assert cluster.place(whole(4)) is not None
    assert cluster.free_units("h100") == 8
    assert cluster.fits_in_total(whole(8))
    assert not cluster.placeable(whole(8))  # fragmented: 8 free, 4 on each node


def test_most_allocated_packs_so_the_big_pod_still_fits(policy):
    cluster = Cluster(policy, [node("a"), node("b")], scoring="MostAllocated")
    for _ in range(2):
        assert cluster.place(whole(4)) is not None
    assert cluster.placeable(whole(8))


def test_a_gang_is_placed_whole_or_not_at_all(policy):
    cluster = Cluster(policy, [node("a"), node("b"), node("c")])
    cluster.place(whole(6))  # a: 2 free, b and c: 8
    assert cluster.place(whole(8, pods=3)) is None
    assert cluster.free_units("h100") == 18  # nothing of the failed gang was kept
    assignment = cluster.place(whole(8, pods=2))
    assert assignment is not None
    assert sorted(cluster.names[n] for n, _, _ in assignment) == ["b", "c"]
    cluster.release(assignment)
    assert cluster.free_units("h100") == 18


def test_a_pod_goes_only_to_nodes_its_selector_matches(policy):
    zone = lambda z: {**H100, "zone": z}  # noqa: E731
    cluster = Cluster(policy, [node("a", labels=zone("x")), node("b", labels=zone("y"))])
    pinned = (PodNeed(1, (("h100", 8),), (("zone", "y"),)),)
    first = cluster.place(pinned)
    assert first is not None and cluster.names[first[0][0]] == "b"
    assert cluster.place(pinned) is None  # zone x is free, but the pod may not go there
    assert cluster.free_units("h100", (("zone", "x"),)) == 8


def test_nodes_of_another_gpu_model_do_not_count_for_the_class(policy):
    a100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    cluster = Cluster(policy, [node("h"), node("a", labels=a100)])
    assert cluster.total_units("h100") == 8  # the class's nodeSelector is the H100 label


def test_mig_instances_come_from_each_gpus_layout():
    trace = load_trace_text(
        textwrap.dedent(
            """\
            migConfig:
              version: v1
              mig-configs:
                half:
                  - {devices: [0, 1], mig-enabled: true, mig-devices: {1g.10gb: 7}}
                  - {devices: [2, 3], mig-enabled: true, mig-devices: {3g.40gb: 2}}
            devicePluginConfigs:
              ts-4: {version: v1, sharing: {timeSlicing: {renameByDefault: true,
                     resources: [{name: nvidia.com/gpu, replicas: 4}]}}}
            nodes:
              - {name: m, gpus: 4, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3,
                 nvidia.com/mig.config: half}}
              - {name: b, count: 2, gpus: 8, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3,
                 nvidia.com/mig.config: all-balanced}}
              - {name: s, gpus: 2, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3,
                 nvidia.com/device-plugin.config: ts-4}}
            workloads:
              - {at: 0, duration: 1h, namespace: training, pod: {spec: {containers: [{name: m}]}}}
            """
        ),
        "t.yaml",
    )
    offered = {n.name: dict(n.allocatable) for n in trace.nodes}
    assert offered["m"] == {"nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4}
    balanced = {
        "nvidia.com/mig-1g.10gb": 16,
        "nvidia.com/mig-2g.20gb": 8,
        "nvidia.com/mig-3g.40gb": 8,
    }
    assert offered["b-001"] == offered["b-002"] == balanced
    assert offered["s"] == {"nvidia.com/gpu.shared": 8}


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ("{nvidia.com/mig.config: all-3g.40gb}", "label the node with nvidia.com/gpu.product"),
        ("{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/mig.config: nope}", "nope"),
        ("{nvidia.com/device-plugin.config: ts}", "unknown device plugin config 'ts'"),
    ],
)
def test_a_node_whose_layout_cannot_be_resolved_is_a_located_error(labels, message):
    from quotaguard.simulate.trace import TraceInvalid

    text = (
        f"nodes:\n  - {{name: n, gpus: 2, labels: {labels}}}\n"
        "workloads:\n  - {at: 0, duration: 1h, namespace: t, pod: {spec: {containers: []}}}\n"
    )
    with pytest.raises(TraceInvalid) as caught:
        load_trace_text(text, "n.yaml")
    (problem,) = caught.value.problems
    assert problem.startswith("n.yaml:2:") and message in problem


def test_kueue_takes_the_first_flavor_in_order_that_fits():
    gpu = {"h100": "nvidia.com/gpu", "a100": "nvidia.com/gpu"}
    queue = QueueConfig("q", {"h100": Quota(2, 0), "a100": Quota(8, 0)})
    model = QueueModel(CohortConfig((queue,), gpu), {"h100": 8, "a100": 8})
    options = ((("h100", 2),), (("a100", 2),))
    first, second = (QueuedWorkload(n, "q", options[0], 0.0, options=options) for n in (1, 2))
    model.submit(first)
    model.submit(second)
    model.admit(0.0)
    assert (first.request, second.request) == (options[0], options[1])
    assert model.usage("q") == {"h100": 2, "a100": 2}


def test_an_admitted_gang_that_no_node_holds_waits_and_is_counted(policy):
    # four 4-GPU jobs spread over the four 8-GPU nodes (LeastAllocated), so an 8-GPU job
    # admitted by quota finds 16 free GPUs but no node with 8; it runs when one ends
    nodes = "nodes:\n" + "".join(
        f"  - {{name: g{n}, gpus: 8, labels: {{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}}}\n"
        for n in range(4)
    )
    one = "{spec: {containers: [{name: m, resources: {limits: {nvidia.com/gpu: '4'}}}]}}"
    eight = "{spec: {containers: [{name: m, resources: {limits: {nvidia.com/gpu: '8'}}}]}}"
    text = (
        f"horizon: 3h\n{nodes}workloads:\n"
        f"  - {{at: 0, duration: 2h, namespace: training, count: 4, pod: {one}}}\n"
        f"  - {{at: 60, duration: 1h, namespace: training, pod: {eight}}}\n"
    )
    result = simulate(policy, load_trace_text(text, "t.yaml"), arms=("pool",))
    pool = result.metrics["pool"]
    assert pool.overall.unplaceable == 1
    assert pool.tenants["training"].admitted == 5
    assert pool.tenants["training"].mean_wait == pytest.approx((2 * 3600 - 60) / 5)
    assert pool.fragmented_gpu_seconds > 0
