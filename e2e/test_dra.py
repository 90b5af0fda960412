"""GPUs through Dynamic Resource Allocation, governed by the webhook on a real kube-apiserver
(1.36, resource.k8s.io/v1 served): a Pod whose GPUs come from a ResourceClaimTemplate reaches
quotaguard through the shipped registrations (matchConditions on `resourceClaims`), the
webhook reads the template and the DeviceClasses through the API (`serve --webhook-read-dra`),
and a DeviceClass the tenant may not use is refused naming the claim; a ResourceClaimTemplate
asking for it is refused when it is created.

The DeviceClasses are those NVIDIA's DRA driver creates (`gpu.nvidia.com`, `mig.nvidia.com`);
no driver runs, no device is allocated. Capacity: `e2e.draslices`, a stand-in for the
driver's kubelet plugin, publishes ResourceSlices for kwok nodes (whole GPUs, a GPU MIG
partitions on demand, a device taint), and `plan --snapshot` of what the API server keeps
counts them.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import draslices
from e2e.cluster import Cluster, QuotaguardServer, gpu_node

RESEARCH = "dra-research-e2e"  # tenant research: MIG slices only
TRAINING = "dra-training-e2e"  # tenant training: any class
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POLICY = f"""\
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {{name: dra-e2e}}
spec:
  gpuClasses:
    - name: h100
      memory: 80Gi
      dra: {{deviceClassName: gpu.nvidia.com}}
    - name: mig-1g
      memory: 10Gi
      slices: 1
      dra: {{deviceClassName: mig.nvidia.com, attributes: {{gpu.nvidia.com/profile: 1g.10gb}}}}
  tenants:
    - {{name: research, namespaces: [{RESEARCH}], allowedClasses: [mig-1g]}}
    - {{name: training, namespaces: [{TRAINING}]}}
"""


def device_class(name: str, kind: str) -> dict[str, Any]:
    expression = (
        f"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '{kind}'"
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def template(
    name: str, namespace: str, device_class_name: str, selector: str = ""
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class_name}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def claim_pod(name: str, namespace: str, template_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {"name": "ctr", "image": "ubuntu:22.04", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template_name}],
        },
    }


MIG_1G = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"


@pytest.fixture(scope="module")
def served(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[QuotaguardServer]:
    policy = tmp_path_factory.mktemp("dra-policy") / "policy.yaml"
    policy.write_text(POLICY)
    for namespace in (RESEARCH, TRAINING):
        cluster.create_namespace(namespace)
    classes = [device_class("gpu.nvidia.com", "gpu"), device_class("mig.nvidia.com", "mig")]
    cluster.apply(classes)
    # made before the webhook was registered: the pod that names it is what is judged
    cluster.apply(
        [
            template("single-gpu", RESEARCH, "gpu.nvidia.com"),
            template("mig-1g", RESEARCH, "mig.nvidia.com", MIG_1G),
        ]
    )
    server = cluster.serve_quotaguard(
        policy, components="webhook", args=["--webhook-read-dra"], name="qg-dra-e2e"
    )
    try:
        yield server
    finally:
        cluster.stop_quotaguard(server)
        cluster.kubectl(
            "delete", "namespace", RESEARCH, TRAINING, "--wait=false", "--ignore-not-found"
        )
        cluster.kubectl(
            "delete", "deviceclass", "gpu.nvidia.com", "mig.nvidia.com", "--ignore-not-found"
        )


def refused(cluster: Cluster, obj: dict[str, Any]) -> str:
    result = cluster.create(obj, check=False)
    assert result.returncode != 0, f"admitted: {result.stdout[:2000]}"
    return result.stderr


def test_a_pod_claiming_a_device_class_the_tenant_may_not_use_is_refused(
    cluster: Cluster, served: QuotaguardServer
) -> None:
    stderr = refused(cluster, claim_pod("whole", RESEARCH, "single-gpu"))
    assert (
        'admission webhook "pods.validate.quotaguard.dev" denied the request: tenant "research": '
        'claim "gpu" (ResourceClaimTemplate "single-gpu") request "gpu" may get devices of '
        'class "h100" (DeviceClass "gpu.nvidia.com"), which the tenant does not allow'
    ) in stderr


def test_a_pod_claiming_an_allowed_mig_profile_is_queued(
    cluster: Cluster, served: QuotaguardServer
) -> None:
    cluster.create(claim_pod("slice", RESEARCH, "mig-1g"))
    stored = cluster.get("pod", "slice", namespace=RESEARCH)
    assert stored["metadata"]["labels"][QUEUE_LABEL] == "research"
    assert stored["metadata"]["annotations"]["quotaguard.dev/tenant"] == "research"


def test_a_pod_naming_a_template_not_yet_created_is_refused(
    cluster: Cluster, served: QuotaguardServer
) -> None:
    stderr = refused(cluster, claim_pod("early", RESEARCH, "later"))
    assert f'ResourceClaimTemplate "later" is not found in namespace "{RESEARCH}"' in stderr


def test_a_template_asking_for_a_forbidden_device_class_is_refused_at_creation(
    cluster: Cluster, served: QuotaguardServer
) -> None:
    stderr = refused(cluster, template("whole-gpu", RESEARCH, "gpu.nvidia.com"))
    assert (
        'admission webhook "resourceclaimtemplates.validate.quotaguard.dev" denied the request: '
        'tenant "research": ResourceClaimTemplate "whole-gpu" request "gpu" may get devices of '
        'class "h100"'
    ) in stderr
    cluster.create(template("whole-gpu", TRAINING, "gpu.nvidia.com"))  # training may


def test_the_review_cli_gives_the_same_answer_offline(tmp_path: Path) -> None:
    """`quotaguard review` with the template and DeviceClasses as files decides as the server."""
    from quotaguard.cli import main

    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    objects = tmp_path / "dra.yaml"
    objects.write_text(
        yaml.safe_dump_all(
            [
                device_class("gpu.nvidia.com", "gpu"),
                device_class("mig.nvidia.com", "mig"),
                template("single-gpu", RESEARCH, "gpu.nvidia.com"),
            ]
        )
    )
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(claim_pod("whole", RESEARCH, "single-gpu")))
    assert (
        main(["review", "-p", str(policy), str(manifest), "--dra", str(objects), "-o", "json"]) == 1
    )


# ---- capacity from ResourceSlices --------------------------------------------------------------

CAPACITY_POLICY = f"""\
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {{name: dra-capacity-e2e}}
spec:
  gpuClasses:
    - name: h100
      memory: 80Gi
      dra:
        deviceClassName: gpu.nvidia.com
        attributes: {{gpu.nvidia.com/productName: {draslices.H100}}}
    - name: mig-1g
      memory: 10Gi
      slices: 1
      dra: {{deviceClassName: mig.nvidia.com, attributes: {{gpu.nvidia.com/profile: 1g.10gb}}}}
    - name: a100
      memory: 80Gi
      dra:
        deviceClassName: gpu.nvidia.com
        attributes: {{gpu.nvidia.com/productName: {draslices.A100}}}
  tenants:
    - {{name: research, namespaces: [{RESEARCH}]}}
