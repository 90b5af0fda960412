"""The harness itself: the control plane is real, serves the CRDs, runs GPU nodes and pods."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from e2e.cluster import (
    REPO_ROOT,
    Cluster,
    gpu_node,
    load_webhook_configurations,
    mig_node,
    rewrite_webhook_configurations,
    shared_gpu_node,
    wait_until,
    whole_gpu_node,
)


def test_api_server_reports_its_version(cluster: Cluster) -> None:
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == "v1.36.3"
    assert cluster.readyz()


def test_kueue_volcano_and_jobset_crds_are_served(cluster: Cluster) -> None:
    resources = cluster.kubectl("api-resources", "-o", "name").stdout.split()
    for name in (
        "clusterqueues.kueue.x-k8s.io",
        "localqueues.kueue.x-k8s.io",
        "resourceflavors.kueue.x-k8s.io",
        "workloads.kueue.x-k8s.io",
        "cohorts.kueue.x-k8s.io",
        "queues.scheduling.volcano.sh",
        "podgroups.scheduling.volcano.sh",
        "jobs.batch.volcano.sh",
        "jobsets.jobset.x-k8s.io",
    ):
        assert name in resources
    versions = cluster.kubectl("api-versions").stdout.split()
    assert "kueue.x-k8s.io/v1beta2" in versions
    assert "scheduling.volcano.sh/v1beta1" in versions


def test_clusterqueue_v1beta2_and_volcano_queue_round_trip(cluster: Cluster) -> None:
    cluster.apply(
        [
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": "smoke-h100"},
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": "smoke"},
                "spec": {
                    "cohortName": "smoke-pool",
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": "smoke-h100",
                                    "resources": [
                                        {
                                            "name": "nvidia.com/gpu",
                                            "nominalQuota": 8,
                                            "borrowingLimit": 4,
                                            "lendingLimit": 2,
                                        }
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": "smoke"},
                "spec": {"weight": 2, "capability": {"nvidia.com/gpu": "8"}},
            },
        ]
    )
    cq = cluster.get("clusterqueue.v1beta2.kueue.x-k8s.io", "smoke")
    quota = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert (quota["nominalQuota"], quota["borrowingLimit"]) == (8, 4)
    assert cq["spec"]["cohortName"] == "smoke-pool"
    queue = cluster.get("queue.scheduling.volcano.sh", "smoke")
    assert queue["spec"]["weight"] == 2
    cluster.kubectl(
        "delete",
        "clusterqueue.kueue.x-k8s.io/smoke",
        "queue.scheduling.volcano.sh/smoke",
        "resourceflavor.kueue.x-k8s.io/smoke-h100",
    )


def test_kwok_gpu_nodes_become_ready_with_allocatable(cluster: Cluster) -> None:
    cluster.add_nodes(
        whole_gpu_node("smoke-h100", 8),
        mig_node("smoke-mig", {"1g.10gb": 7, "3g.40gb": 2}),
        shared_gpu_node("smoke-shared", gpus=2, replicas=4),
    )
    allocatable = {
        n["metadata"]["name"]: n["status"]["allocatable"]
        for n in cluster.get("nodes", "-l", "type=kwok")["items"]
    }
    assert allocatable["smoke-h100"]["nvidia.com/gpu"] == "8"
    assert allocatable["smoke-mig"]["nvidia.com/mig-1g.10gb"] == "7"
    assert allocatable["smoke-mig"]["nvidia.com/mig-3g.40gb"] == "2"
    assert allocatable["smoke-shared"]["nvidia.com/gpu.shared"] == "8"
    assert cluster.node_ready("smoke-h100")


def test_gpu_pod_is_scheduled_on_a_kwok_node_and_runs(cluster: Cluster) -> None:
    if "kube-scheduler" not in cluster.processes:
        pytest.skip("QUOTAGUARD_E2E_NO_CONTROLLERS: no scheduler binds pods")
    cluster.add_nodes(gpu_node("smoke-sched", {"nvidia.com/gpu": 2}, labels={"smoke": "sched"}))
    cluster.create_namespace("smoke")
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gpu", "namespace": "smoke"},
            "spec": {
                "nodeSelector": {"smoke": "sched"},
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": "2"}},
                    }
                ],
            },
        }
    )

    def running() -> dict[str, str] | None:
        pod = cluster.get("pod", "gpu", namespace="smoke")
        if pod["status"].get("phase") == "Running":
            return {"node": pod["spec"]["nodeName"]}
        return None

    assert wait_until(running, timeout=60, what="pod Running")["node"] == "smoke-sched"
    cluster.kubectl("delete", "pod", "gpu", "-n", "smoke", "--wait=true", "--timeout=60s")


def test_webhook_configurations_are_rewritten_to_a_local_url(cluster: Cluster) -> None:
    cert = cluster.serving_cert()
    configs = rewrite_webhook_configurations(
        load_webhook_configurations(), port=18443, ca_bundle=cert.ca_bundle
    )
    kinds = {c["kind"] for c in configs}
    assert kinds == {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    for config in configs:
        for hook in config["webhooks"]:
            assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:18443/")
            assert "service" not in hook["clientConfig"]
    # Dry-run on the server: the API server accepts them as they would be registered.
    for config in configs:
        cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(config))


def test_quotaguard_webhook_is_called_by_the_api_server(cluster: Cluster) -> None:
    server = cluster.serve_quotaguard(REPO_ROOT / "config" / "policy.yaml", components="webhook")
    try:
        cluster.create_namespace("research-smoke")  # tenant "training" of config/policy.yaml
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "hinted",
                "namespace": "research-smoke",
                "annotations": {"quotaguard.dev/gpu-memory": "20Gi"},
            },
            "spec": {
                "containers": [
                    {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ]
            },
        }
        created = json.loads(cluster.create(pod).stdout)
        limits = created["spec"]["containers"][0]["resources"]["limits"]
        assert "nvidia.com/gpu" not in limits, "the mutating webhook was not called"
        assert created["metadata"]["annotations"]["quotaguard.dev/tenant"] == "training"
        pod["metadata"]["name"] = "too-big"
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "64"
        denied = cluster.create(pod, check=False)
        assert denied.returncode != 0 and "denied the request" in denied.stderr
    finally:
        cluster.stop_quotaguard(server)
    cluster.kubectl("delete", "namespace", "research-smoke", "--wait=false")


def test_api_server_restart_keeps_data(make_cluster: Callable[..., Cluster]) -> None:
    private = make_cluster(controllers=False, kwok=False, crds=False)
    private.create_namespace("survives-restart")
    downtime = private.restart_apiserver()
    assert private.readyz()
    assert private.get("namespace", "survives-restart")["metadata"]["name"] == "survives-restart"
    assert downtime < 60, f"restart took {downtime:.1f}s"
    start = time.monotonic()
    private.stop_apiserver()
    assert not private.readyz()
    private.start_apiserver()
    assert time.monotonic() - start < 60
