"""The quota controller through a real kube-apiserver: capacity from kwok GPU nodes, ClusterQueues
moving toward the plan in bounded steps, no write storms, recommend mode writing nothing, an API
server restart, and two replicas that never both write (docs: shared spec quota.md)."""

from __future__ import annotations

import math
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.build import Toolchain
from e2e.cluster import Cluster, wait_until
from e2e.kueue import (
    CAPACITY,
    DISTRIBUTABLE,
    TENANT_QUEUES,
    EtcdHistory,
    add_gpu_nodes,
    admit,
    apply_kueue_samples,
    cluster_queues,
    converged,
    gpu_quotas,
    history_problems,
    lease_holder,
    other_groups,
    own_gpu_cluster,
    policy_document,
    quota_events,
    report_capacity,
    report_rows,
    reset_cluster_queues,
    resource_versions,
    running_controller,
    serve_controller,
    wait_for_report,
    workload,
    write_policy,
)
from tests.reports import page

MIG = "nvidia.com/mig-1g.10gb"


def scrape(url: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of GET url/metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=3) as response:
        text = response.read().decode()
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def series(samples: list[tuple[str, dict[str, str], float]], name: str) -> dict[str, float]:
    """name's samples keyed by 'tenant/class' (or '' without those labels)."""
    return {
        "/".join(labels[k] for k in ("tenant", "class") if k in labels): value
        for got, labels, value in samples
        if got == name
    }


@pytest.fixture(scope="module")
def kcluster(toolchain: Toolchain) -> Iterator[Cluster]:
    """A control plane of this module's own, with the GPU nodes and Kueue samples."""
    with own_gpu_cluster(toolchain) as cluster:
        yield cluster


@pytest.fixture
def fresh_queues(kcluster: Cluster) -> Cluster:
    """The sample ClusterQueues as they ship, and no Workloads."""
    kcluster.kubectl("delete", "workloads.kueue.x-k8s.io", "--all", "-A", "--wait")
    reset_cluster_queues(kcluster)
    return kcluster


def fetch(thread: Any) -> Callable[[], dict[str, Any] | None]:
    return lambda: thread.controller.latest_report()


def wait_converged(thread: Any, timeout: float = 40) -> dict[str, Any]:
    return dict(wait_for_report(fetch(thread), converged, timeout=timeout, what="convergence"))


def quotas_match_report(cluster: Cluster, report: dict[str, Any]) -> list[str]:
    """Differences between what the queues hold and the report's targets."""
    queues = cluster_queues(cluster)
    differences = []
    for (queue, class_name), row in report_rows(report).items():
        held = gpu_quotas(queues[queue]).get((row["flavor"], row["resource"]))
        wanted = {
            "nominalQuota": row["target"],
            "borrowingLimit": row["borrowingLimit"],
            "lendingLimit": row["lendingLimit"],
        }
        if held != wanted:
            differences.append(f"{queue}/{class_name}: holds {held}, report wants {wanted}")
    for tenant in report["tenants"]:
        weight = float(queues[tenant["queue"]]["spec"]["fairSharing"]["weight"])
        if abs(weight - tenant["weight"]) > 0.05 * tenant["weight"]:
            differences.append(f"{tenant['queue']}: weight {weight}, report {tenant['weight']}")
    return differences


# --------------------------------------------------------------------------------------------


def test_capacity_per_class_and_faulty_or_cordoned_nodes_drop_out(
    kcluster: Cluster, tmp_path: Path
) -> None:
    policy = write_policy(tmp_path, mode="recommend")
    with running_controller(
        kcluster, policy, identity="capacity", lease_namespace="lease-capacity"
    ) as thread:

        def capacity_is(expected: dict[str, int]) -> Callable[[dict[str, Any]], bool]:
            return lambda r: {k: v[0] for k, v in report_capacity(r).items()} == expected

        report = wait_for_report(
            fetch(thread), capacity_is(CAPACITY), timeout=30, what=f"capacity {CAPACITY}"
        )
        assert report_capacity(report) == {n: (CAPACITY[n], DISTRIBUTABLE[n]) for n in CAPACITY}

        kcluster.kubectl("taint", "nodes", "h100-0", "nvidia.com/gpu.unhealthy=true:NoSchedule")
        kcluster.kubectl("cordon", "mig-0")
        try:
            reduced = {**CAPACITY, "h100": 16, "h100-1g.10gb": 21, "h100-3g.40gb": 6}
            report = wait_for_report(
                fetch(thread), capacity_is(reduced), timeout=20, what=f"capacity {reduced}"
            )
            assert report_capacity(report)["h100"] == (16, math.floor(16 * 0.95))
        finally:
            kcluster.kubectl("taint", "nodes", "h100-0", "nvidia.com/gpu.unhealthy-")
            kcluster.kubectl("uncordon", "mig-0")
        wait_for_report(fetch(thread), capacity_is(CAPACITY), timeout=20, what="capacity back")


