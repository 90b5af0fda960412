"""The controller loop against fake client objects: what it writes, and when it writes nothing."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from quotaguard.controller.backoff import Backoff
from quotaguard.controller.leader import LeaderElector
from quotaguard.controller.quota_controller import Controller, ControllerSettings
from quotaguard.controller.watch import WatchSettings
from quotaguard.metrics.controller_metrics import CONTROLLER_STALE
from quotaguard.metrics.registry import REGISTRY
from quotaguard.policy.loader import load_policy_text

from .fakes import FakeApiServer, FakeLeaseStore, api_error, fake_clients

CQ = "kueue.x-k8s.io/v1beta2/clusterqueues"
POLICY_TEXT = """
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {name: loop}
spec:
  backend: kueue
  cohort: pool
  gpuClasses:
    - {name: h100, resource: nvidia.com/gpu, memory: 80Gi, nodeSelector: {product: h100}}
    - {name: mig, resource: nvidia.com/mig-1g.10gb, memory: 10Gi, slices: 1}
    - {name: shared, resource: nvidia.com/gpu.shared, memory: 80Gi, sharing: time-slicing,
       replicas: 4}
  tenants:
    - {name: training, namespaces: [training], weight: 2, allowedClasses: [h100],
       quota: {h100: {guaranteed: 4, max: 16}}}
    - {name: inference, namespaces: [inference], allowedClasses: [mig],
       quota: {mig: {guaranteed: 7, max: 14}}}
    - {name: notebooks, namespaces: [notebooks], allowedClasses: [shared],
       quota: {shared: {guaranteed: 4, max: 16}}}
  rebalance: {mode: MODE, interval: 1s, maxStepPercent: 100, usableCapacityPercent: 100}
"""
CPU_GROUP = {
    "coveredResources": ["cpu"],
    "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "32"}]}],
}


def policy(mode: str = "apply"):
    return load_policy_text(POLICY_TEXT.replace("MODE", mode), "loop.yaml")


def node(name: str, resource: str, amount: int, labels: dict | None = None) -> dict:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "status": {
            "allocatable": {resource: str(amount)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def cluster_queue(name: str, resource: str, flavor: str, nominal: int) -> dict:
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
                        {
                            "name": flavor,
                            "resources": [{"name": resource, "nominalQuota": str(nominal)}],
                        }
                    ],
                },
            ],
        },
    }


def pending_pod(name: str, namespace: str, gpus: int) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"product": "h100"},
            "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
        "status": {"phase": "Pending"},
    }


@pytest.fixture
def server() -> FakeApiServer:
    server = FakeApiServer()
    server.groups = {"kueue.x-k8s.io": ["v1beta2", "v1beta1"]}
    for index in (1, 2):
        server.put("v1/nodes", node(f"gpu-{index}", "nvidia.com/gpu", 8, {"product": "h100"}))
    server.put("v1/nodes", node("mig-1", "nvidia.com/mig-1g.10gb", 14))
    server.put("v1/nodes", node("shared-1", "nvidia.com/gpu.shared", 8))
    server.put(CQ, cluster_queue("training", "nvidia.com/gpu", "h100", 8))
    server.put(CQ, cluster_queue("inference", "nvidia.com/mig-1g.10gb", "mig", 7))
    server.put(CQ, cluster_queue("notebooks", "nvidia.com/gpu.shared", "shared", 4))
    server.put("v1/pods", pending_pod("train-0", "training", 10))
    return server


def make_controller(server: FakeApiServer, mode: str = "apply", **kw: Any) -> Controller:
    ticks = itertools.count(1_000_000, 1)
    settings = ControllerSettings(
        leader_election=False,
        watch_settings=lambda: WatchSettings(backoff=Backoff(base=0.001, cap=0.005)),
        **kw,
    )
    the_policy = policy(mode)
    return Controller(the_policy, fake_clients(server), settings, clock=lambda: next(ticks))


def run(controller: Controller, body: Callable[[Controller], Any]) -> Any:
    async def main() -> Any:
        try:
            return await body(controller)
        finally:
            await asyncio.to_thread(controller.close)

    return asyncio.run(main())


async def synced_interval(controller: Controller) -> str:
    """Run intervals until the watches have listed (the first ones are stale by design)."""
    for _ in range(200):
        outcome = await controller.run_interval()
        if outcome != "stale":
            return outcome
        await asyncio.sleep(0.01)
    raise AssertionError(f"never synced: {controller.status.stale_reason}")


async def settle(server: FakeApiServer, controller: Controller) -> None:
    """Wait until every watch has seen the server's latest resourceVersion of its resource."""
    for _ in range(500):
        if all(
            not server.log.get(path) or int(watch.resource_version or 0) >= server.log[path][-1][0]
            for path, watch in (
                ("v1/nodes", controller.watches["nodes"]),
                ("v1/pods", controller.watches["pods"]),
                (CQ, controller.watches["clusterqueues"]),
            )
        ):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("watches did not catch up")


