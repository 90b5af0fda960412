"""`rebalance.lendIdleGuarantees` on real ClusterQueues under Kueue's own controller: an idle
tenant's whole guarantee is written as lendable (lendingLimit = nominalQuota), Kueue accepts the
queue as Active, and when the tenant's work arrives the lendingLimit falls back so that the part
of the guarantee it now needs is its own again.

Kueue's controller is an optional part of the e2e toolchain; without it this test skips.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e import build
from e2e.cluster import Cluster, wait_until
from e2e.kueue import (
    add_gpu_nodes,
    apply_kueue_samples,
    cluster_queues,
    gpu_quotas,
    running_controller,
    start_kueue,
    workload,
    write_policy,
)

SLICE = "nvidia.com/mig-1g.10gb"
FLAVOR = "h100-1g.10gb"
GUARANTEED = 14  # inference's guarantee of 1g.10gb slices in the sample policy


@pytest.fixture
def kueue_binary(toolchain: build.Toolchain) -> Path:
    found = build.kueue_binary()
    if found is None:
        pytest.skip("Kueue controller not built (optional e2e.build step)")
    return found


def _inference_slices(cluster: Cluster) -> dict[str, Any]:
    queue = cluster_queues(cluster)["inference"]
    found: dict[str, Any] = gpu_quotas(queue).get((FLAVOR, SLICE), {})
    return found


def _active(cluster: Cluster) -> bool:
    conditions = (cluster_queues(cluster)["inference"].get("status") or {}).get("conditions")
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions or [])


def test_an_idle_guarantee_is_lent_and_taken_back_when_work_arrives(
    make_cluster: Callable[..., Cluster], kueue_binary: Path, tmp_path: Path
) -> None:
    cluster = make_cluster(controllers=False)
    add_gpu_nodes(cluster)
    apply_kueue_samples(cluster)
    start_kueue(cluster, kueue_binary)
    policy = write_policy(tmp_path, mode="apply", lendIdleGuarantees=True)
    with running_controller(cluster, policy, identity="lend", lease_namespace="lease-lend"):

        def all_lent() -> bool:
            quota = _inference_slices(cluster)
            return bool(quota) and quota["lendingLimit"] == quota["nominalQuota"] >= GUARANTEED

        wait_until(all_lent, timeout=40, what="inference's idle guarantee written as lendable")
        wait_until(lambda: _active(cluster), timeout=30, what="Kueue accepting the queue")

        # ten slices of inference work: those ten of the guarantee are its own again
        cluster.create(workload("serve", "inference", "inference", {SLICE: 1}, count=10))

        def ten_kept() -> bool:
            quota = _inference_slices(cluster)
            return bool(quota["nominalQuota"] - quota["lendingLimit"] == 10)

        wait_until(ten_kept, timeout=40, what="the lendingLimit falling as work arrives")
        assert _active(cluster)
