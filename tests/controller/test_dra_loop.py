"""The controller on a DRA cluster: it watches ResourceSlices, DeviceClasses, claims and
templates, and writes quotas under the resource Kueue counts the DeviceClass under."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from quotaguard.controller.backoff import Backoff
from quotaguard.controller.kube_clients import served_groups
from quotaguard.controller.quota_controller import Controller, ControllerSettings
from quotaguard.controller.trim import dra_trimmer, workload_trimmer
from quotaguard.controller.watch import WatchSettings
from quotaguard.policy.loader import load_policy_text

from .fakes import FakeApiServer, fake_clients
from .test_loop import CPU_GROUP, node, run, synced_interval

CQ = "kueue.x-k8s.io/v1beta2/clusterqueues"
WORKLOADS = "kueue.x-k8s.io/v1beta2/workloads"
DRA = "resource.k8s.io/v1"
POLICY_TEXT = """
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {name: dra}
spec:
  backend: kueue
  gpuClasses:
    - {name: h100, memory: 80Gi, dra: {deviceClassName: gpu.nvidia.com}}
  tenants:
    - {name: training, namespaces: [training], quota: {h100: {guaranteed: 0, max: 8}}}
    - {name: research, namespaces: [research], quota: {h100: {guaranteed: 0, max: 8}}}
  rebalance: {mode: apply, interval: 1s, maxStepPercent: 100, usableCapacityPercent: 100}
"""
KUEUE_CONFIG = """
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
resources:
  deviceClassMappings:
    - {name: example.com/gpu, deviceClassNames: [gpu.nvidia.com]}
"""


def gpu_slice(node_name: str, gpus: int, tainted: int = 0) -> dict[str, Any]:
    devices = [
        {"name": f"gpu-{i}", "attributes": {"gpu.nvidia.com/type": {"string": "gpu"}}}
        for i in range(gpus)
    ]
    for device in devices[:tainted]:
        device["taints"] = [{"key": "gpu.nvidia.com/xid", "effect": "NoExecute"}]
    return {
        "apiVersion": DRA,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def cluster_queue(name: str, resource: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                copy.deepcopy(CPU_GROUP),
                {
                    "coveredResources": [resource],
                    "flavors": [
                        {"name": "h100", "resources": [{"name": resource, "nominalQuota": "0"}]}
                    ],
                },
            ],
        },
    }


def pending_workload(name: str, namespace: str, pods: int) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "queueName": namespace,
            "podSets": [
                {
                    "name": "main",
                    "count": pods,
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "resources": {"claims": [{"name": "g"}]}}],
                            "resourceClaims": [
                                {"name": "g", "resourceClaimTemplateName": "two-gpus"}
                            ],
                        }
                    },
                }
            ],
        },
    }


def two_gpus(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": DRA,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two-gpus", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2},
                        }
                    ]
                }
            }
        },
    }


def dra_server(*, kueue_config: bool = True, tainted: int = 0) -> FakeApiServer:
    server = FakeApiServer()
    server.groups = {"kueue.x-k8s.io": ["v1beta2"], "resource.k8s.io": ["v1"]}
    server.put("v1/nodes", node("gpu-1", "cpu", 64))
    server.put(f"{DRA}/resourceslices", gpu_slice("gpu-1", 8, tainted))
    server.put(
        f"{DRA}/deviceclasses",
        {
            "apiVersion": DRA,
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {},
        },
    )
    server.put(f"{DRA}/resourceclaimtemplates", two_gpus("training"))
    server.put(WORKLOADS, pending_workload("train", "training", 3))  # 3 pods x 2 GPUs
    if kueue_config:
        server.put(
            "v1/configmaps",
            {
                "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
                "data": {"controller_manager_config.yaml": KUEUE_CONFIG},
            },
        )
    for tenant in ("training", "research"):
        server.put(CQ, cluster_queue(tenant, "example.com/gpu"))
    return server


def make(server: FakeApiServer) -> Controller:
    ticks = itertools.count(1_000_000, 1)
    settings = ControllerSettings(
        leader_election=False,
        watch_settings=lambda: WatchSettings(backoff=Backoff(base=0.001, cap=0.005)),
    )
    policy = load_policy_text(POLICY_TEXT, "dra.yaml")
    return Controller(policy, fake_clients(server), settings, clock=lambda: next(ticks))


def run_to_target(controller: Controller, intervals: int = 8) -> set[str]:
    """Intervals until the quotas stop moving (each step is bounded); the watches' names."""

    async def body(c: Controller) -> set[str]:
        assert await synced_interval(c) == "planned"
        for _ in range(intervals):
            await c.run_interval()
        return set(c.watches)

    watched: set[str] = run(controller, body)
    return watched


def quotas(server: FakeApiServer, name: str) -> dict[str, str]:
    found = server.get(CQ, name)
    assert found is not None
    group = found["spec"]["resourceGroups"][1]
    return {r["name"]: r["nominalQuota"] for f in group["flavors"] for r in f["resources"]}


