"""DRA extended resources (beta in Kubernetes 1.36) on a real kube-apiserver: `nvidia.com/gpu: N`
is rewritten to the extended resource a DeviceClass serves (its `extendedResourceName`, or the
implicit `deviceclass.resource.kubernetes.io/<class>`), the API server stores the pod as
rewritten, and the webhook creates no object (the API server's scheduler builds the claim).
A pod asking for a served resource reaches the webhook through the shipped matchConditions
(`deviceclass.resource.kubernetes.io/` names) and is judged as the claim it becomes.

The webhooks are registered as `quotaguard registrations --policy` renders them for this
policy, which declares a class of a name the shipped registrations do not send
(`example.com/a100-slice`): a tenant asking only for it is judged too. When the policy gains a
name the registrations in the cluster do not list, `quotaguard registrations --check` and the
controller's `quotaguard_registrations_unsent_resource_names` say so.

No DRA driver runs and no device is allocated: what is proven is what the API server accepts,
stores and sends to the webhook.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster import REPO_ROOT, Cluster, QuotaguardServer, wait_until
from quotaguard.webhook.name_widening import (
    MAX_CONFIGURATION_BYTES,
    MAX_EXTRA_NAMES,
    ExtraNameError,
)
from quotaguard.webhook.registrations import configurations

RESEARCH = "dra-ext-research-e2e"  # tenant research: MIG slices only, rewritten to them
TRAINING = "dra-ext-training-e2e"  # tenant training: H100s, rewritten to them
IMPLICIT = "deviceclass.resource.kubernetes.io/"
MIG_RESOURCE = "gpu.example.com/mig-1g"  # what the MIG DeviceClass declares
# a device plugin's resource whose name looks like no accelerator: not sent by default
SLICE = "example.com/a100-slice"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POLICY = f"""\
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {{name: dra-extended-e2e}}
spec:
  gpuClasses:
    - name: h100
      memory: 80Gi
      dra: {{deviceClassName: h100.nvidia.com, extendedResourceName: {IMPLICIT}h100.nvidia.com}}
    - name: mig-1g
      memory: 10Gi
      slices: 1
      dra: {{deviceClassName: mig-1g.nvidia.com, extendedResourceName: {MIG_RESOURCE}}}
    - {{name: a100-slice, resource: {SLICE}, memory: 10Gi}}
  tenants:
    - name: research
      namespaces: [{RESEARCH}]
      allowedClasses: [mig-1g, a100-slice]
      maxGPUsPerPod: 2
      rewrite: [{{to: mig-1g}}]
    - name: training
      namespaces: [{TRAINING}]
      allowedClasses: [h100]
      rewrite: [{{to: h100}}]
