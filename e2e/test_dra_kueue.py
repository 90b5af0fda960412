"""GPUs through DRA counted in Kueue's quotas, on a real kube-apiserver (1.36, resource.k8s.io/v1)
with Kueue v0.17.0's controller and webhooks (feature gate DynamicResourceAllocation, the
Configuration of `config/components/kueue-config`: DeviceClass gpu.nvidia.com counted as
nvidia.com/gpu), quotaguard's webhook (`--webhook-read-dra`) and its quota controller.

No DRA driver runs: `e2e.draslices` stands in for NVIDIA's, publishing the DeviceClasses and
the ResourceSlice of one kwok node's eight whole GPUs. Nothing is allocated or prepared (no
scheduler runs here); what is shown is admission, queueing and counting:

- a Pod and a Job whose GPUs come from a ResourceClaimTemplate, in a tenant namespace, are
  stamped with the tenant's queue, admitted by Kueue and counted in the tenant's ClusterQueue
  under nvidia.com/gpu;
- a claim of a DeviceClass the tenant may not use, and a foreign queue, are refused;
- the controller reads Kueue's deviceClassMappings and writes the quota of the DRA-only class
  under nvidia.com/gpu, following the claims' demand;
- a tainted device leaves the capacity the controller plans.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import build, draslices
from e2e.cluster import REPO_ROOT, Cluster, QuotaguardServer, gpu_node, wait_until
from e2e.kueue import (
    KueueProcess,
    cluster_queues,
    gpu_quotas,
    report_rows,
    running_controller,
    start_kueue,
    wait_for_report,
    workload_conditions,
)

TRAINING = "dra-kq-training"
SERVING = "dra-kq-serving"
RESEARCH = "dra-kq-research"  # MIG slices only
NODE = "dra-kq-h100-0"
GPU = "nvidia.com/gpu"  # what Kueue counts gpu.nvidia.com devices as
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_CONFIG = REPO_ROOT / "config/components/kueue-config/controller_manager_config.yaml"
POLICY = f"""\
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {{name: dra-kueue-e2e}}
spec:
  backend: kueue
  cohort: dra-e2e
  gpuClasses:
    - name: h100
      memory: 80Gi
      dra: {{deviceClassName: gpu.nvidia.com}}
    - name: mig-1g
      resource: nvidia.com/mig-1g.10gb
      memory: 10Gi
      slices: 1
      dra: {{deviceClassName: mig.nvidia.com, attributes: {{gpu.nvidia.com/profile: 1g.10gb}}}}
  tenants:
    - {{name: training, namespaces: [{TRAINING}], queue: training, allowedClasses: [h100]}}
    - {{name: serving, namespaces: [{SERVING}], queue: serving, allowedClasses: [h100]}}
    - {{name: research, namespaces: [{RESEARCH}], queue: research, allowedClasses: [mig-1g]}}
  rebalance: {{mode: apply, interval: 1s, maxStepPercent: 100, usableCapacityPercent: 100}}