def gpu_quotas(obj: dict) -> dict[tuple[str, str], dict]:
    group = obj["spec"]["resourceGroups"][1]
    return {(f["name"], r["name"]): r for f in group["flavors"] for r in f["resources"]}


def test_nothing_is_written_until_every_watch_has_listed(server):
    controller = make_controller(server)
    server.fail["list v1/nodes"] = [api_error(500)] * 10_000

    async def body(c: Controller) -> None:
        for _ in range(3):
            assert await c.run_interval() == "stale"
            await asyncio.sleep(0.01)
        assert c.status.stale_reason == "watch not synced: nodes"
        assert CONTROLLER_STALE._value.get() == 1
        assert server.writes("apply") == [] and server.writes("create") == []
        server.fail.clear()
        assert await synced_interval(c) == "planned"
        assert CONTROLLER_STALE._value.get() == 0

    run(controller, body)
    assert len(server.writes("apply")) == 3


def test_unreachable_api_server_or_unsynced_watch_changes_nothing(server):
    controller = make_controller(server)

    async def body(c: Controller) -> None:
        await synced_interval(c)
        replaced = len(server.writes("apply"))
        server.put("v1/pods", pending_pod("train-1", "training", 4))
        server.down = True
        assert await c.run_interval() == "stale"
        assert "unreachable" in (c.status.stale_reason or "")
        server.down = False
        # a nodes watch that fails and cannot re-list
        server.fail["list v1/nodes"] = [api_error(500)] * 10_000
        server.fail["watch v1/nodes"] = [ConnectionResetError("reset")]
        for _ in range(200):
            if not c.watches["nodes"].synced:
                break
            await asyncio.sleep(0.01)
        assert await c.run_interval() == "stale"
        assert "nodes" in (c.status.stale_reason or "")
        assert len(server.writes("apply")) == replaced
        assert c.status.stale == 2

    run(controller, body)


def test_recommend_writes_nothing_and_reports_targets(server):
    controller = make_controller(server, mode="recommend")

    async def body(c: Controller) -> None:
        assert await synced_interval(c) == "planned"
        await c.run_interval()

    run(controller, body)
    assert [call for call in server.calls if call[0] in ("apply", "create", "get")] == []
    report = controller.latest_report()
    assert report is not None and report["mode"] == "recommend"
    training = next(t for t in report["tenants"] if t["name"] == "training")
    row = training["classes"][0]
    assert row["class"] == "h100" and row["nominal"] == 16 and row["current"]["nominal"] == 8
    nominal = REGISTRY.get_sample_value(
        "quotaguard_quota_nominal",
        {
            "tenant": "training",
            "class": "h100",
            "cluster_queue": "training",
            "flavor": "h100",
            "resource": "nvidia.com/gpu",
            "cohort": "pool",
        },
    )
    assert nominal == 16