"""
XID_TAINT = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"}


def planned_capacity(cluster: Cluster, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """`quotaguard plan --snapshot` of what the API server holds: each class's row."""
    from quotaguard.cli import main

    listed = cluster.kubectl(
        "get", "nodes,resourceslices,deviceclasses,resourceclaims", "-A", "-o", "json"
    ).stdout
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(listed)
    policy = tmp_path / "policy.yaml"
    policy.write_text(CAPACITY_POLICY)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["plan", "-p", str(policy), "--snapshot", str(snapshot), "-o", "json"])
    assert code == 0, buffer.getvalue()
    return {row["name"]: row for row in json.loads(buffer.getvalue())["classes"]}


def test_resource_slices_are_capacity_and_a_tainted_device_leaves_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    nodes = ("dra-node-1", "dra-node-2")
    cluster.add_nodes(*(gpu_node(name, {}) for name in nodes))
    cluster.apply(draslices.device_classes())
    cluster.apply([*draslices.whole_gpus(nodes[0], 4), *draslices.partitionable_gpu(nodes[1])])
    try:
        rows = planned_capacity(cluster, tmp_path)
        assert (rows["h100"]["capacity"], rows["a100"]["capacity"]) == (4, 0)
        # the partitionable A100 counts once, for the first class among its devices: mig-1g
        assert rows["mig-1g"]["capacity"] == 7
        # a health check taints GPU 1: the driver publishes a new generation of the pool
        cluster.apply(draslices.whole_gpus(nodes[0], 4, generation=2, taints={1: [XID_TAINT]}))
        rows = planned_capacity(cluster, tmp_path)
        assert rows["h100"]["capacity"] == 3
    finally:
        cluster.kubectl(
            "delete",
            "resourceslices",
            "-l",
            "!nonexistent",
            "--field-selector",
            f"spec.driver={draslices.DRIVER}",
            "--ignore-not-found",
        )
        cluster.kubectl("delete", "node", *nodes, "--ignore-not-found")
