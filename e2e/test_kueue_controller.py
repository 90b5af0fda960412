"""Kueue's own controller admitting Workloads under the quotas quotaguard writes: one fits the
training ClusterQueue's nominal quota and is admitted, one more stays pending beyond it, and when
new H100 nodes let quotaguard raise the quota, Kueue admits it too.

Kueue's controller is an optional part of the e2e toolchain (`python -m e2e.build` builds it
when the module proxy serves it and its dependencies); without it these tests skip and say why.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e import build
from e2e.cluster import Cluster, wait_until, whole_gpu_node
from e2e.kueue import (
    DISTRIBUTABLE,
    H100_PRODUCT,
    add_gpu_nodes,
    apply_kueue_samples,
    cluster_queues,
    converged,
    gpu_quotas,
    report_rows,
    running_controller,
    start_kueue,
    wait_for_report,
    workload,
    workload_conditions,
    write_policy,
)

GPU = "nvidia.com/gpu"


@pytest.fixture
def kueue_binary(toolchain: build.Toolchain) -> Path:
    found = build.kueue_binary()
    if found is None:
        log = build.cache_dir() / "logs" / "build-kueue.log"
        reason = log.read_text().strip().splitlines()[-1] if log.exists() else "never built"
        pytest.skip(f"Kueue controller not built (optional e2e.build step): {reason}")
    return found


def training_job(name: str, pods: int) -> dict[str, Any]:
    """A training Workload: `pods` pods of 8 whole H100 GPUs each."""
    return workload(
        name,
        "training",
        "training",
        {GPU: 8},
        count=pods,
        node_selector={"nvidia.com/gpu.product": H100_PRODUCT},
    )


def test_kueue_admits_within_quotaguard_quotas_and_holds_the_rest(
    make_cluster: Callable[..., Cluster], kueue_binary: Path, tmp_path: Path
) -> None:
    cluster = make_cluster(controllers=False)
    add_gpu_nodes(cluster)
    apply_kueue_samples(cluster)
    start_kueue(cluster, kueue_binary)
    policy = write_policy(tmp_path, mode="apply")
    with running_controller(
        cluster, policy, identity="with-kueue", lease_namespace="lease-kueue"
    ) as thread:

        def fetch() -> dict[str, Any] | None:
            report: dict[str, Any] | None = thread.controller.latest_report()
            return report

        wait_for_report(fetch, converged, timeout=40, what="quotas converged")
        training = gpu_quotas(cluster_queues(cluster)["training"])[("h100", GPU)]
        assert training["nominalQuota"] == DISTRIBUTABLE["h100"] == 22

        # Kueue accepts every ClusterQueue quotaguard wrote as active.
        def all_active() -> bool:
            for queue in cluster_queues(cluster).values():
                conditions = (queue.get("status") or {}).get("conditions") or []
                if not any(c["type"] == "Active" and c["status"] == "True" for c in conditions):
                    return False
            return True

        wait_until(all_active, timeout=30, what="Kueue marking the ClusterQueues Active")

        # 16 of the 22 fit; 16 more do not, and nobody else has H100 quota to lend.
        cluster.create(training_job("fits", 2))
        wait_until(
            lambda: workload_conditions(cluster, "fits", "training").get("Admitted") == "True",
            timeout=30,
            what="Kueue admitting the workload that fits",
        )
        cluster.create(training_job("beyond", 2))

        def pending_for_quota() -> bool:
            conditions = workload_conditions(cluster, "beyond", "training")
            return conditions.get("QuotaReserved") == "False"

        wait_until(pending_for_quota, timeout=30, what="Kueue leaving the second one pending")
        report = wait_for_report(
            fetch,
            lambda r: report_rows(r)[("training", "h100")]["pending"] == 16,
            timeout=20,
            what="the report showing 16 admitted and 16 pending",
        )
        row = report_rows(report)[("training", "h100")]
        assert (row["usage"], row["target"]) == (16, 22)
        assert workload_conditions(cluster, "beyond", "training").get("Admitted") != "True"

        # Two more H100 nodes: quotaguard raises training's quota step by step, Kueue admits.
        cluster.add_nodes(whole_gpu_node("h100-3", 8), whole_gpu_node("h100-4", 8))
        wait_until(
            lambda: workload_conditions(cluster, "beyond", "training").get("Admitted") == "True",
            timeout=60,
            what="Kueue admitting the second workload under the raised quota",
        )
        raised = gpu_quotas(cluster_queues(cluster)["training"])[("h100", GPU)]["nominalQuota"]
        assert raised is not None and raised >= 32
        status = thread.controller.status
        assert status.writes.get("error", 0) == 0, status.writes
