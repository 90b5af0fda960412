"""One policy over a MultiKueue fleet on three real API servers on this machine: a manager
(the MultiKueueConfig and MultiKueueClusters, the worker kubeconfigs in Secrets, every Workload)
and two workers, east and west, each with 16 kwok H100s and Kueue's controller
(`e2e/fleet.py`). `quotaguard serve --components fleet` runs against the manager and reads the
workers through the kubeconfigs MultiKueue names.

A tenant's demand on the manager moves quota to the worker with room; a worker taken down keeps
its last quotas, leaves the fleet's capacity, is reported, and the fleet plan moves on. Until
the third test Kueue does not run on the manager: the Workloads there are admitted through the
status subresource as Kueue would. From the third test on Kueue with MultiKueue runs there and
dispatches a tenant's Job to the worker quotaguard gave the quota.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import build
from e2e.cluster import Cluster, http_ok, wait_until
from e2e.fleet import GPU, TENANTS, WORKERS, Fleet, policy, run_research, running_fleet
from e2e.kueue import (
    ControllerProcess,
    http_json,
    serve_controller,
    workload_conditions,
)

FleetUnderTest = tuple[Fleet, ControllerProcess]


def nominal(cluster: Cluster, queue: str) -> int:
    found = cluster.get("clusterqueue", queue)
    resource = found["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    return int(resource["nominalQuota"])


def quotas(cluster: Cluster) -> dict[str, int]:
    return {name: nominal(cluster, name) for name in TENANTS}


@pytest.fixture(scope="module")
def fleet(
    toolchain: build.Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Fleet, ControllerProcess]]:
    started = time.monotonic()
    with running_fleet(toolchain) as running:
        serving = serve_controller(
            running.manager,
            policy(tmp_path_factory.mktemp("fleet")),
            pod_name="quotaguard-fleet-0",
            lease_namespace="quotaguard-system",
            components="fleet",
        )
        print(
            f"[e2e] fleet: set up in {time.monotonic() - started:.1f}s {running.timings}",
            flush=True,
        )
        yield running, serving


def fleet_report(serving: ControllerProcess) -> dict[str, Any] | None:
    try:
        ready = http_json(f"{serving.url}/readyz")
    except OSError:
        return None
    found = ready.get("fleet") if isinstance(ready, dict) else None
    return found if isinstance(found, dict) else None


def test_demand_on_the_manager_moves_quota_to_the_worker_with_room(fleet: FleetUnderTest) -> None:
    clusters = fleet[0].clusters
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


def test_a_worker_taken_down_keeps_its_quotas_and_the_fleet_plan_moves_on(
    fleet: FleetUnderTest,
) -> None:
    clusters, serving = fleet[0].clusters, fleet[1]
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


def test_kueue_on_the_manager_reaches_the_workers_and_admits_under_the_fleet_quota(
    fleet: FleetUnderTest,
) -> None:
    """Kueue's controller with MultiKueue on the manager connects to the workers through the
    Secrets quotaguard reads, and reserves quota on the manager within the sum quotaguard
    wrote: product's second Job waits until quotaguard raises product's fleet quota."""
    clusters = fleet[0].clusters
    manager = clusters["manager"]
    started = time.monotonic()
    if fleet[0].start_multikueue() is None:
        pytest.skip("Kueue controller not built (optional e2e.build step)")
    print(f"[e2e] fleet: Kueue with MultiKueue up in {time.monotonic() - started:.1f}s", flush=True)
    wait_until(
        lambda: quotas(manager)["product"] == 8, timeout=60, what="product's 8 on the manager"
    )
    # Jobs, not bare Workloads: MultiKueue rejects a Workload no Job owns (no adapter), at times
    # before Kueue has reserved it
    manager.create(batch_job("eval", "product", pods=1, gpus=4))
    evaluation = wait_until(
        lambda: workload_of_job(manager, "eval", "product"), timeout=30, what="eval's Workload"
    )
    wait_until(
        lambda: workload_conditions(manager, evaluation, "product").get("QuotaReserved") == "True",
        timeout=60,
        what="Kueue reserving eval's 4 GPUs under product's 8",
    )
    manager.create(batch_job("eval-big", "product", pods=1, gpus=8))
    big = wait_until(
        lambda: workload_of_job(manager, "eval-big", "product"),
        timeout=30,
        what="eval-big's Workload",
    )
    # 4 + 8 is over the manager's 8 (and its ClusterQueue borrows from no cohort): Kueue can
    # reserve it only once quotaguard plans product's demand of 12 (west has the room) and
    # writes the sum on the manager
    wait_until(
        lambda: quotas(manager)["product"] == 12,
        timeout=60,
        what="quotaguard raising product's quota to its demand",
    )
    wait_until(
        lambda: workload_conditions(manager, big, "product").get("QuotaReserved") == "True",
        timeout=60,
        what="Kueue reserving eval-big under the raised quota",
    )
    assert quotas(clusters["west"])["product"] == 12


def _metrics(serving: ControllerProcess) -> str:
    import urllib.request

    assert http_ok(f"{serving.url}/healthz")
    with urllib.request.urlopen(f"{serving.url}/metrics", timeout=5) as response:
        return str(response.read().decode())


def planned(serving: ControllerProcess) -> dict[str, tuple[int, int]] | None:
    """(research, product) as quotaguard's last fleet plan places them, per cluster."""
    report = fleet_report(serving)
    if report is None:
        return None
    rows = {c["name"]: c["quotas"] for c in report["clusters"]} | {"manager": report["manager"]}

    def nominal_of(rows: list[dict[str, Any]], tenant: str) -> int:
        return next((int(row["nominal"]) for row in rows if row["tenant"] == tenant), 0)

    return {
        cluster: (nominal_of(found, "research"), nominal_of(found, "product"))
        for cluster, found in rows.items()
    }


