"""Two GPU models on one resource, through the real API server and Kueue v0.17.0's controller
and webhooks: a Job of a tenant whose rule says `to: [h100, a100]` keeps `nvidia.com/gpu` and
gets no nodeSelector from quotaguard, and Kueue admits it on the a100 flavor once the h100
quota is used up, putting the A100 nodeLabels on its pods. The quota controller puts the
flavors of training's ClusterQueue back in its list's order, with its flavorFungibility.

The queues are the ones of `config/samples/kueue/gpu-models/` (training: 16 H100 and 8 A100 of
nominal quota, H100 first), with the webhook serving that sample's policy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from e2e import build
from e2e.cluster import REPO_ROOT, Cluster, QuotaguardServer, wait_until, whole_gpu_node
from e2e.kueue import (
    KueueProcess,
    cluster_queues,
    running_controller,
    sample_documents,
    start_kueue,
    training_job,
    write_document,
)

MODELS = REPO_ROOT / "config" / "samples" / "kueue" / "gpu-models"
GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture(scope="module")
def models(
    make_module_cluster: Callable[..., Cluster], toolchain: build.Toolchain
) -> Iterator[tuple[Cluster, KueueProcess, QuotaguardServer]]:
    binary = build.kueue_binary()
    if binary is None:
        pytest.skip("Kueue controller not built (optional e2e.build step)")
    if toolchain.kueue_webhook_dir is None or not toolchain.kueue_webhook_dir.exists():
        pytest.skip("Kueue's webhook manifests not copied (optional e2e.build step)")
    cluster = make_module_cluster(controllers=False)
    cluster.add_nodes(
        whole_gpu_node("h100-0", 8, product=H100),
        whole_gpu_node("h100-1", 8, product=H100),
        whole_gpu_node("a100-0", 8, product=A100),
    )
    cluster.apply(sample_documents(MODELS, "namespaces.yaml", "resourceflavors.yaml"))
    for doc in sample_documents(MODELS, "clusterqueues.yaml"):
        cluster.create(doc)
    cluster.apply(sample_documents(MODELS, "localqueues.yaml"))
    kueue = start_kueue(cluster, binary, frameworks=["batch/job"])
    quotaguard = cluster.serve_quotaguard(
        MODELS / "policy.yaml", components="webhook", name="qg-models"
    )
    yield cluster, kueue, quotaguard
    cluster.stop_quotaguard(quotaguard)
    cluster.unregister_webhooks(kueue.webhooks)


def admitted_flavor(cluster: Cluster, job_uid: str) -> str | None:
    """The flavor Kueue admitted the Job's Workload on (None while it is not admitted)."""
    items = cluster.get("workloads.kueue.x-k8s.io", namespace="training")["items"]
    for item in items:
        if not any(o.get("uid") == job_uid for o in item["metadata"].get("ownerReferences") or []):
            continue
        conditions = {c["type"]: c["status"] for c in item.get("status", {}).get("conditions", [])}
        if conditions.get("Admitted") != "True":
            return None
        (assignment,) = item["status"]["admission"]["podSetAssignments"]
        flavor: str = assignment["flavors"][GPU]
        return flavor
    return None


def test_kueue_admits_a_list_on_the_second_model_when_the_first_is_full(
    models: tuple[Cluster, KueueProcess, QuotaguardServer],
) -> None:
    cluster, _, _ = models
    # 2 x 8 GPUs: the whole H100 quota (16)
    first = json.loads(cluster.create(training_job("first", 2)).stdout)
    template = first["spec"]["template"]["spec"]
    assert template["containers"][0]["resources"]["limits"] == {GPU: "8"}
    assert "nodeSelector" not in template  # quotaguard leaves the model to Kueue
    assert first["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    uid = first["metadata"]["uid"]
    wait_until(
        lambda: admitted_flavor(cluster, uid) == "h100", timeout=40, what="first Job on h100"
    )

    second = json.loads(cluster.create(training_job("second", 1)).stdout)
    assert "nodeSelector" not in second["spec"]["template"]["spec"]
    uid = second["metadata"]["uid"]
    wait_until(
        lambda: admitted_flavor(cluster, uid) == "a100",
        timeout=40,
        what="Kueue admitting the second Job on the a100 flavor",
    )

    # Kueue unsuspends the Job with the chosen flavor's nodeLabels on its pod template
    def started_on_a100() -> bool:
        job = cluster.get("job", "second", namespace="training")
        selector = job["spec"]["template"]["spec"].get("nodeSelector") or {}
        return job["spec"].get("suspend") is False and selector.get(PRODUCT) == A100

    wait_until(started_on_a100, timeout=30, what="the second Job unsuspended onto A100 nodes")


def reorder_training_flavors(cluster: Cluster) -> None:
    """Replace training's ClusterQueue with its GPU flavors reversed and no fungibility, read
    again when Kueue's status update came first (409 Conflict on a stale resourceVersion)."""
    for _ in range(20):
        queue = cluster_queues(cluster)["training"]
        spec = queue["spec"]
        group = next(g for g in spec["resourceGroups"] if GPU in g["coveredResources"])
        group["flavors"].reverse()
        spec.pop("flavorFungibility", None)
        done = cluster.kubectl("replace", "-f", "-", input=json.dumps(queue), check=False)
        if done.returncode == 0:
            return
        assert "Conflict" in done.stderr, done.stderr
    raise AssertionError("training's ClusterQueue kept changing under every replace")


def test_the_controller_writes_the_lists_flavor_order_and_fungibility(
    models: tuple[Cluster, KueueProcess, QuotaguardServer], tmp_path: Path
) -> None:
    cluster, _, _ = models
    # someone reordered training's GPU flavors and dropped its fungibility
    reorder_training_flavors(cluster)
    stored = cluster_queues(cluster)["training"]["spec"]
    assert stored["flavorFungibility"]["whenCanBorrow"] == "MayStopSearch"  # Kueue's default

    document = yaml.safe_load((MODELS / "policy.yaml").read_text())
    document["spec"]["rebalance"] = {"mode": "apply", "interval": "1s", "demandWindow": "6s"}
    policy = write_document(tmp_path / "policy.yaml", document)

    def written() -> bool:
        spec = cluster_queues(cluster)["training"]["spec"]
        gpu = next(g for g in spec["resourceGroups"] if GPU in g["coveredResources"])
        order = [f["name"] for f in gpu["flavors"]]
        fungibility = spec.get("flavorFungibility") or {}
        return order == ["h100", "a100"] and fungibility.get("whenCanBorrow") == "TryNextFlavor"

    with running_controller(
        cluster, policy, identity="fungible", lease_namespace="lease-fungible"
    ) as thread:
        wait_until(written, timeout=40, what="training's flavors back in the list's order")
        assert thread.controller.status.writes.get("error", 0) == 0