def test_the_quota_of_a_dra_class_follows_claims_under_kueues_mapped_name() -> None:
    server = dra_server()
    controller = make(server)

    watched = run_to_target(controller)
    assert {
        "resourceslices",
        "deviceclasses",
        "resourceclaims",
        "resourceclaimtemplates",
    } <= watched
    report = controller.status.last_report
    assert report is not None
    (row,) = [r for r in report["classes"] if r["name"] == "h100"]
    assert row["capacity"] == 8 and row["resource"] == "example.com/gpu"
    # training's 3 pods x 2 GPUs pending: its quota rises to them, within the 8 devices
    assert quotas(server, "training") == {"example.com/gpu": "6"}
    assert int(quotas(server, "research")["example.com/gpu"]) <= 2


def test_a_tainted_device_leaves_the_capacity_the_quota_is_cut_to() -> None:
    server = dra_server(tainted=4)
    controller = make(server)
    run_to_target(controller)
    report = controller.status.last_report
    assert report is not None
    (row,) = [r for r in report["classes"] if r["name"] == "h100"]
    assert row["capacity"] == 4
    assert quotas(server, "training") == {"example.com/gpu": "4"}


def test_without_kueues_mapping_the_class_is_written_as_declared_and_said(caplog: Any) -> None:
    server = dra_server(kueue_config=False)
    for tenant in ("training", "research"):
        server.put(CQ, cluster_queue(tenant, "deviceclass/gpu.nvidia.com"))
    controller = make(server)
    run_to_target(controller)
    assert "cannot read ConfigMap kueue-system/kueue-manager-config (404)" in caplog.text
    assert quotas(server, "training")["deviceclass/gpu.nvidia.com"] == "6"


def test_discovery_tells_whether_dra_is_served() -> None:
    groups = {"groups": [{"name": "resource.k8s.io", "versions": [{"version": "v1"}]}]}
    assert served_groups(groups).dra
    assert not served_groups({"groups": []}).dra


def test_trimmed_workloads_keep_their_claims_and_claims_only_what_they_hold() -> None:
    workload = workload_trimmer("kueue.x-k8s.io/v1beta2")(pending_workload("w", "training", 1))
    assert workload is not None
    spec = workload["spec"]["podSets"][0]["template"]["spec"]
    assert spec["resourceClaims"] == [{"name": "g", "resourceClaimTemplateName": "two-gpus"}]
    claim = {
        "metadata": {"name": "c", "namespace": "training", "managedFields": [{}]},
        "spec": {"devices": {"requests": []}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"driver": "d", "pool": "p", "device": "g0", "request": "r"}]
                },
                "nodeSelector": {"big": "x" * 1000},
            },
            "reservedFor": [{"name": "pod"}],
        },
    }
    trimmed = dra_trimmer(DRA, "ResourceClaim")(claim)
    assert trimmed == {
        "apiVersion": DRA,
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "training"},
        "spec": {"devices": {"requests": []}},
        "status": {
            "allocation": {"devices": {"results": [{"driver": "d", "pool": "p", "device": "g0"}]}}
        },
    }


def test_volcano_queues_count_dra_devices_as_deviceclass_keys() -> None:
    server = dra_server(kueue_config=True)
    server.groups = {"scheduling.volcano.sh": ["v1beta1"], "resource.k8s.io": ["v1"]}
    path = "scheduling.volcano.sh/v1beta1/queues"
    for name in ("training", "research"):
        server.put(
            path,
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": name},
                "spec": {"weight": 1, "capability": {"cpu": "64"}},
            },
        )
    text = POLICY_TEXT.replace("backend: kueue", "backend: volcano").replace(
        "quota: {h100: {guaranteed: 0, max: 8}}}\n    - {name: research",
        "quota: {h100: {guaranteed: 3, max: 8}}}\n    - {name: research",
    )
    settings = ControllerSettings(
        leader_election=False,
        watch_settings=lambda: WatchSettings(backoff=Backoff(base=0.001, cap=0.005)),
    )
    controller = Controller(load_policy_text(text, "volcano.yaml"), fake_clients(server), settings)
    run_to_target(controller)
    training = server.get(path, "training")["spec"]
    # Kueue's mappings are not read for Volcano: its key for a DeviceClass's devices
    assert training["capability"] == {"cpu": "64", "deviceclass/gpu.nvidia.com": "8"}
    assert training["guarantee"]["resource"] == {"deviceclass/gpu.nvidia.com": "3"}


def test_device_taint_rules_are_watched_only_where_served() -> None:
    server = dra_server()
    server.groups["resource.k8s.io"] = ["v1", "v1beta2"]  # the version, without the resource
    assert "devicetaintrules" not in run_to_target(make(server), intervals=1)
    server.resources["resource.k8s.io/v1beta2"] = ["devicetaintrules"]
    server.put(
        "resource.k8s.io/v1beta2/devicetaintrules",
        {
            "apiVersion": "resource.k8s.io/v1beta2",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "xid-79"},
            "spec": {
                "deviceSelector": {"pool": "gpu-1", "device": "gpu-7"},
                "taint": {"key": "gpu.nvidia.com/xid", "effect": "NoExecute"},
            },
        },
    )
    controller = make(server)
    assert "devicetaintrules" in run_to_target(controller, intervals=1)
    report = controller.status.last_report
    assert report is not None
    (row,) = [r for r in report["classes"] if r["name"] == "h100"]
    assert row["capacity"] == 7
    assert [f["gpu"] for f in row["faultyGpus"]] == ["gpu-1/gpu-7"]
