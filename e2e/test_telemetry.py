"""GPU telemetry end to end: a stand-in dcgm-exporter (e2e/dcgm_exporter.py: the real one needs
GPUs) serving the exporter's exposition for the kwok GPU nodes, scraped every second by a real
Prometheus (built from its Go module), and `quotaguard serve --prometheus-url` planning the
real ClusterQueues through the real API server in apply mode.

  - an XID 79 on one GPU takes one unit out of its class and the ClusterQueue follows; the GPU
    comes back only after the quiet period;
  - notebook pods holding MIG slices at 1% show idle in the reports (JSON and /metrics), and
    under `idleDemand: discount` their tenant's quota falls to its guarantee;
  - Prometheus stopped: the controller plans as without telemetry and says why; it comes back
    when Prometheus does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e import conftest
from e2e.build import Toolchain
from e2e.cluster import Cluster, http_ok
from e2e.dcgm_exporter import DcgmExporter, mig_gpus, whole_gpus
from e2e.kueue import (
    CAPACITY,
    DISTRIBUTABLE,
    TENANT_QUEUES,
    ControllerProcess,
    add_gpu_nodes,
    apply_kueue_samples,
    cluster_queues,
    converged,
    gpu_quotas,
    report_rows,
    reset_cluster_queues,
    serve_controller,
    wait_for_report,
    workload,
    write_policy,
)
from e2e.prometheus import Prometheus, restart_prometheus, start_prometheus
from e2e.test_controller import scrape, series

XID = "DCGM_FI_DEV_XID_ERRORS"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
MIG = "nvidia.com/mig-1g.10gb"
QUIET = 6.0  # gpuHealth.quietPeriod, seconds
IDLE_FOR = 4.0  # idleFor, seconds


@dataclass
class Harness:
    cluster: Cluster
    exporter: DcgmExporter
    prometheus: Prometheus


def exporter_devices() -> DcgmExporter:
    """The GPUs behind e2e.kueue.add_gpu_nodes: 8 per whole-GPU node, two per MIG node (seven
    1g.10gb instances on one, two 3g.40gb on the other), four behind the time-sliced node.
    h100-0 (the XID test's) has a newer exporter, which says `hostname`; the rest `Hostname`."""
    devices = whole_gpus("h100-0", 8, hostname_label="hostname")
    devices += [d for i in (1, 2) for d in whole_gpus(f"h100-{i}", 8)]
    devices += whole_gpus("a100-0", 8)
    devices += [d for i in range(4) for d in mig_gpus(f"mig-{i}", [{"1g.10gb": 7}, {"3g.40gb": 2}])]
    devices += whole_gpus("shared-0", 4)
    return DcgmExporter(devices)


@pytest.fixture(scope="module")
def harness(toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    cluster = conftest._start(toolchain, controllers=False)
    exporter = exporter_devices()
    try:
        add_gpu_nodes(cluster)
        apply_kueue_samples(cluster)
        # The target carries namespace/pod of its own, as a ServiceMonitor's would (the
        # exporter's pod): Prometheus renames the exporter's labels exported_*.
        prometheus = start_prometheus(
            cluster,
            tmp_path_factory.mktemp("prometheus"),
            [
                {
                    "job_name": "gpu-metrics",
                    "static_configs": [
                        {
                            "targets": [exporter.target],
                            "labels": {
                                "namespace": "gpu-operator",
                                "pod": "nvidia-dcgm-exporter-x7k2p",
                            },
                        }
                    ],
                }
            ],
        )
        yield Harness(cluster, exporter, prometheus)
    finally:
        exporter.close()
        conftest._finish(cluster)


@pytest.fixture
def fresh(harness: Harness) -> Harness:
    """Every GPU healthy and unheld, the sample ClusterQueues, no Workloads or tenant pods."""
    harness.exporter.reset()
    cluster = harness.cluster
    if not harness.prometheus.ready():
        restart_prometheus(cluster, harness.prometheus)
    cluster.kubectl("delete", "workloads.kueue.x-k8s.io", "--all", "-A", "--wait")
    for namespace in TENANT_QUEUES:
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force")
    reset_cluster_queues(cluster)
    return harness


def controller(harness: Harness, tmp: Path, name: str, **rebalance: Any) -> ControllerProcess:
    policy = write_policy(
        tmp,
        mode="apply",
        idleFor=f"{IDLE_FOR:g}s",
        gpuHealth={"quietPeriod": f"{QUIET:g}s"},
        **rebalance,
    )
    return serve_controller(
        harness.cluster,
        policy,
        pod_name=name,
        lease_namespace=f"lease-{name}",
        args=["--prometheus-url", harness.prometheus.url, "--prometheus-timeout", "2"],
    )


def h100(report: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in report["classes"] if c["name"] == "h100")
    return found


def held_nominal(cluster: Cluster, queue: str, row: dict[str, Any]) -> int | None:
    """The nominalQuota the ClusterQueue holds for the report row's flavor and resource."""
    quotas = gpu_quotas(cluster_queues(cluster)[queue])
    value = quotas[(row["flavor"], row["resource"])]["nominalQuota"]
    return None if value is None else int(value)


def settled(check: Callable[[dict[str, Any]], bool]) -> Callable[[dict[str, Any]], bool]:
    """`check` on a report with telemetry whose queues hold what it wants."""
    return lambda r: bool(r["telemetry"]["available"]) and converged(r) and check(r)


def notebook_pod(name: str, instance: int) -> dict[str, Any]:
    """A notebook bound to mig-0 (no scheduler here: nodeName set), one 1g.10gb slice."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "notebooks", "labels": {"app": "notebook"}},
        "spec": {
            "nodeName": "mig-0",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/jupyter:1",
                    "resources": {"limits": {MIG: "1"}, "requests": {MIG: "1"}},
                }
            ],
        },
    }


# --------------------------------------------------------------------------------------------


def test_an_xid_79_takes_its_gpu_out_and_the_quota_follows_until_the_quiet_period_ends(
    fresh: Harness, tmp_path: Path
) -> None:
    cluster, exporter = fresh.cluster, fresh.exporter
    server = controller(fresh, tmp_path, "telemetry-xid")
    try:
        report = wait_for_report(
            server.report,
            settled(lambda r: h100(r)["capacity"] == CAPACITY["h100"]),
            timeout=60,
            what="a plan with telemetry",
        )
        row = report_rows(report)[("training", "h100")]
        assert row["target"] == DISTRIBUTABLE["h100"] == 22
        assert held_nominal(cluster, "training", row) == 22
        assert h100(report)["faultyGpus"] == []

        exporter.set("h100-0", 3, **{XID: 79})

        def one_gpu_out(r: dict[str, Any]) -> bool:
            return h100(r)["capacity"] == 23 and report_rows(r)[("training", "h100")]["target"] == (
                21
            )

        report = wait_for_report(
            server.report, settled(one_gpu_out), timeout=30, what="h100 at 23, training at 21"
        )
        assert h100(report)["faultyGpus"] == [{"node": "h100-0", "gpu": "3", "reason": "XID 79"}]
        assert h100(report)["distributable"] == 21
        assert held_nominal(cluster, "training", row) == 21
        samples = scrape(server.url)
        assert series(samples, "quotaguard_class_faulty_gpus")["h100"] == 1
        assert [
            (labels["class"], labels["node"], labels["gpu"], labels["reason"], value)
            for name, labels, value in samples
            if name == "quotaguard_class_faulty_gpu"
        ] == [("h100", "h100-0", "3", "XID 79", 1.0)]

        # The GPU is reset: the exporter reports no XID, the quiet period runs.
        exporter.set("h100-0", 3, **{XID: 0})
        cleared = time.monotonic()
        waiting = wait_for_report(
            server.report,
            lambda r: "quiet period left" in str(h100(r)["faultyGpus"]),
            timeout=10,
            what="the quiet period in the reason",
        )
        assert h100(waiting)["capacity"] == 23
        report = wait_for_report(
            server.report,
            settled(lambda r: h100(r)["capacity"] == 24 and not h100(r)["faultyGpus"]),
            timeout=30,
            what="h100 back at 24",
        )
        # The last 79 was scraped at most a second before it was cleared.
        assert time.monotonic() - cleared >= QUIET - 1.5
        assert report_rows(report)[("training", "h100")]["target"] == 22
        assert held_nominal(cluster, "training", row) == 22
    finally:
        server.process.stop()


def test_idle_notebooks_show_in_the_reports_and_discount_shrinks_their_quota(
    fresh: Harness, tmp_path: Path
) -> None:
    cluster, exporter = fresh.cluster, fresh.exporter
    names = [f"nb-{i}" for i in range(4)]
    for instance, name in enumerate(names, start=1):
        cluster.create(notebook_pod(name, instance))
        exporter.hold("mig-0", 0, "notebooks", name, instance=instance)
        exporter.set("mig-0", 0, instance=instance, **{GR_ENGINE_ACTIVE: 0.62})
    # Inference wants every 1g.10gb slice (pending): the notebooks' slices are contested.
    cluster.create(workload("chat", "inference", "inference", {MIG: 1}, count=26))
    server = controller(fresh, tmp_path, "telemetry-idle", idleDemand="discount")
    try:

        def busy(r: dict[str, Any]) -> bool:
            row = report_rows(r)[("notebooks", "h100-1g.10gb")]
            return row["allocated"] == 4 and row["used"] is not None and row["used"] > 2

        report = wait_for_report(
            server.report, settled(busy), timeout=60, what="notebooks busy on 4 slices"
        )
        row = report_rows(report)[("notebooks", "h100-1g.10gb")]
        assert (row["idle"], row["idlePods"]) == (0, [])
        busy_target = row["target"]
        # Its busy slices count as demand: it keeps a share by weight against inference's 26.
        assert busy_target > 0

        for instance in range(1, 5):
            exporter.set("mig-0", 0, instance=instance, **{GR_ENGINE_ACTIVE: 0.01})

        def idle_and_shrunk(r: dict[str, Any]) -> bool:
            row = report_rows(r)[("notebooks", "h100-1g.10gb")]
            return row["idle"] == 4 and row["target"] == 0

        report = wait_for_report(
            server.report,
            settled(idle_and_shrunk),
            timeout=60,
            what="notebooks idle and their quota at the guarantee (0)",
        )
        row = report_rows(report)[("notebooks", "h100-1g.10gb")]
        assert row["idlePods"] == [f"notebooks/{n}" for n in names]
        assert row["allocated"] == 4 and row["used"] == pytest.approx(0.04, abs=0.02)
        assert held_nominal(cluster, "notebooks", row) == 0
        inference = report_rows(report)[("inference", "h100-1g.10gb")]
        assert inference["target"] == DISTRIBUTABLE["h100-1g.10gb"]
        assert held_nominal(cluster, "inference", inference) == inference["target"]
        assert report["telemetry"]["idlePods"] == 4
        metrics = scrape(server.url)
        assert series(metrics, "quotaguard_quota_idle")["notebooks/h100-1g.10gb"] == 4
        assert series(metrics, "quotaguard_quota_allocated")["notebooks/h100-1g.10gb"] == 4
    finally:
        server.process.stop()


def test_prometheus_stopped_plans_as_without_telemetry_and_says_so(
    fresh: Harness, tmp_path: Path
) -> None:
    fresh.exporter.set("h100-0", 3, **{XID: 79})
    server = controller(fresh, tmp_path, "telemetry-down")
    try:
        wait_for_report(
            server.report,
            settled(lambda r: h100(r)["capacity"] == 23),
            timeout=60,
            what="h100 at 23 with telemetry",
        )
        assert fresh.prometheus.process is not None
        fresh.prometheus.process.stop()

        def without_telemetry(r: dict[str, Any]) -> bool:
            return not r["telemetry"]["available"] and converged(r)

        report = wait_for_report(
            server.report, without_telemetry, timeout=30, what="a plan without telemetry"
        )
        assert "unreachable" in report["telemetry"]["note"]
        assert h100(report)["capacity"] == CAPACITY["h100"] and h100(report)["faultyGpus"] == []
        assert report_rows(report)[("training", "h100")]["target"] == DISTRIBUTABLE["h100"]
        intervals = report["controller"]["intervals"]
        later = wait_for_report(
            server.report,
            lambda r: r["controller"]["intervals"] >= intervals + 3,
            timeout=20,
            what="three more intervals",
        )
        assert not later["telemetry"]["available"]
        server.process.check_alive()
        assert http_ok(f"{server.url}/healthz")

        restart_prometheus(fresh.cluster, fresh.prometheus)
        wait_for_report(
            server.report,
            settled(lambda r: h100(r)["capacity"] == 23),
            timeout=60,
            what="telemetry back: h100 at 23 again",
        )
    finally:
        server.process.stop()