"""


def one_gpu_template(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
                }
            }
        },
    }


def claim_spec() -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "ctr",
                "image": "registry.example/train:1",
                "resources": {"claims": [{"name": "gpu"}]},
            }
        ],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
    }


def claim_pod(name: str, namespace: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": claim_spec(),
    }


def claim_job(name: str, namespace: str, pods: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {"spec": claim_spec()},
        },
    }


def kueue_objects() -> list[dict[str, Any]]:
    flavors = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": n}}
        for n in ("h100", "mig-1g")
    ]
    queues: list[dict[str, Any]] = []
    for tenant, namespace in (("training", TRAINING), ("serving", SERVING), ("research", RESEARCH)):
        queues.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": tenant},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU, "nvidia.com/mig-1g.10gb"],
                            "flavors": [
                                {
                                    "name": "h100",
                                    "resources": [
                                        {"name": GPU, "nominalQuota": "0"},
                                        {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": "0"},
                                    ],
                                },
                                {
                                    "name": "mig-1g",
                                    "resources": [
                                        {"name": GPU, "nominalQuota": "0"},
                                        {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": "0"},
                                    ],
                                },
                            ],
                        }
                    ],
                },
            }
        )
        queues.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": tenant, "namespace": namespace},
                "spec": {"clusterQueue": tenant},
            }
        )
    return flavors + queues


@dataclass
class DraKueue:
    cluster: Cluster
    kueue: KueueProcess
    webhook: QuotaguardServer
    policy: Path


@pytest.fixture(scope="module")
def dra_kueue(
    make_module_cluster: Callable[..., Cluster],
    toolchain: build.Toolchain,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[DraKueue]:
    binary = build.kueue_binary()
    if binary is None:
        pytest.skip("Kueue controller not built (optional e2e.build step)")
    if toolchain.kueue_webhook_dir is None or not toolchain.kueue_webhook_dir.exists():
        pytest.skip("Kueue's webhook manifests not copied (optional e2e.build step)")
    # DeviceTaintRules: beta in 1.36, their API version and feature gate off by default
    cluster = make_module_cluster(
        controllers=False,
        apiserver_args=[
            "--runtime-config=resource.k8s.io/v1beta2=true",
            "--feature-gates=DRADeviceTaintRules=true",
        ],
    )
    cluster.add_nodes(gpu_node(NODE, {}))
    cluster.apply(draslices.device_classes())
    cluster.apply(draslices.whole_gpus(NODE, 8))
    for namespace in (TRAINING, SERVING, RESEARCH):
        cluster.create_namespace(namespace)
        cluster.apply(one_gpu_template(namespace))
    for doc in kueue_objects():
        cluster.create(doc)
    shipped = yaml.safe_load(KUEUE_CONFIG.read_text())
    kueue = start_kueue(
        cluster,
        binary,
        frameworks=["batch/job", "pod"],
        feature_gates=shipped["featureGates"],
        resources=shipped["resources"],
    )
    policy = tmp_path_factory.mktemp("dra-kueue") / "policy.yaml"
    policy.write_text(POLICY)
    webhook = cluster.serve_quotaguard(
        policy, components="webhook", args=["--webhook-read-dra"], name="qg-dra-kueue"
    )
    yield DraKueue(cluster, kueue, webhook, policy)
    cluster.stop_quotaguard(webhook)
    cluster.unregister_webhooks(kueue.webhooks)


def job_workload(cluster: Cluster, namespace: str, job: str) -> dict[str, Any] | None:
    for item in cluster.get("workloads.kueue.x-k8s.io", namespace=namespace)["items"]:
        owners = item["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
            found: dict[str, Any] = item
            return found
    return None


def admitted(cluster: Cluster, namespace: str, job: str) -> bool:
    found = job_workload(cluster, namespace, job)
    return (
        found is not None
        and workload_conditions(cluster, found["metadata"]["name"], namespace).get("Admitted")
        == "True"
    )


def reserved(cluster: Cluster, queue: str) -> int:
    """The nvidia.com/gpu a ClusterQueue's admitted Workloads hold, as Kueue counts them."""
    status = cluster_queues(cluster)[queue].get("status") or {}
    total = 0
    for flavor in status.get("flavorsReservation") or []:
        for resource in flavor.get("resources") or []:
            if resource["name"] == GPU:
                total += int(resource["total"])
    return total


def nominal(cluster: Cluster, queue: str) -> int:
    quota = gpu_quotas(cluster_queues(cluster)[queue]).get(("h100", GPU)) or {}
    return int(quota.get("nominalQuota") or 0)


