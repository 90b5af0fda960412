"""The controller's layout side against the fake API server: node patches only as the leader in
geometry mode apply, and the GPU operator's ConfigMap read (and its problems said once)."""

from __future__ import annotations

import itertools
import logging

import pytest
import yaml

from quotaguard.controller.backoff import Backoff
from quotaguard.controller.leader import LeaderElector
from quotaguard.controller.quota_controller import Controller, ControllerSettings
from quotaguard.controller.watch import WatchSettings
from quotaguard.geometry.progress import PROGRESS_ANNOTATION
from quotaguard.metrics.registry import REGISTRY
from quotaguard.policy.loader import load_policy_text
from quotaguard.policy.migconfig import builtin_configs, node_resources

from .fakes import FakeApiServer, FakeLeaseStore, fake_clients
from .test_loop import CQ, cluster_queue, run, synced_interval

ONE_G = "nvidia.com/mig-1g.10gb"
PRODUCT = "NVIDIA-A100-SXM4-80GB"
POLICY = """
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {name: layouts}
spec:
  cohort: pool
  gpuClasses:
    - {name: mig-1g, resource: nvidia.com/mig-1g.10gb, memory: 10Gi, slices: 1}
    - {name: mig-2g, resource: nvidia.com/mig-2g.20gb, memory: 20Gi, slices: 2}
    - {name: mig-3g, resource: nvidia.com/mig-3g.40gb, memory: 40Gi, slices: 3}
  tenants:
    - {name: small, namespaces: [small], quota: {mig-1g: {max: 200}}}
  rebalance: {mode: apply, interval: 1s, maxStepPercent: 100, usableCapacityPercent: 100}
  geometry:
    mode: GEOMETRY_MODE
    pools:
      - name: a100
        nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
        configs: [all-balanced, CONFIGS]
"""
OPERATOR_CONFIGMAP = "v1/configmaps"
SERVING_SMALL = {
    "version": "v1",
    "mig-configs": {
        "all-balanced": [
            {
                "devices": "all",
                "mig-enabled": True,
                "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
            }
        ],
        "serving-small": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    },
}


def a100(name: str) -> dict:
    offers = node_resources(builtin_configs("A100-80GB")["all-balanced"], "A100-80GB", 8)
    return {
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": PRODUCT,
                "nvidia.com/gpu.count": "8",
                "nvidia.com/mig.config": "all-balanced",
                "nvidia.com/mig.config.state": "success",
            },
        },
        "status": {
            "allocatable": {resource: str(amount) for resource, amount in offers.items()},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def small_pod(index: int) -> dict:
    return {
        "metadata": {"name": f"small-{index}", "namespace": "small"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {ONE_G: "1"}}}]},
        "status": {"phase": "Pending"},
    }


@pytest.fixture
def server() -> FakeApiServer:
    """Two balanced A100 nodes (32 x 1g) and 60 pods waiting for 1g slices."""
    server = FakeApiServer()
    server.groups = {"kueue.x-k8s.io": ["v1beta2"]}
    for name in ("gpu-a", "gpu-b"):
        server.put("v1/nodes", a100(name))
    for index in range(60):
        server.put("v1/pods", small_pod(index))
    return server


def controller_for(
    server: FakeApiServer,
    mode: str = "apply",
    configs: str = "all-1g.10gb",
    rebalance: str = "apply",
) -> Controller:
    text = (
        POLICY.replace("GEOMETRY_MODE", mode)
        .replace("CONFIGS", configs)
        .replace("mode: apply, interval", f"mode: {rebalance}, interval")
    )
    settings = ControllerSettings(
        leader_election=False,
        watch_settings=lambda: WatchSettings(backoff=Backoff(base=0.001, cap=0.005)),
    )
    ticks = itertools.count(1_000_000, 1)
    policy = load_policy_text(text, "layouts.yaml")
    return Controller(policy, fake_clients(server), settings, clock=lambda: next(ticks))


def node_rows(controller: Controller) -> dict[str, dict]:
    report = controller.latest_report()
    assert report is not None
    return {row["name"]: row for row in report["nodes"]}


def one_interval(controller: Controller) -> None:
    async def body(c: Controller) -> None:
        assert await synced_interval(c) == "planned"

    run(controller, body)


def layout_nodes(action: str) -> float | None:
    return REGISTRY.get_sample_value("quotaguard_layout_nodes", {"pool": "a100", "action": action})


def changes(outcome: str) -> float:
    sample = REGISTRY.get_sample_value("quotaguard_layout_changes_total", {"outcome": outcome})
    return sample or 0.0