def batch_job(name: str, tenant: str, *, pods: int, gpus: int = 8) -> dict[str, Any]:
    """A batch Job as a tenant's user writes it on the manager: the tenant's queue label,
    `pods` pods of `gpus` H100s each at once. Kueue's webhook there suspends it and hands it to
    MultiKueue (`spec.managedBy`)."""
    container = {
        "name": "train",
        "image": "registry.example/train:1",
        "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": tenant,
            "labels": {"kueue.x-k8s.io/queue-name": tenant},
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def workload_of_job(cluster: Cluster, job: str, namespace: str = "research") -> str | None:
    """The name of the Workload Kueue made for the Job `job` (MultiKueue gives its copies on
    the workers the same name)."""
    for found in cluster.get("workloads.kueue.x-k8s.io", namespace=namespace)["items"]:
        owners = found["metadata"].get("ownerReferences") or []
        if any(o["kind"] == "Job" and o["name"] == job for o in owners):
            return str(found["metadata"]["name"])
    return None


def has_workload(cluster: Cluster, name: str) -> bool:
    found = cluster.kubectl(
        "get",
        "workloads.kueue.x-k8s.io",
        name,
        "-n",
        "research",
        "--ignore-not-found",
        "-o",
        "name",
    )
    return bool(found.stdout.strip())


def gpus_in_use(cluster: Cluster, queue: str) -> int:
    """The H100s Kueue counts as used in a ClusterQueue (its status.flavorsUsage)."""
    status = cluster.get("clusterqueue", queue).get("status") or {}
    return sum(
        int(resource.get("total", 0))
        for flavor in status.get("flavorsUsage") or []
        for resource in flavor.get("resources") or []
        if resource["name"] == GPU
    )


def test_a_job_on_the_manager_is_dispatched_to_the_worker_with_room_and_admitted_there(
    fleet: FleetUnderTest,
) -> None:
    """Kueue on the manager and on both workers: research's Job of 8 H100s, created on the
    manager, is admitted there once quotaguard's fleet quota allows, dispatched by MultiKueue,
    and admitted on west (east is full of research's pretraining) within the quota quotaguard
    raised on west; a Job beyond research's fleet quota is admitted nowhere."""
    running, serving = fleet
    if not running.worker_kueue or running.start_multikueue() is None:
        pytest.skip("Kueue controller not built (optional e2e.build step)")
    manager, east, west = (running.clusters[name] for name in ("manager", *WORKERS))
    # what the tests before left on the manager: research's Workload no Job owns, product's
    # Jobs (no garbage collector runs there: their Workloads are deleted too, and MultiKueue
    # deletes the copies on west)
    manager.kubectl(
        "delete", "workloads.kueue.x-k8s.io", "finetune", "-n", "research", "--ignore-not-found"
    )
    for job in ("eval", "eval-big"):
        owned = workload_of_job(manager, job, "product")
        manager.kubectl("delete", "job", job, "-n", "product", "--ignore-not-found", "--wait=false")
        if owned is not None:
            manager.kubectl(
                "delete", "workloads.kueue.x-k8s.io", owned, "-n", "product", "--wait=false"
            )
    # the plan (not yet the quotas, which a break in writing them would leave elsewhere)
    wait_until(
        lambda: planned(serving) == {"east": (16, 0), "west": (0, 16), "manager": (16, 16)},
        timeout=60,
        what="the fleet's plan with only research's pretraining",
    )
    assert quotas(west)["research"] == 0
    started = time.monotonic()
    manager.create(batch_job("sweep", "research", pods=1))
    sweep = wait_until(
        lambda: workload_of_job(manager, "sweep"), timeout=30, what="sweep's Workload"
    )
    wait_until(
        lambda: workload_conditions(west, sweep, "research").get("Admitted") == "True",
        timeout=90,
        what="sweep admitted by Kueue on west",
    )
    dispatched = time.monotonic() - started
    assert quotas(west)["research"] == 8  # raised by quotaguard from 0: west had the room
    wait_until(
        lambda: gpus_in_use(west, "research") == 8, timeout=30, what="west counting sweep's 8"
    )
    on_manager = manager.get("workloads.kueue.x-k8s.io", sweep, namespace="research")
    assert on_manager["status"]["clusterName"] == "west"
    wait_until(
        lambda: workload_conditions(manager, sweep, "research").get("Admitted") == "True",
        timeout=30,
        what="sweep admitted on the manager through west",
    )
    # MultiKueue removes the copy it created on east; west's Kueue starts the Job there
    wait_until(lambda: not has_workload(east, sweep), timeout=30, what="no copy left on east")
    wait_until(
        lambda: west.get("job", "sweep", namespace="research")["spec"]["suspend"] is False,
        timeout=30,
        what="sweep's Job unsuspended on west",
    )
    print(f"[e2e] fleet: sweep admitted on west {dispatched:.1f}s after its Job", flush=True)

    # 24 more H100s: research's demand (48) is over its fleet quota of 24 (32 less product's
    # guarantee), which sweep and the pretraining fill
    manager.create(batch_job("sweep-big", "research", pods=3))
    big = wait_until(
        lambda: workload_of_job(manager, "sweep-big"), timeout=30, what="sweep-big's Workload"
    )
    deadline = time.monotonic() + 10  # five of quotaguard's cycles
    while time.monotonic() < deadline:
        assert workload_conditions(manager, big, "research").get("QuotaReserved") != "True"
        assert not has_workload(east, big) and not has_workload(west, big)
        time.sleep(1)
    assert quotas(manager) == {"research": 24, "product": 8}
    assert quotas(west) == {"research": 8, "product": 8}
    assert gpus_in_use(west, "research") == 8