def test_apply_moves_gpu_quotas_toward_the_plan_and_back_when_demand_drains(
    fresh_queues: Cluster, tmp_path: Path
) -> None:
    cluster = fresh_queues
    document = policy_document(interval="1s", demandWindow="4s", mode="apply")
    policy = write_policy(tmp_path, interval="1s", demandWindow="4s", mode="apply")
    initial = cluster_queues(cluster)
    history = EtcdHistory(cluster).begin()
    with running_controller(
        cluster, policy, identity="converge", lease_namespace="lease-converge"
    ) as thread:
        # Without demand the idle capacity is spread by weight and lendable.
        idle = wait_converged(thread)
        assert quotas_match_report(cluster, idle) == []
        idle_rows = report_rows(idle)
        assert idle_rows[("inference", "h100-1g.10gb")]["target"] < 26

        # Inference asks for every 1g.10gb slice: 10 admitted, 18 more pending.
        cluster.create(workload("held", "inference", "inference", {MIG: 1}, count=10))
        admit(
            cluster,
            "held",
            "inference",
            "inference",
            {MIG: "h100-1g.10gb"},
            {MIG: 10},
            count=10,
        )
        cluster.create(workload("waiting", "inference", "inference", {MIG: 1}, count=18))

        def inference_takes_it_all(report: Any) -> bool:
            row = report_rows(report)[("inference", "h100-1g.10gb")]
            return converged(report) and row["target"] == DISTRIBUTABLE["h100-1g.10gb"]

        busy = wait_for_report(
            fetch(thread), inference_takes_it_all, timeout=60, what="inference at 26"
        )
        row = report_rows(busy)[("inference", "h100-1g.10gb")]
        assert (row["usage"], row["pending"]) == (10, 18)
        assert report_rows(busy)[("notebooks", "h100-1g.10gb")]["target"] == 0
        assert quotas_match_report(cluster, dict(busy)) == []

        # Demand drains: quotas go back to the idle spread, again in bounded steps.
        cluster.kubectl("delete", "workloads.kueue.x-k8s.io", "--all", "-n", "inference")

        def back_to_idle(report: Any) -> bool:
            rows = report_rows(report)
            return converged(report) and all(
                rows[key]["target"] == idle_rows[key]["target"] for key in idle_rows
            )

        drained = wait_for_report(fetch(thread), back_to_idle, timeout=60, what="idle again")
        assert quotas_match_report(cluster, dict(drained)) == []
        status = thread.controller.status
        assert status.writes.get("error", 0) == 0 and status.writes.get("conflict", 0) == 0

    versions = history.versions()
    problems = history_problems(versions, document, DISTRIBUTABLE)
    assert not problems, "\n".join(problems)
    # inference's 1g.10gb quota went up and came down again, one bounded step per write
    seen = [
        int(gpu_quotas(v.obj)[("h100-1g.10gb", MIG)]["nominalQuota"] or 0)
        for v in versions
        if v.name == "inference" and v.event == "PUT"
    ]
    assert max(seen) == DISTRIBUTABLE["h100-1g.10gb"]
    assert seen[-1] == idle_rows[("inference", "h100-1g.10gb")]["target"]
    # cpu and memory are left exactly as they were
    final = cluster_queues(cluster)
    for name in TENANT_QUEUES:
        assert other_groups(final[name]) == other_groups(initial[name])
        assert final[name]["spec"]["cohortName"] == "gpu-pool"
    events = [e for e in quota_events(cluster) if e.get("reportingInstance") == "converge"]
    assert {e["involvedObject"]["name"] for e in events} >= {"inference", "notebooks"}
    # each says what moved ("nominalQuota 19 -> 23") and, unless cut at 1 KiB, why
    assert all(" -> " in e["message"] for e in events)
    assert any("nominalQuota" in e["message"] and "Why:" in e["message"] for e in events)