def test_claims_are_queued_counted_and_the_quota_follows_them(dra_kueue: DraKueue) -> None:
    cluster = dra_kueue.cluster
    with running_controller(
        cluster, dra_kueue.policy, identity="dra-kueue", lease_namespace="lease-dra-kueue"
    ) as thread:

        def fetch() -> dict[str, Any] | None:
            report: dict[str, Any] | None = thread.controller.latest_report()
            return report

        # the DRA-only class is counted under the name Kueue's deviceClassMappings give it
        report = wait_for_report(
            fetch,
            lambda r: {c["name"]: c["resource"] for c in r["classes"]}.get("h100") == GPU,
            timeout=40,
            what="a plan with h100 under nvidia.com/gpu",
        )
        assert {c["name"]: c["capacity"] for c in report["classes"]}["h100"] == 8
        wait_until(
            lambda: nominal(cluster, "training") + nominal(cluster, "serving") == 8,
            timeout=30,
            what="the eight DRA GPUs written as nvidia.com/gpu quota",
        )
        idle_share = nominal(cluster, "training")

        created = cluster.create(claim_pod("single", TRAINING))
        stored = yaml.safe_load(created.stdout)
        assert stored["metadata"]["labels"][QUEUE_LABEL] == "training"
        cluster.create(claim_job("wide", TRAINING, 6))

        # 7 GPUs of claims: Kueue admits them and counts them in training's ClusterQueue
        wait_until(
            lambda: admitted(cluster, TRAINING, "wide"),
            timeout=60,
            what="Kueue admitting the Job of claims",
        )
        wait_until(lambda: reserved(cluster, "training") == 7, timeout=30, what="7 reserved")
        # 4 more than the 8 GPUs hold: pending, counted from the claims of their template
        cluster.create(claim_job("more", TRAINING, 4))
        report = wait_for_report(
            fetch,
            lambda r: (
                (row := report_rows(r).get(("training", "h100"))) is not None
                and (row["usage"], row["pending"]) == (7, 4)
            ),
            timeout=40,
            what="training's 7 admitted and 4 pending claimed GPUs in the report",
        )
        wait_until(
            lambda: nominal(cluster, "training") == 8,
            timeout=30,
            what="training's quota following its claims to all eight GPUs",
        )
        assert idle_share < 8 and nominal(cluster, "serving") == 0
        assert not admitted(cluster, TRAINING, "more")
        pod = cluster.get("pod", "single", namespace=TRAINING)
        assert not pod["spec"].get("schedulingGates"), "Kueue left the Pod gated"
        status = thread.controller.status
        assert status.writes.get("error", 0) == 0, status.writes


def test_a_forbidden_device_class_and_a_foreign_queue_are_refused(dra_kueue: DraKueue) -> None:
    cluster = dra_kueue.cluster
    forbidden = cluster.create(claim_pod("whole", RESEARCH), check=False)
    assert forbidden.returncode != 0
    assert 'DeviceClass "gpu.nvidia.com"' in forbidden.stderr
    assert "which the tenant does not allow" in forbidden.stderr
    foreign = cluster.create(
        claim_pod("elsewhere", TRAINING, {QUEUE_LABEL: "serving"}), check=False
    )
    assert foreign.returncode != 0
    assert "serving" in foreign.stderr and "queue" in foreign.stderr


def test_a_tainted_device_leaves_the_capacity(dra_kueue: DraKueue) -> None:
    cluster = dra_kueue.cluster
    taint = [{"key": "gpu.nvidia.com/unhealthy", "value": "xid-79", "effect": "NoExecute"}]
    cluster.apply(draslices.whole_gpus(NODE, 8, generation=2, taints={i: taint for i in range(6)}))
    with running_controller(
        cluster, dra_kueue.policy, identity="dra-taint", lease_namespace="lease-dra-taint"
    ) as thread:

        def fetch() -> dict[str, Any] | None:
            report: dict[str, Any] | None = thread.controller.latest_report()
            return report

        report = wait_for_report(
            fetch,
            lambda r: {c["name"]: c["capacity"] for c in r["classes"]}.get("h100") == 2,
            timeout=40,
            what="h100 capacity 2 after six device taints",
        )
        (h100,) = [c for c in report["classes"] if c["name"] == "h100"]
        assert len(h100["faultyGpus"]) == 6
        assert {row["gpu"] for row in h100["faultyGpus"]} == {f"{NODE}/gpu-{i}" for i in range(6)}
        assert "NoExecute" in h100["faultyGpus"][0]["reason"]

        # a DeviceTaintRule on one more device, as an operator would set it
        cluster.apply(
            {
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRule",
                "metadata": {"name": "gpu-6-xid"},
                "spec": {
                    "deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-6"},
                    "taint": {"key": "gpu.nvidia.com/unhealthy", "effect": "NoSchedule"},
                },
            }
        )
        report = wait_for_report(
            fetch,
            lambda r: {c["name"]: c["capacity"] for c in r["classes"]}.get("h100") == 1,
            timeout=40,
            what="h100 capacity 1 after a DeviceTaintRule on gpu-6",
        )
        (h100,) = [c for c in report["classes"] if c["name"] == "h100"]
        assert f"{NODE}/gpu-6" in {row["gpu"] for row in h100["faultyGpus"]}
