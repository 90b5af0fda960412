"""A MultiKueue fleet on this machine for `e2e/test_fleet.py`: three control planes (a manager
and two workers, east and west), each worker with 16 kwok H100s, the tenants' namespaces,
ResourceFlavor, ClusterQueues and LocalQueues, and Kueue's controller with its webhooks on
each worker, as MultiKueue expects of a worker cluster. The manager holds the
MultiKueueConfig, the MultiKueueClusters and the workers' kubeconfigs in Secrets; Kueue with
MultiKueue starts there only when a test asks (`start_multikueue`), so the first tests see the
manager as quotaguard alone reads and writes it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e import build, conftest
from e2e.cluster import Cluster, wait_until, whole_gpu_node
from e2e.kueue import KUEUE, KueueProcess, admit, start_kueue, workload

GPU = "nvidia.com/gpu"
TENANTS = ("research", "product")
WORKERS = ("east", "west")
FLEET = "gpu-fleet"
MULTIKUEUE_CHECK = "multikueue"


def cluster_queue(name: str) -> dict[str, Any]:
    """A tenant's ClusterQueue at 0 H100s, in no cohort: on a worker Kueue admits a tenant's
    work only within the quota quotaguard writes there (no borrowing from the other tenant),
    and on the manager only within the sum quotaguard writes."""
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [{"name": "h100", "resources": [{"name": GPU, "nominalQuota": 0}]}],
                }
            ],
        },
    }


def local_queue(tenant: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": tenant, "namespace": tenant},
        "spec": {"clusterQueue": tenant},
    }


def policy(directory: Path) -> Path:
    document = {
        "apiVersion": "quotaguard.dev/v1alpha1",
        "kind": "TenantPolicy",
        "metadata": {"name": FLEET},
        "spec": {
            "cohort": FLEET,
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
                "multiKueueConfig": FLEET,
                "kubeConfigNamespace": "kueue-system",
                "readTimeoutSeconds": 3,
            },
        },
    }
    path = directory / "policy.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def run_research(cluster: Cluster, name: str, gpus: int, *, admitted: bool) -> None:
    """A bare Workload of research's (`gpus` in pods of 8), admitted through the status
    subresource as Kueue would when `admitted`."""
    cluster.create(workload(name, "research", "research", {GPU: 8}, count=gpus // 8))
    if admitted:
        admit(cluster, name, "research", "research", {GPU: "h100"}, {GPU: gpus}, count=gpus // 8)


def set_up_worker(worker: Cluster, name: str) -> None:
    """16 H100s, and the queues MultiKueue expects on a worker: the manager's namespaces and
    LocalQueues mirrored, a ClusterQueue per tenant. On east research's pretraining runs (16
    GPUs, all of east), admitted before east's Kueue starts, as if dispatched earlier."""
    worker.add_nodes(*(whole_gpu_node(f"{name}-h100-{i}", 8) for i in range(2)))
    worker.apply({"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "h100"}})
    for tenant in TENANTS:
        worker.create_namespace(tenant)
        worker.create(cluster_queue(tenant))
        worker.create(local_queue(tenant))
    if name == "east":
        run_research(worker, "pretrain", 16, admitted=True)


def set_up_manager(manager: Cluster, workers: Mapping[str, Cluster]) -> None:
    manager.create_namespace("kueue-system")
    for tenant in TENANTS:
        manager.create_namespace(tenant)
        manager.create(cluster_queue(tenant))
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
            "metadata": {"name": FLEET},
            "spec": {"clusters": list(workers)},
        }
    )
    # research's pretraining as the manager holds it: dispatched to east and running there
    run_research(manager, "pretrain", 16, admitted=True)