def test_nothing_changing_means_no_writes(fresh_queues: Cluster, tmp_path: Path) -> None:
    cluster = fresh_queues
    policy = write_policy(tmp_path, mode="apply")
    with running_controller(
        cluster, policy, identity="quiet", lease_namespace="lease-quiet"
    ) as thread:
        wait_converged(thread)  # the queues hold the targets: the last write has landed
        before = resource_versions(cluster)
        status = thread.controller.status
        writes, intervals, planned = dict(status.writes), status.intervals, status.planned
        assert thread.wait_for(lambda c: c.status.planned >= planned + 6, timeout=20)
        assert resource_versions(cluster) == before
        assert status.writes == writes, f"writes while nothing changed: {status.writes}"
        assert status.intervals >= intervals + 6


def test_recommend_mode_writes_nothing_and_reports_targets(
    fresh_queues: Cluster, tmp_path: Path
) -> None:
    cluster = fresh_queues
    # The policy says apply; `--mode recommend` must win.
    policy = write_policy(tmp_path, mode="apply")
    before = resource_versions(cluster)
    server = serve_controller(
        cluster, policy, pod_name="recommender", lease_namespace="lease-recommend", mode="recommend"
    )
    try:

        def several_intervals(report: Any) -> bool:
            return bool(report["controller"]["intervals"] >= 6)

        report = wait_for_report(server.report, several_intervals, timeout=40, what="6 intervals")
        assert report["mode"] == "recommend"
        rows = report_rows(report)
        # the targets differ from what the queues hold: applying them would write
        moved = [key for key, row in rows.items() if row["target"] != row["current"]["nominal"]]
        assert moved, rows
        assert rows[("training", "h100")]["target"] == DISTRIBUTABLE["h100"]
        assert rows[("training", "h100")]["current"]["nominal"] == 16
        assert resource_versions(cluster) == before
        events = quota_events(cluster)
        assert not [e for e in events if str(e.get("reportingInstance")).startswith("recommender")]
        with urllib.request.urlopen(f"{server.url}/reports/quota.csv", timeout=3) as response:
            csv_text = response.read().decode()
        assert "training" in csv_text and "h100" in csv_text
        # /reports: the queue's value now beside the recommendation, in the table and the history
        with urllib.request.urlopen(f"{server.url}/reports", timeout=3) as response:
            training = page.tenant(response.read().decode(), "training")
        shown = page.class_row(training, "h100")
        assert page.cells_of(shown, "now")[0] == "16"
        assert page.cells_of(shown, "rec")[0] == str(rows[("training", "h100")]["nominal"]) != "16"
        assert "h100 queue now<" in training.svgs[1] and "h100 recommended<" in training.svgs[1]
        # /metrics: the queue's value now and the recommendation, with Kueue's labels.
        samples = scrape(server.url)
        assert series(samples, "quotaguard_quota_current_nominal")["training/h100"] == 16
        recommended = series(samples, "quotaguard_quota_nominal")["training/h100"]
        assert recommended == DISTRIBUTABLE["h100"]
        (labels,) = [
            labels
            for name, labels, _ in samples
            if name == "quotaguard_quota_nominal_gpus"
            and labels["tenant"] == "training"
            and labels["class"] == "h100"
        ]
        assert labels["cluster_queue"] == "training" and labels["resource"] == "nvidia.com/gpu"
        assert series(samples, "quotaguard_controller_mode")[""] == 1
    finally:
        server.process.stop()


