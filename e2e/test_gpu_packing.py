"""The shipped GPU scheduler profile packs, with the real kube-scheduler v1.36.3.

A second kube-scheduler runs `config/components/scheduler-profile/scheduler-config.yaml` (the
file `python -m tools.scheduler_profile` writes and the chart copies) beside the cluster's
default one. On three kwok nodes of 8 GPUs each, six one-GPU pods go one node per two pods
under the default profile, and all onto one node under `quotaguard-gpu`; afterwards a pod that
needs a whole node's 8 GPUs finds a node only where the small pods were packed. `plan` and the
controller (its report and /metrics) then show each placement's fragmentation: these tests run
in file order, each on what the ones before left. Last, the webhook of a policy with
`spec.scheduling.schedulerName` sends a tenant's GPU pods written without a schedulerName to
that profile.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from e2e.cluster import (
    REPO_ROOT,
    Cluster,
    ClusterError,
    Process,
    free_port,
    wait_until,
    whole_gpu_node,
)
from e2e.kueue import serve_controller

PROFILE = REPO_ROOT / "config" / "components" / "scheduler-profile" / "scheduler-config.yaml"
PACKING = "quotaguard-gpu"
GROUP = "e2e.quotaguard.dev/packing-group"
NAMESPACE = "packing"
TENANT_NAMESPACE = "packing-tenant"
NODES_PER_GROUP = 3
GPUS_PER_NODE = 8
SMALL_PODS = 6


def run_profile(cluster: Cluster, workdir: Path) -> Process:
    """The shipped profile in a second kube-scheduler: the cluster's kubeconfig and no leader
    election (one replica) are all that change."""
    config = yaml.safe_load(PROFILE.read_text())
    config["clientConnection"] = {"kubeconfig": str(cluster.kubeconfig)}
    config["leaderElection"] = {"leaderElect": False}
    path = workdir / "scheduler-config.yaml"
    path.write_text(yaml.safe_dump(config))
    kubeconfig = str(cluster.kubeconfig)
    return cluster.start_process(
        "kube-scheduler-quotaguard-gpu",
        [
            str(cluster.toolchain.kube_scheduler),
            f"--config={path}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
        ],
    )


@pytest.fixture(scope="module")
def packing_cluster(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    if "kube-scheduler" not in cluster.processes:
        pytest.skip(
            "the shared cluster runs without kube-scheduler (QUOTAGUARD_E2E_NO_CONTROLLERS)"
        )
    for group in ("spread", "pack", "webhook"):
        cluster.add_nodes(
            *(
                whole_gpu_node(f"packing-{group}-{i}", GPUS_PER_NODE, labels={GROUP: group})
                for i in range(NODES_PER_GROUP)
            )
        )
    for namespace in (NAMESPACE, TENANT_NAMESPACE):
        cluster.create_namespace(namespace)
    scheduler = run_profile(cluster, tmp_path_factory.mktemp("packing-scheduler"))
    yield cluster
    scheduler.stop()
    for namespace in (NAMESPACE, TENANT_NAMESPACE):
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    for group in ("spread", "pack", "webhook"):
        cluster.kubectl("delete", "node", "-l", f"{GROUP}={group}", "--wait=false", check=False)


def gpu_pod(name: str, group: str, gpus: int, scheduler: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeSelector": {GROUP: group},
        "containers": [
            {
                "name": "main",
                "image": "registry.example/train:1",
                "resources": {
                    "requests": {"cpu": "1", "memory": "4Gi"},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            }
        ],
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def node_of(cluster: Cluster, name: str, namespace: str = NAMESPACE) -> str | None:
    pod = cluster.get("pod", name, namespace=namespace)
    node: str | None = pod["spec"].get("nodeName")
    return node


def place_one_by_one(cluster: Cluster, group: str, scheduler: str | None) -> Counter[str]:
    """Six one-GPU pods, each bound before the next is created; pods per node."""
    placed: Counter[str] = Counter()
    for index in range(SMALL_PODS):
        name = f"{group}-small-{index}"
        cluster.create(gpu_pod(name, group, 1, scheduler), namespace=NAMESPACE)
        node = wait_until(
            lambda n=name: node_of(cluster, n),  # type: ignore[misc]
            timeout=60,
            what=f"pod {name} bound",
        )
        placed[node] += 1
    return placed


def whole_node_fits(cluster: Cluster, group: str, scheduler: str | None) -> bool:
    """Whether a pod asking for a whole node's GPUs is bound within 20 s."""
    name = f"{group}-whole-node"
    cluster.create(gpu_pod(name, group, GPUS_PER_NODE, scheduler), namespace=NAMESPACE)
    try:
        wait_until(lambda: node_of(cluster, name), timeout=20, what=f"pod {name} bound")
    except ClusterError:  # unbound is the answer
        return False
    return True


