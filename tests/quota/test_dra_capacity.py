"""GPU capacity from ResourceSlices and demand from Workloads' DRA claims, and `plan
--snapshot` with both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from quotaguard.cli import main
from quotaguard.quota.class_capacity import Outage, capacities_from_totals
from quotaguard.quota.cluster import parse_objects
from quotaguard.quota.demand import ClassDemand
from quotaguard.quota.dracapacity import dra_capacity, with_dra_capacity
from quotaguard.quota.drademand import dra_demand, with_dra_demand
from tests.policies import DRA_A100 as A100
from tests.policies import DRA_H100 as H100
from tests.policies import DRA_MIG_1G as MIG_1G
from tests.policies import DRA_MIG_3G as MIG_3G
from tests.policies import document, policy

FIXTURES = Path(__file__).parents[1] / "fixtures" / "dra"
CLASSES = (H100, A100, MIG_1G, MIG_3G)


def load(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]


def cluster(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [*load("slices.yaml"), *load("deviceclasses.yaml"), *extra]


def allocation(*devices: str, node: str = "node-2") -> dict[str, Any]:
    """A ResourceClaim holding `devices` of `node`'s pool."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "held", "namespace": "research"},
        "spec": {
            "devices": {
                "requests": [{"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com"}}]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "mig", "driver": "gpu.nvidia.com", "pool": node, "device": d}
                        for d in devices
                    ]
                }
            }
        },
    }


def test_whole_gpus_per_node_and_class_a_tainted_one_out_an_old_generation_ignored() -> None:
    capacity = dra_capacity(policy([], classes=CLASSES), cluster())
    assert capacity.by_node["node-1"] == {"h100": 1}
    assert capacity.outages == {
        "h100": (Outage("node-1", "node-1/gpu-1", "device taint gpu.nvidia.com/xid:NoExecute"),)
    }
    assert capacity.missing_device_classes == ()


def test_an_unused_partitionable_gpu_counts_once_for_the_first_class_of_the_policy() -> None:
    whole_first = dra_capacity(policy([], classes=CLASSES), cluster())
    assert whole_first.by_node["node-2"] == {"a100": 1}
    mig_first = dra_capacity(policy([], classes=(MIG_1G, MIG_3G, H100, A100)), cluster())
    assert mig_first.by_node["node-2"] == {"mig-1g": 7}


def test_a_partitionable_gpu_with_allocated_devices_counts_for_their_class() -> None:
    held = allocation("gpu-0-mig-3g-40gb-0")
    capacity = dra_capacity(policy([], classes=CLASSES), cluster(held))
    assert capacity.by_node["node-2"] == {"mig-3g": 2}  # two 3g placements fit the counters
    held = allocation("gpu-0-mig-1g-10gb-2", "gpu-0-mig-1g-10gb-5")
    capacity = dra_capacity(policy([], classes=CLASSES), cluster(held))
    assert capacity.by_node["node-2"] == {"mig-1g": 7}


def test_without_device_classes_devices_are_not_told_apart() -> None:
    capacity = dra_capacity(policy([], classes=CLASSES), load("slices.yaml"))
    assert capacity.by_node == {}
    assert capacity.missing_device_classes == ("gpu.nvidia.com", "mig.nvidia.com")


def test_dra_capacity_joins_the_planners_rows_on_counted_nodes_only() -> None:
    tenants = policy([], classes=CLASSES)
    rows = capacities_from_totals(tenants, {"h100": 2}, {"h100": 1})
    dra = dra_capacity(tenants, cluster())
    joined = with_dra_capacity(tenants, rows, dra, ["node-1", "node-2"])
    assert (joined["h100"].capacity, joined["h100"].distributable) == (3, 2)
    assert joined["a100"].capacity == 1
    assert joined["h100"].faulty == dra.outages["h100"]
    cordoned = with_dra_capacity(tenants, rows, dra, ["node-1"])
    assert cordoned["a100"].capacity == 0


def workload(
    name: str, claims: list[dict[str, str]], *, count: int, admitted: bool
) -> dict[str, Any]:
    found: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "research"},
        "spec": {
            "queueName": "research",
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "resources": {"claims": [{"name": c["name"]} for c in claims]},
                                }
                            ],
                            "resourceClaims": claims,
                        }
                    },
                }
            ],
        },
    }
    if admitted:
        found["status"] = {
            "admission": {"clusterQueue": "research", "podSetAssignments": [{"name": "main"}]},
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
        }
    return found


