"""One policy over a MultiKueue fleet on three real API servers on this machine: a manager
(the MultiKueueConfig and MultiKueueClusters, the worker kubeconfigs in Secrets, every Workload)
and two workers, east and west, each with 16 kwok H100s. `quotaguard serve --components fleet`
runs against the manager and reads the workers through the kubeconfigs MultiKueue names.

A tenant's demand on the manager moves quota to the worker with room; a worker taken down keeps
its last quotas, leaves the fleet's capacity, is reported, and the fleet plan moves on.

On the workers Kueue's controller does not run: their Workloads' admission is written through
the status subresource as Kueue would. The last test starts Kueue with MultiKueue on the
manager.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import build, conftest
from e2e.cluster import Cluster, http_ok, wait_until, whole_gpu_node
from e2e.kueue import (
    KUEUE,
    ControllerProcess,
    admit,
    http_json,
    serve_controller,
    start_kueue,
    workload,
    workload_conditions,
)

GPU = "nvidia.com/gpu"
TENANTS = ("research", "product")
WORKERS = ("east", "west")


def cluster_queue(name: str, *, cohort: bool = True) -> dict[str, Any]:
    """A tenant's ClusterQueue at 0 H100s; in the workers' cohort, or (the manager's) in none,
    so that Kueue admits on the manager only within the quota quotaguard writes there."""
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            **({"cohortName": "gpu-fleet"} if cohort else {}),
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [{"name": "h100", "resources": [{"name": GPU, "nominalQuota": 0}]}],
                }
            ],
        },
    }


def policy(directory: Path) -> Path:
    document = {
        "apiVersion": "quotaguard.dev/v1alpha1",
        "kind": "TenantPolicy",
        "metadata": {"name": "gpu-fleet"},
        "spec": {
            "cohort": "gpu-fleet",
            "gpuClasses": [{"name": "h100", "resource": GPU, "memory": "80Gi", "flavor": "h100"}],
            "tenants": [
                {
                    "name": name,
                    "namespaces": [name],
                    "quota": {"h100": {"guaranteed": 8, "max": 32}},
                }
                for name in TENANTS
            ],
            "rebalance": {"interval": "2s"},
            "fleet": {
                "mode": "apply",
                "multiKueueConfig": "gpu-fleet",
                "kubeConfigNamespace": "kueue-system",
                "readTimeoutSeconds": 3,
            },
        },
    }
    path = directory / "policy.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def set_up_worker(worker: Cluster, prefix: str) -> None:
    worker.add_nodes(*(whole_gpu_node(f"{prefix}-h100-{i}", 8) for i in range(2)))
    for name in TENANTS:
        worker.create_namespace(name)
        worker.create(cluster_queue(name))


def set_up_manager(manager: Cluster, workers: dict[str, Cluster]) -> None:
    manager.create_namespace("kueue-system")
    for name in TENANTS:
        manager.create_namespace(name)
        manager.create(cluster_queue(name, cohort=False))
    for name, worker in workers.items():
        kubeconfig = base64.b64encode(worker.kubeconfig.read_bytes()).decode()
        manager.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": f"{name}-kubeconfig", "namespace": "kueue-system"},
                    "data": {"kubeconfig": kubeconfig},
                },
                {
                    "apiVersion": KUEUE,
                    "kind": "MultiKueueCluster",
                    "metadata": {"name": name},
                    "spec": {
                        "clusterSource": {
                            "kubeConfig": {
                                "locationType": "Secret",
                                "location": f"{name}-kubeconfig",
                            }
                        }
                    },
                },
            ]
        )
    manager.apply(
        {
            "apiVersion": KUEUE,
            "kind": "MultiKueueConfig",
            "metadata": {"name": "gpu-fleet"},
            "spec": {"clusters": list(workers)},
        }
    )


def run_research(cluster: Cluster, name: str, gpus: int, *, admitted: bool) -> None:
    cluster.create(workload(name, "research", "research", {GPU: 8}, count=gpus // 8))
    if admitted:
        admit(cluster, name, "research", "research", {GPU: "h100"}, {GPU: gpus}, count=gpus // 8)


def nominal(cluster: Cluster, queue: str) -> int:
    found = cluster.get("clusterqueue", queue)
    resource = found["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    return int(resource["nominalQuota"])


def quotas(cluster: Cluster) -> dict[str, int]:
    return {name: nominal(cluster, name) for name in TENANTS}


@pytest.fixture(scope="module")
def fleet(toolchain: build.Toolchain, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    started = time.monotonic()
    clusters: dict[str, Cluster] = {}
    try:
        for name in ("manager", *WORKERS):
            clusters[name] = conftest._start(toolchain, controllers=False)
        up = time.monotonic() - started
        for name in WORKERS:
            set_up_worker(clusters[name], name)
        set_up_manager(clusters["manager"], {n: clusters[n] for n in WORKERS})
        # research's pretraining: dispatched to east and running there, 16 GPUs, all of east
        run_research(clusters["east"], "pretrain", 16, admitted=True)
        run_research(clusters["manager"], "pretrain", 16, admitted=True)
        serving = serve_controller(
            clusters["manager"],
            policy(tmp_path_factory.mktemp("fleet")),
            pod_name="quotaguard-fleet-0",
            lease_namespace="quotaguard-system",
            components="fleet",
        )
        print(
            f"[e2e] fleet: three clusters up in {up:.1f}s, set up in "
            f"{time.monotonic() - started:.1f}s",
            flush=True,
        )
        yield clusters, serving
    finally:
        for cluster in clusters.values():
            conftest._finish(cluster)


def fleet_report(serving: ControllerProcess) -> dict[str, Any] | None:
    try:
        ready = http_json(f"{serving.url}/readyz")
    except OSError:
        return None
    found = ready.get("fleet") if isinstance(ready, dict) else None
    return found if isinstance(found, dict) else None


def test_demand_on_the_manager_moves_quota_to_the_worker_with_room(fleet: Any) -> None:
    clusters, _ = fleet
    manager, east, west = clusters["manager"], clusters["east"], clusters["west"]
    # Nothing waits: research holds east, product the idle west (lendable quota)
    wait_until(
        lambda: (
            quotas(east) == {"research": 16, "product": 0}
            and quotas(west) == {"research": 0, "product": 16}
        ),
        timeout=60,
        what="the fleet's first quotas on the workers",
    )
    assert quotas(manager) == {"research": 16, "product": 16}
    # research asks for 8 more on the manager: east has no room, west has
    started = time.monotonic()
    run_research(manager, "finetune", 8, admitted=False)
    wait_until(
        lambda: quotas(west) == {"research": 8, "product": 8},
        timeout=60,
        what="research's quota moving to west",
    )
    moved = time.monotonic() - started
    assert quotas(east) == {"research": 16, "product": 0}  # its running work stays
    wait_until(
        lambda: quotas(manager) == {"research": 24, "product": 8},
        timeout=30,
        what="the manager's quotas: the sum over the workers",
    )
    print(f"[e2e] fleet: quota moved to west {moved:.1f}s after the demand", flush=True)


def test_a_worker_taken_down_keeps_its_quotas_and_the_fleet_plan_moves_on(fleet: Any) -> None:
    clusters, serving = fleet
    manager, east, west = clusters["manager"], clusters["east"], clusters["west"]
    wait_until(lambda: quotas(manager) == {"research": 24, "product": 8}, timeout=60, what="B")
    east.stop_apiserver()
    started = time.monotonic()
    try:
        # the fleet is west's 16 GPUs now: both guarantees (8 each) there, the manager the sum
        wait_until(
            lambda: quotas(manager) == {"research": 8, "product": 8},
            timeout=60,
            what="the manager's quotas without east",
        )
        noticed = time.monotonic() - started
        assert quotas(west) == {"research": 8, "product": 8}
        report = fleet_report(serving)
        assert report is not None and "east" in report["unreachable"]
        assert report["capacity"] == {"h100": 16}
        kept = {c["name"]: c for c in report["clusters"]}["east"]
        assert {q["tenant"]: q["nominal"] for q in kept["quotas"]} == {"research": 16, "product": 0}
        metrics = _metrics(serving)
        assert 'quotaguard_fleet_cluster_reachable{cluster="east"} 0.0' in metrics
        assert (
            'quotaguard_fleet_quota{class="h100",cluster="manager",tenant="research"} 8.0'
            in metrics
        )
        print(f"[e2e] fleet: east down, plan moved on in {noticed:.1f}s", flush=True)
    finally:
        east.start_apiserver()
    # east back: its quotas are the ones it kept, and it rejoins the fleet
    assert quotas(east) == {"research": 16, "product": 0}
    wait_until(
        lambda: quotas(manager) == {"research": 24, "product": 8},
        timeout=60,
        what="east back in the fleet",
    )


def multikueue_on_the_manager(manager: Cluster) -> None:
    """What MultiKueue needs on the manager: a flavor, the admission check on the tenants'
    ClusterQueues, a LocalQueue for product."""
    manager.apply(
        [
            {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "h100"}},
            {
                "apiVersion": KUEUE,
                "kind": "AdmissionCheck",
                "metadata": {"name": "multikueue"},
                "spec": {
                    "controllerName": "kueue.x-k8s.io/multikueue",
                    "parameters": {
                        "apiGroup": "kueue.x-k8s.io",
                        "kind": "MultiKueueConfig",
                        "name": "gpu-fleet",
                    },
                },
            },
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {"name": "product", "namespace": "product"},
                "spec": {"clusterQueue": "product"},
            },
        ]
    )
    strategy = {"admissionChecksStrategy": {"admissionChecks": [{"name": "multikueue"}]}}
    for name in TENANTS:
        manager.kubectl(
            "patch", "clusterqueue", name, "--type=merge", "-p", json.dumps({"spec": strategy})
        )


def active(cluster: Cluster, kind: str, name: str) -> bool:
    found = cluster.get(kind, name)
    conditions = (found.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


def test_kueue_on_the_manager_reaches_the_workers_and_admits_under_the_fleet_quota(
    fleet: Any,
) -> None:
    """Kueue's controller with MultiKueue on the manager connects to the workers through the
    Secrets quotaguard reads, and reserves quota on the manager within the sum quotaguard
    wrote: product's second Workload waits until quotaguard raises product's fleet quota."""
    clusters, _ = fleet
    manager = clusters["manager"]
    binary = build.kueue_binary()
    if binary is None:
        pytest.skip("Kueue controller not built (optional e2e.build step)")
    started = time.monotonic()
    start_kueue(manager, binary, webhooks=False, frameworks=["batch/job"])
    multikueue_on_the_manager(manager)
    for name in WORKERS:
        wait_until(
            lambda name=name: active(manager, "multikueuecluster", name),
            timeout=90,
            what=f"MultiKueueCluster {name} Active",
        )
    print(f"[e2e] fleet: Kueue with MultiKueue up in {time.monotonic() - started:.1f}s", flush=True)
    wait_until(
        lambda: quotas(manager)["product"] == 8, timeout=60, what="product's 8 on the manager"
    )
    manager.create(workload("eval", "product", "product", {GPU: 4}))
    wait_until(
        lambda: workload_conditions(manager, "eval", "product").get("QuotaReserved") == "True",
        timeout=60,
        what="Kueue reserving eval's 4 GPUs under product's 8",
    )
    manager.create(workload("eval-big", "product", "product", {GPU: 8}))
    # 4 + 8 is over the manager's 8 (and its ClusterQueue borrows from no cohort): Kueue can
    # reserve it only once quotaguard plans product's demand of 12 (west has the room) and
    # writes the sum on the manager
    wait_until(
        lambda: quotas(manager)["product"] == 12,
        timeout=60,
        what="quotaguard raising product's quota to its demand",
    )
    wait_until(
        lambda: workload_conditions(manager, "eval-big", "product").get("QuotaReserved") == "True",
        timeout=60,
        what="Kueue reserving eval-big under the raised quota",
    )
    assert quotas(clusters["west"])["product"] == 12


def _metrics(serving: ControllerProcess) -> str:
    import urllib.request

    assert http_ok(f"{serving.url}/healthz")
    with urllib.request.urlopen(f"{serving.url}/metrics", timeout=5) as response:
        return str(response.read().decode())
