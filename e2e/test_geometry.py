"""MIG layouts that follow demand, through a real kube-apiserver: kwok A100 nodes, a stand-in for
mig-manager acting on `nvidia.com/mig.config` (e2e/migmanager.py; the real one needs GPUs), and
the quota controller in geometry mode apply.

- a shifted demand mix moves a node's layout with cordon, relabel, uncordon; the quotas follow;
- a busy node is cordoned and waited for, relabelled only once its GPU pods have ended; a node
  someone else cordoned is left alone;
- a failed change leaves the node cordoned and out of capacity, with an Event;
- two replicas never both change layouts;
- a config the policy names but does not define is read from the GPU operator's ConfigMap
  `default-mig-parted-config` (in the namespace the controller is told).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import conftest
from e2e.build import Toolchain
from e2e.cluster import Cluster, gpu_node, wait_until
from e2e.kueue import cluster_queues, gpu_quotas, running_controller, workload
from e2e.migmanager import FAIL_LABEL, MigManager
from quotaguard.geometry.progress import CHANGED_AT_ANNOTATION, PROGRESS_ANNOTATION
from quotaguard.policy.migconfig import (
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    MigConfig,
    parse_mig_configs,
)

PRODUCT = "NVIDIA-A100-SXM4-80GB"
ONE_G, THREE_G = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"
BALANCED = {ONE_G: 16, "nvidia.com/mig-2g.20gb": 8, THREE_G: 8}


def policy_document(**pool: Any) -> dict[str, Any]:
    return {
        "apiVersion": "quotaguard.dev/v1alpha1",
        "kind": "TenantPolicy",
        "metadata": {"name": "geometry"},
        "spec": {
            "cohort": "geometry",
            "gpuClasses": [
                {"name": "a100-1g", "resource": ONE_G, "memory": "10Gi", "slices": 1},
                {"name": "a100-3g", "resource": THREE_G, "memory": "40Gi", "slices": 3},
            ],
            "tenants": [
                {"name": "small", "namespaces": ["small"], "quota": {"a100-1g": {"max": 200}}},
                {"name": "large", "namespaces": ["large"], "quota": {"a100-3g": {"max": 200}}},
            ],
            "rebalance": {
                "mode": "apply",
                "interval": "1s",
                "demandWindow": "2s",
                "maxStepPercent": 100,
                "manageQueues": True,
            },
            "geometry": {
                "mode": "apply",
                "changeTimeout": "20s",
                "pools": [
                    {
                        "name": "a100",
                        "nodeSelector": {"nvidia.com/gpu.product": PRODUCT},
                        "configs": ["all-balanced", "all-1g.10gb", "all-3g.40gb"],
                        "minDwell": "1h",
                        **pool,
                    }
                ],
            },
        },
    }


def write_policy(directory: Path, **pool: Any) -> Path:
    path = directory / "policy.yaml"
    path.write_text(yaml.safe_dump(policy_document(**pool), sort_keys=False))
    return path


def a100_node(name: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return gpu_node(
        name,
        BALANCED,
        labels={
            "nvidia.com/gpu.product": PRODUCT,
            "nvidia.com/gpu.count": "8",
            "nvidia.com/mig.strategy": "mixed",
            MIG_CONFIG_LABEL: "all-balanced",
            MIG_STATE_LABEL: "success",
            **(labels or {}),
        },
    )


@pytest.fixture(scope="module")
def gcluster(toolchain: Toolchain) -> Iterator[Cluster]:
    """A control plane of this module's own: nothing but kwok, the stand-in mig-manager and
    the controller touch nodes."""
    cluster = conftest._start(toolchain, controllers=False)
    try:
        for namespace in ("small", "large", "elsewhere"):
            cluster.create_namespace(namespace)
        yield cluster
    finally:
        conftest._finish(cluster)


@pytest.fixture
def nodes(gcluster: Cluster) -> Iterator[list[str]]:
    """Two balanced A100 nodes, gpu-a and gpu-b; removed (with workloads and pods) after."""
    names = ["gpu-a", "gpu-b"]
    gcluster.add_nodes(*(a100_node(n) for n in names))
    yield names
    gcluster.kubectl("delete", "workloads.kueue.x-k8s.io", "--all", "-A", "--wait")
    gcluster.kubectl("delete", "pods", "--all", "-A", "--grace-period=0", "--force", check=False)
    gcluster.kubectl("delete", "node", *names, "--wait")


@contextlib.contextmanager
def mig_manager(
    cluster: Cluster, configs: dict[str, MigConfig] | None = None
) -> Iterator[MigManager]:
    manager = MigManager(cluster.api_client(), configs=configs or {}).start()
    try:
        yield manager
    finally:
        manager.stop()
    assert manager.error is None, f"mig-manager stand-in died: {manager.error!r}"


def node(cluster: Cluster, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.get("node", name)
    return found


def layout_events(cluster: Cluster) -> list[dict[str, Any]]:
    events = cluster.get("events", "-A")["items"]
    return [
        e
        for e in events
        if e.get("involvedObject", {}).get("kind") == "Node"
        and str(e.get("reason", "")).startswith("Layout")
    ]


def small_quota(cluster: Cluster) -> int | None:
    queue = cluster_queues(cluster).get("small")
    if queue is None:
        return None
    quota = gpu_quotas(queue).get(("a100-1g", ONE_G)) or {}
    return quota.get("nominalQuota")


def busy_pod(node_name: str) -> dict[str, Any]:
    limits = {ONE_G: "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"busy-{node_name}", "namespace": "elsewhere"},
        "spec": {
            "nodeName": node_name,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/serve:1",
                    "resources": {"limits": limits, "requests": limits},
                }
            ],
        },
    }


# --------------------------------------------------------------------------------------------


def test_a_shifted_mix_moves_one_node_with_cordon_relabel_uncordon_and_quotas_follow(
    gcluster: Cluster, nodes: list[str], tmp_path: Path
) -> None:
    cluster = gcluster
    policy = write_policy(tmp_path)
    with (
        mig_manager(cluster) as manager,
        running_controller(
            cluster, policy, identity="geometry-a", lease_namespace="lease-geometry-1"
        ) as thread,
    ):
        # Two balanced nodes offer 32 x 1g; 60 are wanted: one node all-1g (56 + 16) covers it.
        cluster.create(workload("many-small", "small", "small", {ONE_G: 1}, count=60))
        changed = wait_until(
            lambda: next(
                (
                    n
                    for n in nodes
                    if node(cluster, n)["metadata"]["labels"].get(MIG_CONFIG_LABEL) == "all-1g.10gb"
                    and CHANGED_AT_ANNOTATION in node(cluster, n)["metadata"].get("annotations", {})
                ),
                None,
            ),
            timeout=60,
            what="a node changed to all-1g.10gb",
        )
        done = node(cluster, changed)
        assert not done["spec"].get("unschedulable")  # uncordoned again
        assert PROGRESS_ANNOTATION not in done["metadata"].get("annotations", {})
        assert done["status"]["allocatable"][ONE_G] == "56"
        (applied,) = [a for a in manager.applied if a.node == changed]
        assert applied.cordoned and applied.state == "success"  # cordoned before the relabel
        other = next(n for n in nodes if n != changed)
        assert node(cluster, other)["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-balanced"
        reasons = [
            e["reason"] for e in layout_events(cluster) if e["involvedObject"]["name"] == changed
        ]
        # Events carry no order the API guarantees; the stand-in's record shows the order.
        assert {"LayoutChangeStarted", "LayoutChanged"} <= set(reasons)
        # The quotas follow the new capacity: 72 x 1g, 60 of them wanted.
        wait_until(lambda: small_quota(cluster) == 60, timeout=30, what="small's quota at 60")
        report = thread.controller.latest_report()
        assert report is not None
        capacity = {row["name"]: row["capacity"] for row in report["classes"]}
        assert capacity["a100-1g"] == 72
        assert {row["name"]: row["action"] for row in report["nodes"]} == {
            "gpu-a": "keep",
            "gpu-b": "keep",
        }


def test_a_busy_node_is_cordoned_and_waited_for_and_another_cordon_is_left_alone(
    gcluster: Cluster, nodes: list[str], tmp_path: Path
) -> None:
    cluster = gcluster
    policy = write_policy(tmp_path, drain="wait")
    # gpu-b is cordoned by someone else; gpu-a holds a GPU pod.
    cluster.kubectl("cordon", "gpu-b")
    cluster.create(busy_pod("gpu-a"))
    with (
        mig_manager(cluster) as manager,
        running_controller(
            cluster, policy, identity="geometry-b", lease_namespace="lease-geometry-2"
        ) as thread,
    ):
        cluster.create(workload("many-large", "large", "large", {THREE_G: 1}, count=24))
        wait_until(
            lambda: node(cluster, "gpu-a")["spec"].get("unschedulable"),
            timeout=30,
            what="gpu-a cordoned",
        )
        # Busy: it keeps its layout for as long as the pod runs (several intervals).
        assert not thread.wait_for(
            lambda c: (
                node(cluster, "gpu-a")["metadata"]["labels"][MIG_CONFIG_LABEL] != "all-balanced"
            ),
            timeout=5,
        )
        assert manager.applied == []
        report = thread.controller.latest_report()
        assert report is not None
        rows = {row["name"]: row for row in report["nodes"]}
        assert rows["gpu-a"]["action"] == "changing" and rows["gpu-a"]["target"] == "all-3g.40gb"
        assert rows["gpu-b"]["action"] == "skip" and "someone else" in rows["gpu-b"]["reason"]
        cluster.kubectl(
            "delete", "pod", "busy-gpu-a", "-n", "elsewhere", "--grace-period=0", "--force"
        )
        wait_until(
            lambda: (
                node(cluster, "gpu-a")["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-3g.40gb"
                and not node(cluster, "gpu-a")["spec"].get("unschedulable")
            ),
            timeout=40,
            what="gpu-a relabelled and uncordoned after its pod ended",
        )
        (applied,) = manager.applied
        assert (applied.node, applied.gpu_pods, applied.cordoned) == ("gpu-a", 0, True)
    # The other cordon is still there and nothing else was written to that node.
    other = node(cluster, "gpu-b")
    assert other["spec"].get("unschedulable") is True
    assert other["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-balanced"
    assert not any(
        k.startswith("quotaguard.dev/") for k in other["metadata"].get("annotations", {})
    )


def test_a_failed_change_leaves_the_node_out_of_capacity(
    gcluster: Cluster, nodes: list[str], tmp_path: Path
) -> None:
    cluster = gcluster
    policy = write_policy(tmp_path)
    cluster.kubectl("label", "node", "gpu-a", "gpu-b", f"{FAIL_LABEL}=fail")
    from quotaguard.metrics.registry import REGISTRY

    def failures() -> float:
        return (
            REGISTRY.get_sample_value("quotaguard_layout_changes_total", {"outcome": "failed"})
            or 0.0
        )

    before = failures()
    with (
        mig_manager(cluster),
        running_controller(
            cluster, policy, identity="geometry-c", lease_namespace="lease-geometry-3"
        ) as thread,
    ):
        cluster.create(workload("many-small", "small", "small", {ONE_G: 1}, count=60))

        def failed_row() -> dict[str, Any] | None:
            report = thread.controller.latest_report()
            rows = [r for r in (report or {}).get("nodes", []) if r["action"] == "failed"]
            return rows[0] if rows else None

        row = wait_until(failed_row, timeout=60, what="a failed layout change in the report")
        failed = node(cluster, row["name"])
        assert failed["spec"].get("unschedulable") is True  # kept out of new pods
        assert '"phase":"failed"' in failed["metadata"]["annotations"][PROGRESS_ANNOTATION]
        report = thread.controller.latest_report()
        assert report is not None
        capacity = {r["name"]: r["capacity"] for r in report["classes"]}
        assert capacity["a100-1g"] == 16  # only the other, balanced node counts
        assert any(
            e["reason"] == "LayoutChangeFailed" and e["type"] == "Warning"
            for e in layout_events(cluster)
        )
        assert failures() > before
        # It stays out while the backoff runs: no second node starts either (maxChanging 1).
        assert not thread.wait_for(
            lambda c: any(r["action"] == "start" for r in (c.latest_report() or {})["nodes"]),
            timeout=3,
        )


def test_two_replicas_never_both_change_layouts(
    gcluster: Cluster, nodes: list[str], tmp_path: Path
) -> None:
    cluster = gcluster
    policy = write_policy(tmp_path, maxChanging=2)
    lease = "lease-geometry-4"
    attempted: dict[str, int] = {}  # identity -> intervals in which it patched (or tried) nodes
    seen: set[int] = set()
    with (
        mig_manager(cluster),
        running_controller(cluster, policy, identity="replica-one", lease_namespace=lease) as one,
        running_controller(cluster, policy, identity="replica-two", lease_namespace=lease) as two,
    ):

        def both_moved() -> bool:
            for thread, name in ((one, "replica-one"), (two, "replica-two")):
                writes = thread.controller.status.node_writes
                if writes and id(writes) not in seen:
                    seen.add(id(writes))
                    attempted[name] = attempted.get(name, 0) + 1
            return all(
                node(cluster, n)["metadata"]["labels"][MIG_CONFIG_LABEL] == "all-1g.10gb"
                and not node(cluster, n)["spec"].get("unschedulable")
                for n in nodes
            )

        # 1g demand for both nodes: each moves, through whichever replica leads.
        cluster.create(workload("lots-small", "small", "small", {ONE_G: 1}, count=112))
        wait_until(both_moved, timeout=60, interval=0.05, what="both nodes on all-1g.10gb")
    assert len(attempted) == 1, attempted
    writers = {
        str(e.get("reportingInstance"))
        for e in layout_events(cluster)
        if e["involvedObject"]["name"] in nodes
        and str(e.get("reportingInstance", "")).startswith("replica-")
    }
    assert len(writers) == 1, writers


def test_a_config_only_the_gpu_operators_configmap_defines_is_read_and_applied(
    gcluster: Cluster, nodes: list[str], tmp_path: Path
) -> None:
    cluster = gcluster
    namespace = "gpu-ops"  # not the default: the controller is told where to look
    cluster.create_namespace(namespace)
    document = {
        "version": "v1",
        "mig-configs": {
            "serving-small": [
                {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}
            ]
        },
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "default-mig-parted-config", "namespace": namespace},
        "data": {"config.yaml": yaml.safe_dump(document)},
    }
    cluster.apply(configmap)
    configs, problems = parse_mig_configs(document)  # mig-manager reads the same ConfigMap
    assert not problems
    policy = write_policy(tmp_path, configs=["all-balanced", "serving-small"])
    try:
        with (
            mig_manager(cluster, configs),
            running_controller(
                cluster,
                policy,
                identity="geometry-operator",
                lease_namespace="lease-geometry-5",
                gpu_operator_namespace=namespace,
            ) as thread,
        ):
            cluster.create(workload("many-small", "small", "small", {ONE_G: 1}, count=60))
            changed = wait_until(
                lambda: next(
                    (
                        n
                        for n in nodes
                        if node(cluster, n)["metadata"]["labels"].get(MIG_CONFIG_LABEL)
                        == "serving-small"
                        and CHANGED_AT_ANNOTATION
                        in node(cluster, n)["metadata"].get("annotations", {})
                    ),
                    None,
                ),
                timeout=60,
                what="a node changed to serving-small, a config only the ConfigMap defines",
            )
            assert node(cluster, changed)["status"]["allocatable"][ONE_G] == "56"
            wait_until(
                lambda: (
                    {
                        row["name"]: row["capacity"]
                        for row in (thread.controller.latest_report() or {}).get("classes", [])
                    }.get("a100-1g")
                    == 72
                ),
                timeout=30,
                what="the quota capacity counts the 56 slices",
            )
    finally:
        cluster.kubectl("delete", "configmap", "default-mig-parted-config", "-n", namespace)