def test_two_replicas_never_both_lead_and_the_survivor_takes_over(
    fresh_queues: Cluster, tmp_path: Path
) -> None:
    cluster = fresh_queues
    lease_namespace = "lease-replicas"
    policy = write_policy(tmp_path, mode="apply")
    replicas = {
        name: serve_controller(cluster, policy, pod_name=name, lease_namespace=lease_namespace)
        for name in ("replica-a", "replica-b")
    }
    samples: list[tuple[float, bool | None, bool | None]] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            a, b = replicas["replica-a"].leader(), replicas["replica-b"].leader()
            samples.append((time.monotonic(), a, b))
            sampling.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        holder = wait_until(
            lambda: lease_holder(cluster, lease_namespace), timeout=20, what="a Lease holder"
        )
        leader_name = holder.rsplit("-", 1)[0]
        survivor_name = next(n for n in replicas if n != leader_name)
        leader, survivor = replicas[leader_name], replicas[survivor_name]
        wait_for_report(leader.report, converged, timeout=40, what="the leader converging")
        assert survivor.report() is not None  # it plans too, but only in its report
        # Only the leader publishes quota series: summed over replicas, each tenant counts once.
        assert series(scrape(leader.url), "quotaguard_quota_nominal")
        standby = scrape(survivor.url)
        assert series(standby, "quotaguard_quota_nominal") == {}
        assert series(standby, "quotaguard_controller_leader") == {"": 0}
        assert series(standby, "quotaguard_controller_last_plan_timestamp_seconds")[""] > 0
        writers = {
            e["reportingInstance"].rsplit("-", 1)[0]
            for e in quota_events(cluster)
            if str(e.get("reportingInstance", "")).startswith("replica-")
        }
        assert writers == {leader_name}

        # The leader dies without handing the Lease back.
        assert leader.process.popen is not None
        leader.process.popen.kill()
        killed = time.monotonic()

        def taken_over() -> str | None:
            found = lease_holder(cluster, lease_namespace)
            return found if found and found != holder else None

        new_holder = wait_until(taken_over, timeout=30, what="the survivor taking the Lease")
        took = time.monotonic() - killed
        assert new_holder.startswith(survivor_name)
        assert took <= 15 + 5, f"takeover after {took:.1f}s, lease duration 15s"

        # The survivor writes: new demand moves the queues, with Events under its name.
        cluster.create(workload("burst", "inference", "inference", {MIG: 1}, count=28))
        report = wait_for_report(
            survivor.report,
            lambda r: (
                converged(r) and report_rows(r)[("inference", "h100-1g.10gb")]["target"] == 26
            ),
            timeout=60,
            what="the survivor converging",
        )
        assert report["controller"]["leader"] is True
        assert series(scrape(survivor.url), "quotaguard_quota_nominal")
        assert [
            e
            for e in quota_events(cluster)
            if str(e.get("reportingInstance", "")).startswith(survivor_name)
        ]
    finally:
        sampling.set()
        sampler.join(5)
        for replica in replicas.values():
            replica.process.stop()
    both = [s for s in samples if s[1] and s[2]]
    assert not both, f"both replicas reported leadership at {len(both)} samples"
    assert any(s[1] or s[2] for s in samples)


# --------------------------------------------------------------------------------------------


def test_api_server_restart_changes_nothing_while_down_then_converges(
    make_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    cluster = make_cluster(controllers=False)
    add_gpu_nodes(cluster)
    apply_kueue_samples(cluster)
    document = policy_document(interval="1s", demandWindow="4s", mode="apply")
    policy = write_policy(tmp_path, interval="1s", demandWindow="4s", mode="apply")
    history = EtcdHistory(cluster).begin()
    with running_controller(
        cluster, policy, identity="restart", lease_namespace="lease-restart"
    ) as thread:
        controller = thread.controller
        # notebooks' 1g.10gb quota climbs from 0 one slice per interval: stop mid-way
        assert thread.wait_for(lambda c: c.status.written >= 3, timeout=30)
        report = controller.latest_report()
        assert report is not None and not converged(report)

        cluster.stop_apiserver()
        written = controller.status.written
        stale_before = controller.status.stale
        assert thread.wait_for(lambda c: c.status.stale >= stale_before + 3, timeout=30)
        assert controller.status.stale_reason
        assert controller.latest_report()["controller"]["stale"]
        assert controller.status.written == written
        cluster.start_apiserver()

        final = wait_converged(thread, timeout=90)
        assert controller.status.stale_reason is None
        assert controller.status.written > written
        assert quotas_match_report(cluster, final) == []
    versions = history.versions()
    # writes before the outage, and after it
    assert len([v for v in versions if v.event == "PUT"]) > written
    problems = history_problems(versions, document, DISTRIBUTABLE)
    assert not problems, "\n".join(problems)