def test_apply_writes_changed_queues_only_and_leaves_other_groups_alone(server):
    controller = make_controller(server)

    async def body(c: Controller) -> None:
        assert await synced_interval(c) == "planned"
        first = [call[2]["body"]["metadata"]["name"] for call in server.writes("apply")]
        assert sorted(first) == ["inference", "notebooks", "training"]
        training = server.get(CQ, "training")
        assert training["spec"]["resourceGroups"][0] == CPU_GROUP
        assert training["spec"]["cohortName"] == "pool"
        quotas = gpu_quotas(training)
        assert quotas[("h100", "nvidia.com/gpu")] == {
            "name": "nvidia.com/gpu",
            "nominalQuota": "16",
            "borrowingLimit": "0",
            "lendingLimit": "12",
        }
        # the classes training has no quota for are there, as 0
        assert quotas[("mig", "nvidia.com/mig-1g.10gb")]["nominalQuota"] == "0"
        assert quotas[("shared", "nvidia.com/gpu.shared")]["nominalQuota"] == "0"
        assert quotas[("h100", "nvidia.com/gpu.shared")]["nominalQuota"] == "0"
        events = {e["involvedObject"]["name"]: e for e in server.events}
        assert sorted(events) == ["inference", "notebooks", "training"]
        assert events["training"]["reason"] == "QuotaUpdated"
        assert events["training"]["involvedObject"]["kind"] == "ClusterQueue"
        assert "nominalQuota 8 -> 16" in events["training"]["message"]

        # nothing changed: no writes (and no reads) across repeated intervals
        await settle(server, c)
        calls = len(server.calls)
        for _ in range(3):
            await c.run_interval()
        assert [x for x in server.calls[calls:] if x[0] in ("get", "apply", "create")] == []

        # more shared capacity: only the notebooks queue moves
        server.put("v1/nodes", node("shared-2", "nvidia.com/gpu.shared", 8))
        await settle(server, c)
        await c.run_interval()
        second = [x[2]["body"]["metadata"]["name"] for x in server.writes("apply")][3:]
        assert second == ["notebooks"]
        assert (
            gpu_quotas(server.get(CQ, "notebooks"))[("shared", "nvidia.com/gpu.shared")][
                "nominalQuota"
            ]
            == "16"
        )
        report = c.latest_report()
        notebooks = next(t for t in report["tenants"] if t["name"] == "notebooks")
        change = notebooks["classes"][0]["lastChange"]
        assert change["from"] == 8 and change["to"] == 16 and change["applied"] is True

    run(controller, body)
    assert controller.status.writes.get("updated") == 4