def test_workload_claims_are_demand_per_pod_and_shared_claims_once() -> None:
    tenants = policy([{"name": "research"}], classes=CLASSES)
    objects = [
        *load("claims.yaml"),
        workload(
            "a", [{"name": "g", "resourceClaimTemplateName": "mig-pair"}], count=3, admitted=True
        ),
        workload("b", [{"name": "g", "resourceClaimName": "shared-mig"}], count=4, admitted=False),
        workload(
            "c",
            [{"name": "g", "resourceClaimTemplateName": "mig-or-whole"}],
            count=2,
            admitted=False,
        ),
        workload(
            "d", [{"name": "g", "resourceClaimTemplateName": "later"}], count=1, admitted=False
        ),
    ]
    snapshot = parse_objects(objects, gpu_resources=tenants.gpu_resources)
    found = dra_demand(tenants, snapshot)
    assert found.demand == {
        "research": {
            "mig-1g": ClassDemand(usage=3, pending=1 + 2),
            "mig-3g": ClassDemand(usage=3, pending=0),
        }
    }
    assert found.problems == (
        'Workload research/d: ResourceClaimTemplate "later" of pod set "main" is not in the '
        "snapshot; its GPUs are not counted",
    )
    merged = with_dra_demand({"research": {"mig-1g": ClassDemand(usage=1)}}, found)
    assert merged["research"]["mig-1g"] == ClassDemand(usage=4, pending=3)


def test_plan_snapshot_counts_resource_slices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {}},
            "status": {
                "allocatable": {"cpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for name in ("node-1", "node-2")
    ]
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [*nodes, *cluster()]})
    )
    text = yaml.safe_dump(
        document([{"name": "research", "quota": {"h100": {"guaranteed": 1}}}], classes=CLASSES)
    )
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(text)
    code = main(["plan", "--policy", str(policy_file), "--snapshot", str(snapshot), "-o", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    rows = {row["name"]: row for row in report["classes"]}
    assert rows["h100"]["capacity"] == 1 and rows["a100"]["capacity"] == 1


def pod(
    name: str, claims: list[dict[str, str]], *, node: str | None, group: str | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "research"}
    if group is not None:
        metadata["annotations"] = {"scheduling.k8s.io/group-name": group}
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "resources": {"claims": [{"name": c["name"]} for c in claims]}}
        ],
        "resourceClaims": claims,
    }
    if node is not None:
        spec["nodeName"] = node
    phase = "Running" if node is not None else "Pending"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": phase},
    }


def test_pods_claims_are_demand_when_the_tenant_has_no_workloads() -> None:
    """Volcano PodGroups' pods and plain Pods ask for GPUs by claims too: a template per pod,
    a shared ResourceClaim once (usage while any of its pods runs)."""
    tenants = policy([{"name": "research"}], classes=CLASSES)
    own = [{"name": "g", "resourceClaimTemplateName": "mig-1g"}]
    shared = [{"name": "g", "resourceClaimName": "shared-mig"}]
    objects = [
        *load("claims.yaml"),
        pod("a-0", own, node="node-1", group="a"),
        pod("a-1", own, node=None, group="a"),
        pod("a-2", own, node=None, group="a"),
        pod("s-0", shared, node="node-1"),
        pod("s-1", shared, node=None),
        pod("lost", [{"name": "g", "resourceClaimTemplateName": "gone"}], node=None),
    ]
    snapshot = parse_objects(objects, gpu_resources=tenants.gpu_resources)
    found = dra_demand(tenants, snapshot)
    assert found.demand == {"research": {"mig-1g": ClassDemand(usage=1 + 1, pending=2)}}
    assert found.problems == (
        'Pod research/lost: ResourceClaimTemplate "gone" is not in the snapshot; '
        "its GPUs are not counted",
    )


def test_a_tenants_pods_are_not_counted_again_when_its_workloads_are() -> None:
    tenants = policy([{"name": "research"}], classes=CLASSES)
    claims = [{"name": "g", "resourceClaimTemplateName": "mig-1g"}]
    objects = [
        *load("claims.yaml"),
        workload("w", claims, count=2, admitted=True),
        pod("w-0", claims, node="node-1"),
        pod("w-1", claims, node="node-1"),
    ]
    snapshot = parse_objects(objects, gpu_resources=tenants.gpu_resources)
    assert dra_demand(tenants, snapshot).demand == {"research": {"mig-1g": ClassDemand(usage=2)}}


def test_the_controllers_pod_cache_keeps_pods_that_ask_by_claims_only() -> None:
    from quotaguard.controller.trim import pod_line_filter, pod_trimmer

    claims = [{"name": "g", "resourceClaimTemplateName": "mig-1g"}]
    raw = pod("p", claims, node=None, group="a")
    resources = frozenset({"nvidia.com/gpu"})
    assert pod_line_filter(resources)(json.dumps(raw).encode())
    kept = pod_trimmer(resources)(raw)
    assert kept is not None and kept["spec"]["resourceClaims"] == claims
    plain = pod("q", [], node=None)
    del plain["spec"]["resourceClaims"]
    assert pod_trimmer(resources)(plain) is None