def test_the_default_profile_spreads_one_gpu_pods_and_strands_a_whole_node_pod(
    packing_cluster: Cluster,
) -> None:
    placed = place_one_by_one(packing_cluster, "spread", None)
    assert sorted(placed.values()) == [2, 2, 2], placed
    assert not whole_node_fits(packing_cluster, "spread", None)


def test_the_shipped_profile_packs_them_and_the_whole_node_pod_fits(
    packing_cluster: Cluster,
) -> None:
    placed = place_one_by_one(packing_cluster, "pack", PACKING)
    assert list(placed.values()) == [SMALL_PODS], f"not packed onto one node: {placed}"
    assert whole_node_fits(packing_cluster, "pack", PACKING)


def group_classes_policy(tmp_path: Path) -> Path:
    """A policy with one class per node group (told apart by their label)."""
    policy = {
        "apiVersion": "quotaguard.dev/v1alpha1",
        "kind": "TenantPolicy",
        "metadata": {"name": "packing"},
        "spec": {
            "gpuClasses": [
                {
                    "name": group,
                    "resource": "nvidia.com/gpu",
                    "memory": "80Gi",
                    "nodeSelector": {GROUP: group},
                }
                for group in ("spread", "pack")
            ],
        },
    }
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def assert_spread_and_packed(fragmentation: list[dict[str, Any]]) -> None:
    """After the two tests above: spread, 18 GPUs free but 6 at most on a node (the whole-node
    pod is still pending); packed, 10 free and a whole node of 8 among them."""
    rows = {row["name"]: row for row in fragmentation}
    spread, packed = rows["spread"], rows["pack"]
    assert (spread["free"], spread["largestFit"], spread["wholeNodesFree"]) == (18, 6, 0)
    assert (packed["free"], packed["largestFit"], packed["wholeNodesFree"]) == (10, 8, 1)


def test_plan_reports_the_live_fragmentation_of_each_placement(
    packing_cluster: Cluster, tmp_path: Path
) -> None:
    argv = [sys.executable, "-m", "quotaguard", "plan", "--policy"]
    argv += [str(group_classes_policy(tmp_path)), "--kubeconfig", str(packing_cluster.kubeconfig)]
    done = subprocess.run(
        [*argv, "-o", "json"], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )
    assert done.returncode == 0, done.stderr
    assert_spread_and_packed(json.loads(done.stdout)["fragmentation"])


def test_the_controller_reports_and_exports_the_same(
    packing_cluster: Cluster, tmp_path: Path
) -> None:
    controller = serve_controller(
        packing_cluster,
        group_classes_policy(tmp_path),
        pod_name="qg-packing-controller",
        lease_namespace="packing-controller",
    )
    try:
        report = wait_until(controller.report, timeout=60, what="the controller's first report")
        assert_spread_and_packed(report["fragmentation"])
        with urllib.request.urlopen(f"{controller.url}/metrics", timeout=5) as response:
            metrics = response.read().decode()
        assert 'quotaguard_class_largest_fit_gpus{class="spread"' in metrics
        samples = {
            (sample.name, sample.labels.get("class")): sample.value
            for family in text_string_to_metric_families(metrics)
            for sample in family.samples
        }
        assert samples[("quotaguard_class_free_gpus", "spread")] == 18
        assert samples[("quotaguard_class_largest_fit_gpus", "spread")] == 6
        assert samples[("quotaguard_class_largest_fit_gpus", "pack")] == 8
    finally:
        controller.process.stop()


def test_the_webhook_sends_a_tenants_gpu_pods_to_the_packing_profile(
    packing_cluster: Cluster, tmp_path: Path
) -> None:
    policy = {
        "apiVersion": "quotaguard.dev/v1alpha1",
        "kind": "TenantPolicy",
        "metadata": {"name": "packing"},
        "spec": {
            "scheduling": {"schedulerName": PACKING},
            "gpuClasses": [{"name": "h100", "resource": "nvidia.com/gpu", "memory": "80Gi"}],
            "tenants": [{"name": "research", "namespaces": [TENANT_NAMESPACE]}],
        },
    }
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    server = packing_cluster.serve_quotaguard(path, name="qg-packing")
    try:
        nodes = set()
        for index in range(3):
            name = f"tenant-small-{index}"
            created = packing_cluster.create(
                gpu_pod(name, "webhook", 1, None), namespace=TENANT_NAMESPACE
            )
            assert json.loads(created.stdout)["spec"]["schedulerName"] == PACKING
            nodes.add(
                wait_until(
                    lambda n=name: node_of(packing_cluster, n, TENANT_NAMESPACE),  # type: ignore[misc]
                    timeout=60,
                    what=f"pod {name} bound",
                )
            )
        assert len(nodes) == 1, f"the tenant's pods were spread: {nodes}"
    finally:
        packing_cluster.stop_quotaguard(server)