def test_a_conflict_is_retried_with_a_fresh_read_and_keeps_the_rival_change(server):
    controller = make_controller(server)

    def rival_write(name: str) -> bool:
        if name != "training":
            return False
        rival = server.get(CQ, "training")
        rival["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "48"
        server.put(CQ, rival)
        return True

    server.before_apply = rival_write

    async def body(c: Controller) -> None:
        await synced_interval(c)

    run(controller, body)
    training = server.get(CQ, "training")
    assert (
        training["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "48"
    )
    assert gpu_quotas(training)[("h100", "nvidia.com/gpu")]["nominalQuota"] == "16"
    # built from the watch cache: the one read is training's, after its conflict
    assert [x[0] for x in server.calls if x[0] in ("get", "apply")].count("get") == 1
    results = {o.queue: o for o in controller.status.last_outcomes}
    assert results["training"].result == "updated" and results["training"].attempts == 2


def test_endless_conflicts_give_up_after_bounded_attempts(server):
    controller = make_controller(server)
    server.conflicts_before_apply = 1000

    async def body(c: Controller) -> None:
        await synced_interval(c)

    run(controller, body)
    assert {o.result for o in controller.status.last_outcomes} == {"conflict"}
    assert len(server.writes("apply")) == 3 * 5


def test_a_replica_that_does_not_lead_writes_nothing(server):
    controller = make_controller(server)
    store = FakeLeaseStore()
    other = LeaderElector(store, "other")
    other.try_acquire_or_renew()
    controller.leader = LeaderElector(store, "me")
    controller.leader.try_acquire_or_renew()

    async def body(c: Controller) -> None:
        assert await synced_interval(c) == "planned"

    run(controller, body)
    assert server.writes("apply") == []
    assert controller.latest_report()["controller"]["leader"] is False


def test_off_does_nothing_at_all(server):
    controller = make_controller(server, mode="off")

    async def body(c: Controller) -> None:
        assert await c.run_interval() == "off"

    run(controller, body)
    assert server.calls == []


def test_switching_off_stops_the_watches(server):
    controller = make_controller(server, mode="recommend")

    async def body(c: Controller) -> None:
        await synced_interval(c)
        watches = list(c.watches.values())
        c.settings.mode = "off"
        assert await c.run_interval() == "off"
        assert c.watches == {} and all(w.stopped for w in watches)

    run(controller, body)


def watch_sample(name: str, resource: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"resource": resource})


def test_the_live_watches_are_exported_at_scrape_time_and_a_removed_one_is_not(server):
    controller = make_controller(server, mode="recommend")
    cpu_only = pending_pod("cpu-0", "training", 0)
    cpu_only["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}

    async def body(c: Controller) -> None:
        await synced_interval(c)
        server.put("v1/pods", cpu_only)  # skipped undecoded: it holds no GPU
        server.put("v1/pods", pending_pod("train-1", "training", 4))
        await settle(server, c)
        pods = c.watches["pods"]
        assert pods.stats.events >= 1 and pods.stats.skipped_lines >= 1
        assert watch_sample("quotaguard_watch_events_total", "pods") == pods.stats.events
        skipped = watch_sample("quotaguard_watch_skipped_events_total", "pods")
        assert skipped == pods.stats.skipped_lines
        assert watch_sample("quotaguard_watch_lists_total", "pods") == pods.stats.lists >= 1
        version = watch_sample("quotaguard_watch_resource_version", "pods")
        assert version == server.log["v1/pods"][-1][0] == int(pods.resource_version or 0)
        assert watch_sample("quotaguard_watch_synced", "pods") == 1
        assert watch_sample("quotaguard_watch_synced", "clusterqueues") == 1
        c.watches.pop("pods").stop(join_timeout=0)
        assert watch_sample("quotaguard_watch_events_total", "pods") is None
        assert watch_sample("quotaguard_watch_synced", "pods") is None
        assert watch_sample("quotaguard_watch_synced", "nodes") == 1

    run(controller, body)
    assert watch_sample("quotaguard_watch_synced", "nodes") is None  # closed: no watch left


def test_missing_queues_are_created_only_with_manage_queues(server):
    server.delete(CQ, "notebooks")
    controller = make_controller(server)

    async def body(c: Controller) -> None:
        await synced_interval(c)

    run(controller, body)
    assert {o.queue: o.result for o in controller.status.last_outcomes}["notebooks"] == "missing"
    assert server.writes("create") == []


def test_the_leader_writes(server):
    controller = make_controller(server)
    controller.leader = LeaderElector(FakeLeaseStore(), "me")
    assert controller.leader.try_acquire_or_renew()

    async def body(c: Controller) -> None:
        assert await synced_interval(c) == "planned"

    run(controller, body)
    assert len(server.writes("apply")) == 3
    assert controller.latest_report()["controller"]["leader"] is True


def test_kueue_missing_from_discovery_for_a_moment_keeps_its_watches(server):
    controller = make_controller(server)

    async def body(c: Controller) -> None:
        await synced_interval(c)
        watch = c.watches["clusterqueues"]
        server.groups = {}  # an API server starting up lists CRD groups late
        assert await c.run_interval() == "planned"
        assert c.watches["clusterqueues"] is watch and watch.synced
        assert c.latest_report()["tenants"][0]["classes"][0]["current"] is not None

    run(controller, body)


def test_volcano_backend_writes_queue_fields():
    server = FakeApiServer()
    server.groups = {"scheduling.volcano.sh": ["v1beta1"]}
    server.put("v1/nodes", node("gpu-1", "nvidia.com/gpu", 8, {"product": "h100"}))
    path = "scheduling.volcano.sh/v1beta1/queues"
    for name in ("training", "inference", "notebooks"):
        server.put(
            path,
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": name},
                "spec": {"weight": 1, "reclaimable": True, "capability": {"cpu": "64"}},
            },
        )
    text = POLICY_TEXT.replace("MODE", "apply").replace("backend: kueue", "backend: volcano")
    the_policy = load_policy_text(text, "volcano.yaml")
    settings = ControllerSettings(
        leader_election=False,
        watch_settings=lambda: WatchSettings(backoff=Backoff(base=0.001, cap=0.005)),
    )
    controller = Controller(the_policy, fake_clients(server), settings)

    async def body(c: Controller) -> None:
        assert set(c.watches) <= {"nodes", "pods", "queues", "podgroups"}
        assert await synced_interval(c) == "planned"
        assert {"queues", "podgroups"} <= set(c.watches)

    run(controller, body)
    training = server.get(path, "training")["spec"]
    assert training["weight"] == 2
    assert training["deserved"]["nvidia.com/gpu"] == "8"
    assert training["guarantee"]["resource"]["nvidia.com/gpu"] == "4"
    assert training["capability"] == {
        "cpu": "64",
        "nvidia.com/gpu": "16",
        "nvidia.com/mig-1g.10gb": "0",
        "nvidia.com/gpu.shared": "0",
    }
    assert training["reclaimable"] is True
    assert training["parent"] == "pool"  # the policy's cohort: Volcano's hierarchical parent


def test_volcano_manage_queues_creates_the_parent_queue_and_the_tenant_queues_under_it():
    server = FakeApiServer()
    server.groups = {"scheduling.volcano.sh": ["v1beta1"]}
    server.put("v1/nodes", node("gpu-1", "nvidia.com/gpu", 8, {"product": "h100"}))
    path = "scheduling.volcano.sh/v1beta1/queues"
    text = (
        POLICY_TEXT.replace("MODE", "apply")
        .replace("backend: kueue", "backend: volcano")
        .replace("usableCapacityPercent: 100}", "usableCapacityPercent: 100, manageQueues: true}")
    )
    settings = ControllerSettings(
        leader_election=False,
        watch_settings=lambda: WatchSettings(backoff=Backoff(base=0.001, cap=0.005)),
    )
    controller = Controller(load_policy_text(text, "volcano.yaml"), fake_clients(server), settings)

    async def body(c: Controller) -> None:
        assert await synced_interval(c) == "planned"

    run(controller, body)
    parent = server.get(path, "pool")
    assert parent["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "quotaguard"}
    assert "deserved" not in parent["spec"] and "capability" not in parent["spec"]
    for name in ("training", "inference", "notebooks"):
        assert server.get(path, name)["spec"]["parent"] == "pool"


def test_manage_queues_creates_what_is_missing(server):
    server.delete(CQ, "notebooks")
    text = POLICY_TEXT.replace("MODE", "apply").replace(
        "usableCapacityPercent: 100}", "usableCapacityPercent: 100, manageQueues: true}"
    )
    settings = ControllerSettings(
        leader_election=False,
        watch_settings=lambda: WatchSettings(backoff=Backoff(base=0.001, cap=0.005)),
    )
    controller = Controller(load_policy_text(text, "manage.yaml"), fake_clients(server), settings)

    async def body(c: Controller) -> None:
        await synced_interval(c)
        await settle(server, c)
        await c.run_interval()

    run(controller, body)
    created = server.get(CQ, "notebooks")
    assert created["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "quotaguard"}
    assert created["spec"]["namespaceSelector"] == {}
    assert created["spec"]["cohortName"] == "pool"
    assert (
        gpu_quotas({"spec": {"resourceGroups": [None, *created["spec"]["resourceGroups"]]}})[
            ("shared", "nvidia.com/gpu.shared")
        ]["nominalQuota"]
        == "8"
    )
    flavors = server.objects["kueue.x-k8s.io/v1beta2/resourceflavors"]
    assert sorted(name for _, name in flavors) == ["h100", "mig", "shared"]
    assert flavors[(None, "h100")]["spec"] == {"nodeLabels": {"product": "h100"}}
    local = server.objects["kueue.x-k8s.io/v1beta2/localqueues"]
    assert sorted(local) == [
        ("inference", "inference"),
        ("notebooks", "notebooks"),
        ("training", "training"),
    ]
    assert local[("training", "training")]["spec"] == {"clusterQueue": "training"}
    # created once: the second interval creates nothing more
    assert len(server.writes("create")) == 3 + 3 + 1


SHARED_CLASS_POLICY = """
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {name: shared-class}
spec:
  cohort: pool
  gpuClasses:
    - {name: mig, resource: nvidia.com/mig-1g.10gb, memory: 10Gi, slices: 1}
  tenants:
    - {name: alpha, namespaces: [alpha], allowedClasses: [mig], quota: {mig: {max: 14}}}
    - {name: beta, namespaces: [beta], allowedClasses: [mig], quota: {mig: {max: 14}}}
  rebalance: {mode: apply, interval: 1s, maxStepPercent: 100}
"""


def test_cuts_are_written_before_raises_so_queues_never_hold_more_than_capacity():
    # alpha (written first by name) wants all 14 slices, 6 of which beta holds now: writing
    # alpha's raise before beta's cut would have the two queues hold 20 of 14 for a moment.
    server = FakeApiServer()
    server.groups = {"kueue.x-k8s.io": ["v1beta2"]}
    server.put("v1/nodes", node("mig-1", "nvidia.com/mig-1g.10gb", 14))
    server.put(CQ, cluster_queue("alpha", "nvidia.com/mig-1g.10gb", "mig", 8))
    server.put(CQ, cluster_queue("beta", "nvidia.com/mig-1g.10gb", "mig", 6))
    pod = pending_pod("want-all", "alpha", 0)
    pod["spec"] = {
        "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "14"}}}]
    }
    server.put("v1/pods", pod)
    settings = ControllerSettings(
        leader_election=False,
        watch_settings=lambda: WatchSettings(backoff=Backoff(base=0.001, cap=0.005)),
    )
    ticks = itertools.count(1_000_000, 1)
    the_policy = load_policy_text(SHARED_CLASS_POLICY, "shared.yaml")
    controller = Controller(the_policy, fake_clients(server), settings, clock=lambda: next(ticks))

    async def body(c: Controller) -> None:
        assert await synced_interval(c) == "planned"

    run(controller, body)
    written = [call[2]["body"]["metadata"]["name"] for call in server.writes("apply")]
    assert written == ["beta", "alpha"]
    held: dict[str, int] = {}
    for _, event, obj in server.log[CQ]:
        if event != "DELETED":
            held[obj["metadata"]["name"]] = int(
                gpu_quotas(obj)[("mig", "nvidia.com/mig-1g.10gb")]["nominalQuota"]
            )
        assert sum(held.values()) <= 14, held
    assert held == {"alpha": 14, "beta": 0}


def owned_by(server: FakeApiServer, name: str, manager: str, operation: str) -> None:
    """`manager` owns the queue's resourceGroups (as after its apply or plain write)."""
    server.owners[(CQ, name)] = {"resourceGroups": (manager, operation)}
    queue = server.get(CQ, name)
    queue["metadata"]["managedFields"] = [{"manager": manager, "operation": operation}]
    server.put(CQ, queue)


def test_fields_another_manager_applied_are_reported_not_overwritten(server):
    owned_by(server, "training", "argocd-controller", "Apply")
    controller = make_controller(server)

    async def body(c: Controller) -> None:
        await synced_interval(c)
        await settle(server, c)
        await c.run_interval()  # the conflict stays; it is not reported twice

    run(controller, body)
    training = server.get(CQ, "training")
    assert gpu_quotas(training)[("h100", "nvidia.com/gpu")]["nominalQuota"] == "8"
    outcome = next(o for o in controller.status.last_outcomes if o.queue == "training")
    assert outcome.result == "conflict"
    assert "argocd-controller" in (outcome.detail or "")
    assert "rebalance.forceConflicts" in (outcome.detail or "")
    warnings = [e for e in server.events if e["reason"] == "QuotaConflict"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
    assert warnings[0]["involvedObject"]["name"] == "training"
    assert ".spec.resourceGroups (owned by argocd-controller)" in warnings[0]["message"]
    report = controller.latest_report()
    row = next(t for t in report["tenants"] if t["name"] == "training")
    assert row["conflicts"] == [{"field": ".spec.resourceGroups", "manager": "argocd-controller"}]
    others = next(t for t in report["tenants"] if t["name"] == "notebooks")
    assert others["conflicts"] == []


def test_force_conflicts_takes_applied_fields_over(server):
    owned_by(server, "training", "argocd-controller", "Apply")
    controller = make_controller(server)
    controller.policy = lambda: load_policy_text(
        POLICY_TEXT.replace("MODE", "apply").replace(
            "usableCapacityPercent: 100}", "usableCapacityPercent: 100, forceConflicts: true}"
        ),
        "loop.yaml",
    )

    async def body(c: Controller) -> None:
        await synced_interval(c)

    run(controller, body)
    training = server.get(CQ, "training")
    assert gpu_quotas(training)[("h100", "nvidia.com/gpu")]["nominalQuota"] == "16"
    assert server.owners[(CQ, "training")]["resourceGroups"] == ("quotaguard", "Apply")


def test_fields_of_a_plain_writer_are_taken_over_without_the_switch(server):
    owned_by(server, "training", "kubectl-client-side-apply", "Update")
    controller = make_controller(server)

    async def body(c: Controller) -> None:
        await synced_interval(c)

    run(controller, body)
    training = server.get(CQ, "training")
    assert gpu_quotas(training)[("h100", "nvidia.com/gpu")]["nominalQuota"] == "16"
    applies = [
        call[2]
        for call in server.writes("apply")
        if call[2]["body"]["metadata"]["name"] == "training"
    ]
    # built from the cache (no managedFields), refused; read, refused again: a plain writer's
    assert [call["force"] for call in applies] == [False, False, True]
    assert all(call["field_manager"] == "quotaguard" for call in applies)
    assert set(applies[0]["body"]["spec"]) == {"resourceGroups", "cohortName", "fairSharing"}