def test_in_apply_mode_the_leader_cordons_one_node_and_takes_it_out_of_capacity(server):
    controller = controller_for(server)
    started_before = changes("started")
    one_interval(controller)
    assert (layout_nodes("start"), layout_nodes("keep")) == (1, 1)
    assert changes("started") == started_before + 1
    started = [name for name, row in node_rows(controller).items() if row["action"] == "start"]
    assert len(started) == 1 and node_rows(controller)[started[0]]["target"] == "all-1g.10gb"
    [(_, _, call)] = server.writes("patch")
    assert call["body"]["spec"] == {"unschedulable": True}
    node = server.get("v1/nodes", started[0])
    assert node is not None and node["spec"]["unschedulable"] is True
    assert PROGRESS_ANNOTATION in node["metadata"]["annotations"]
    assert [e["reason"] for e in server.events] == ["LayoutChangeStarted"]
    # The quota plan of the same interval counts the started node as zero: 16 x 1g left.
    report = controller.latest_report()
    assert report is not None
    assert {row["name"]: row["capacity"] for row in report["classes"]}["mig-1g"] == 16


def test_in_recommend_mode_the_change_is_reported_and_no_node_is_touched(server):
    controller = controller_for(server, mode="recommend")
    started_before = changes("started")
    one_interval(controller)
    assert [row["action"] for row in node_rows(controller).values()].count("start") == 1
    assert (layout_nodes("start"), layout_nodes("keep")) == (1, 1)  # the metrics show the plan
    assert server.writes("patch") == [] and server.events == []
    assert changes("started") == started_before
    report = controller.latest_report()
    assert report is not None
    assert {row["name"]: row["capacity"] for row in report["classes"]}["mig-1g"] == 32


@pytest.mark.parametrize("rebalance", ["apply", "recommend"])
def test_the_modes_are_independent_layouts_move_whether_quotas_are_written_or_not(
    server, rebalance
):
    server.put(CQ, cluster_queue("small", ONE_G, "mig-1g", 7))
    controller = controller_for(server, rebalance=rebalance)
    one_interval(controller)
    assert len(server.writes("patch")) == 1  # the cordon, in both
    assert len(server.writes("apply")) == (1 if rebalance == "apply" else 0)


def test_a_replica_that_does_not_lead_touches_no_node(server):
    controller = controller_for(server)
    store = FakeLeaseStore()
    LeaderElector(store, "other").try_acquire_or_renew()
    controller.leader = LeaderElector(store, "me")
    controller.leader.try_acquire_or_renew()
    one_interval(controller)
    assert [row["action"] for row in node_rows(controller).values()].count("start") == 1
    assert server.writes("patch") == [] and server.events == []


def config_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "quotaguard.controller" and "default-mig-parted-config" in r.getMessage()
    ]


def intervals(controller: Controller, count: int) -> None:
    async def body(c: Controller) -> None:
        assert await synced_interval(c) == "planned"
        for _ in range(count - 1):
            assert await c.run_interval() == "planned"

    run(controller, body)


def test_a_config_only_the_operator_defines_is_read_from_its_configmap(server, caplog):
    server.put(
        OPERATOR_CONFIGMAP,
        {
            "metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
            "data": {"config.yaml": yaml.safe_dump(SERVING_SMALL)},
        },
    )
    controller = controller_for(server, mode="recommend", configs="serving-small")
    with caplog.at_level(logging.WARNING, logger="quotaguard.controller"):
        one_interval(controller)
    targets = {row["target"] for row in node_rows(controller).values()}
    assert "serving-small" in targets
    assert config_warnings(caplog) == []


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (None, "cannot read ConfigMap gpu-operator/default-mig-parted-config (404)"),
        ({"other.yaml": "x"}, "ConfigMap gpu-operator/default-mig-parted-config has no key "),
        (
            {"config.yaml": "version: v1\n"},
            "ConfigMap gpu-operator/default-mig-parted-config: config.yaml has no mig-configs",
        ),
    ],
)
def test_a_missing_or_broken_configmap_is_said_once_and_plans_without_it(
    server, caplog, data, said
):
    if data is not None:
        metadata = {"name": "default-mig-parted-config", "namespace": "gpu-operator"}
        server.put(OPERATOR_CONFIGMAP, {"metadata": metadata, "data": data})
    controller = controller_for(server, mode="recommend", configs="serving-small")
    with caplog.at_level(logging.WARNING, logger="quotaguard.controller"):
        intervals(controller, 3)
    [warning] = config_warnings(caplog)  # once, not every interval
    assert warning.startswith(said), warning
    assert warning.endswith("; the configs it lacks are planned as built in, if they are")
    # serving-small is unknown without the ConfigMap: the pool has all-balanced only
    assert {row["target"] for row in node_rows(controller).values()} == {"all-balanced"}