def multikueue_on_the_manager(manager: Cluster) -> None:
    """What MultiKueue needs on the manager: a flavor, the admission check on the tenants'
    ClusterQueues, the tenants' LocalQueues."""
    manager.apply(
        [
            {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "h100"}},
            {
                "apiVersion": KUEUE,
                "kind": "AdmissionCheck",
                "metadata": {"name": MULTIKUEUE_CHECK},
                "spec": {
                    "controllerName": "kueue.x-k8s.io/multikueue",
                    "parameters": {
                        "apiGroup": "kueue.x-k8s.io",
                        "kind": "MultiKueueConfig",
                        "name": FLEET,
                    },
                },
            },
            *(local_queue(tenant) for tenant in TENANTS),
        ]
    )
    strategy = {"admissionChecksStrategy": {"admissionChecks": [{"name": MULTIKUEUE_CHECK}]}}
    for name in TENANTS:
        manager.kubectl(
            "patch", "clusterqueue", name, "--type=merge", "-p", json.dumps({"spec": strategy})
        )


def active(cluster: Cluster, kind: str, name: str) -> bool:
    found = cluster.get(kind, name)
    conditions = (found.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


@dataclass
class Fleet:
    """The three clusters, Kueue's controller on each worker (none when Kueue is not built),
    and how long starting them took."""

    clusters: dict[str, Cluster]
    worker_kueue: dict[str, KueueProcess] = field(default_factory=dict)
    manager_kueue: KueueProcess | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def manager(self) -> Cluster:
        return self.clusters["manager"]

    def start_multikueue(self) -> KueueProcess | None:
        """Kueue's controller with MultiKueue and its webhooks (batch/Job) on the manager,
        once, and the MultiKueue objects; waits until both MultiKueueClusters are Active.
        None when Kueue is not built."""
        binary = build.kueue_binary()
        if binary is None:
            return None
        if self.manager_kueue is None:
            started = time.monotonic()
            self.manager_kueue = start_kueue(self.manager, binary, frameworks=["batch/job"])
            multikueue_on_the_manager(self.manager)
            wait_until(
                lambda: all(active(self.manager, "multikueuecluster", n) for n in WORKERS),
                timeout=90,
                what="both MultiKueueClusters Active",
            )
            self.timings["manager kueue"] = round(time.monotonic() - started, 1)
        return self.manager_kueue


def _start_worker(toolchain: build.Toolchain, name: str, binary: Path | None, fleet: Fleet) -> None:
    started = time.monotonic()
    worker = conftest._start(toolchain, controllers=False)
    fleet.clusters[name] = worker
    set_up_worker(worker, name)
    fleet.timings[f"{name} up"] = round(time.monotonic() - started, 1)
    if binary is not None:
        fleet.worker_kueue[name] = start_kueue(worker, binary, frameworks=["batch/job"])
        fleet.timings[f"{name} kueue"] = round(time.monotonic() - started, 1)


@contextlib.contextmanager
def running_fleet(toolchain: build.Toolchain) -> Iterator[Fleet]:
    """Start the manager in this thread and each worker, its set-up and its Kueue in a thread
    of its own, all at once; stop them all on exit (their files kept when a test failed)."""
    binary = build.kueue_binary()
    fleet = Fleet(clusters={})
    started = time.monotonic()
    # A process dies with the thread that started it (see e2e.cluster.Process): the workers'
    # threads stay alive, idle in the pool, until the fleet is stopped.
    pool = ThreadPoolExecutor(max_workers=len(WORKERS), thread_name_prefix="fleet-worker")
    workers = [pool.submit(_start_worker, toolchain, name, binary, fleet) for name in WORKERS]
    try:
        fleet.clusters["manager"] = conftest._start(toolchain, controllers=False)
        fleet.timings["manager up"] = round(time.monotonic() - started, 1)
        for started_worker in workers:
            started_worker.result()
        set_up_manager(fleet.manager, {name: fleet.clusters[name] for name in WORKERS})
        fleet.timings["fleet up"] = round(time.monotonic() - started, 1)
        yield fleet
    finally:
        for started_worker in workers:
            started_worker.exception()  # wait: a worker still starting is stopped too
        for cluster in fleet.clusters.values():
            conftest._finish(cluster)
        pool.shutdown()