"""


def device_class(name: str, condition: str, extended: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selectors": [{"cel": {"expression": f"device.driver == 'gpu.nvidia.com' && {condition}"}}]
    }
    if extended is not None:
        spec["extendedResourceName"] = extended
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


DEVICE_CLASSES = [
    device_class("h100.nvidia.com", "device.attributes['gpu.nvidia.com'].productName == 'H100'"),
    device_class(
        "mig-1g.nvidia.com",
        "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",
        extended=MIG_RESOURCE,
    ),
    device_class("mig.nvidia.com", "device.attributes['gpu.nvidia.com'].type == 'mig'"),
]


def gpu_pod(name: str, namespace: str, resource: str, count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/cuda:12",
                    "resources": {"limits": {resource: str(count)}},
                }
            ]
        },
    }


@pytest.fixture(scope="module")
def served(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[QuotaguardServer]:
    work = tmp_path_factory.mktemp("dra-extended-policy")
    policy, registrations = work / "policy.yaml", work / "registrations"
    policy.write_text(POLICY)
    rendered = subprocess.run(
        [sys.executable, "-m", "quotaguard", "registrations", "--policy", str(policy),
         "--out-dir", str(registrations)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    for namespace in (RESEARCH, TRAINING):
        cluster.create_namespace(namespace)
    cluster.apply(DEVICE_CLASSES)
    server = cluster.serve_quotaguard(
        policy,
        components="webhook",
        args=["--webhook-read-dra"],
        name="qg-dra-extended-e2e",
        webhook_dir=registrations,
    )
    try:
        yield server
    finally:
        cluster.stop_quotaguard(server)
        cluster.kubectl(
            "delete", "namespace", RESEARCH, TRAINING, "--wait=false", "--ignore-not-found"
        )
        names = [c["metadata"]["name"] for c in DEVICE_CLASSES]
        cluster.kubectl("delete", "deviceclass", *names, "--ignore-not-found")


def refused(cluster: Cluster, obj: dict[str, Any]) -> str:
    result = cluster.create(obj, check=False)
    assert result.returncode != 0, f"admitted: {result.stdout[:2000]}"
    return result.stderr


def test_a_whole_gpu_is_rewritten_to_the_implicit_extended_resource_and_nothing_is_created(
    cluster: Cluster, served: QuotaguardServer
) -> None:
    cluster.create(gpu_pod("whole", TRAINING, "nvidia.com/gpu", 2))
    stored = cluster.get("pod", "whole", namespace=TRAINING)
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {
        f"{IMPLICIT}h100.nvidia.com": "2"
    }
    assert "resourceClaims" not in stored["spec"]
    assert stored["metadata"]["labels"][QUEUE_LABEL] == "training"
    claims = cluster.get("resourceclaims", namespace=TRAINING)
    assert claims["items"] == []


def test_a_whole_gpu_is_rewritten_to_the_name_a_device_class_declares(
    cluster: Cluster, served: QuotaguardServer
) -> None:
    cluster.create(gpu_pod("slice", RESEARCH, "nvidia.com/gpu"))
    stored = cluster.get("pod", "slice", namespace=RESEARCH)
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {MIG_RESOURCE: "1"}
    assert stored["metadata"]["labels"][QUEUE_LABEL] == "research"


def test_an_implicit_extended_resource_of_a_forbidden_class_reaches_the_webhook_and_is_refused(
    cluster: Cluster, served: QuotaguardServer
) -> None:
    # no nvidia.com/ key and no accelerator-like name: only the deviceclass prefix sends it
    stderr = refused(cluster, gpu_pod("sneak", RESEARCH, f"{IMPLICIT}h100.nvidia.com"))
    assert (
        'denied the request: tenant "research": container "main" asks for '
        f'{IMPLICIT}h100.nvidia.com: "1", served through DRA by DeviceClass "h100.nvidia.com", '
        'which may get devices of class "h100", which the tenant does not allow'
    ) in stderr


def test_the_implicit_resource_of_a_gpu_device_class_no_class_names_is_refused(
    cluster: Cluster, served: QuotaguardServer
) -> None:
    stderr = refused(cluster, gpu_pod("any-mig", TRAINING, f"{IMPLICIT}mig.nvidia.com"))
    assert "an accelerator no GPU class" in stderr


def test_a_tenant_asking_only_for_a_name_the_policy_declares_is_refused_over_its_max(
    cluster: Cluster, served: QuotaguardServer
) -> None:
    # no nvidia.com/ key, no accelerator-like name, no claim: the shipped registrations do not
    # send this pod, the ones rendered for the policy do
    stderr = refused(cluster, gpu_pod("sneak-slices", RESEARCH, SLICE, 4))
    assert (
        'denied the request: tenant "research": at most 2 GPU-equivalents per pod '
        f"(maxGPUsPerPod); pod asks for 4 (main: {SLICE}: 4)"
    ) in stderr


def test_a_pod_asking_for_that_name_within_its_max_is_queued(
    cluster: Cluster, served: QuotaguardServer
) -> None:
    cluster.create(gpu_pod("slices", RESEARCH, SLICE, 2))
    stored = cluster.get("pod", "slices", namespace=RESEARCH)
    assert stored["metadata"]["labels"][QUEUE_LABEL] == "research"
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {SLICE: "2"}


def test_check_says_whether_the_clusters_registrations_send_the_policys_names(
    cluster: Cluster, served: QuotaguardServer, tmp_path: Path
) -> None:
    def check(policy_text: str) -> subprocess.CompletedProcess[str]:
        policy = tmp_path / "policy.yaml"
        policy.write_text(policy_text)
        return subprocess.run(
            [sys.executable, "-m", "quotaguard", "registrations", "--policy", str(policy),
             "--check", "--kubeconfig", str(cluster.kubeconfig)],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    current = check(POLICY)
    assert current.returncode == 0, current.stderr
    assert "send every resource name" in current.stdout
    # the policy in Git gains a class; the registrations in the cluster lag behind
    declared = f"    - {{name: a100-slice, resource: {SLICE}, memory: 10Gi}}\n"
    moved = check(
        POLICY.replace(
            declared,
            declared + "    - {name: h100-half, resource: example.net/h100-half, memory: 40Gi}\n",
        )
    )
    assert moved.returncode == 1, moved.stdout + moved.stderr
    assert "example.net/h100-half: the cluster's webhook registrations do not send" in moved.stderr
    assert SLICE not in moved.stderr


def test_the_controller_reports_a_name_the_clusters_registrations_do_not_send(
    cluster: Cluster, served: QuotaguardServer, tmp_path: Path
) -> None:
    declared = f"    - {{name: a100-slice, resource: {SLICE}, memory: 10Gi}}\n"
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        POLICY.replace(
            declared,
            declared + "    - {name: h100-half, resource: example.net/h100-half, memory: 40Gi}\n",
        )
    )
    controller = cluster.serve_quotaguard(
        policy, components="controller", args=["--mode", "recommend"], name="qg-unsent-e2e"
    )
    series = "quotaguard_registrations_unsent_resource_names"
    try:
        wait_until(
            lambda: f"{series}{{" in metrics(controller.http_port),
            timeout=90,
            interval=1,
            what=f"{series} on the controller's /metrics",
        )
        lines = [
            line for line in metrics(controller.http_port).splitlines() if line.startswith(series)
        ]
        assert lines == [f'{series}{{resource="example.net/h100-half"}} 1.0']
    finally:
        cluster.stop_quotaguard(controller)


def metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return ""


def longest_allowed() -> list[dict[str, Any]]:
    """The configurations for MAX_EXTRA_NAMES names padded as long as the byte bound allows
    (how long depends on how many webhooks the registrations hold)."""
    for pad in range(24, -1, -1):
        names = [f"example{i:02}.com/a100-slice-{'x' * pad}" for i in range(MAX_EXTRA_NAMES)]
        try:
            return configurations(names)
        except ExtraNameError:
            continue
    pytest.fail(f"{MAX_EXTRA_NAMES} names do not fit the byte bound even short")


def test_registrations_with_the_most_names_allowed_are_accepted_by_kubectl_apply(
    cluster: Cluster,
) -> None:
    """MAX_EXTRA_NAMES names, as long as MAX_CONFIGURATION_BYTES lets them be: the API server
    compiles every condition and `kubectl apply` keeps each configuration in its annotation."""
    configs = longest_allowed()
    sizes = [len(json.dumps(c, separators=(",", ":"))) for c in configs]
    assert max(sizes) > 0.9 * MAX_CONFIGURATION_BYTES, sizes
    for config in configs:  # names of their own: the module's registrations are live
        config["metadata"]["name"] += "-size-check"
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": configs})
    result = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=listed, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
