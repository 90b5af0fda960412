"""What the controller writes: queue changes and the patches that make them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from quotaguard.quota.capacity import class_capacity
from quotaguard.quota.cluster import ResourceQuota, load_snapshot
from quotaguard.quota.demand import demand_of
from quotaguard.quota.diff import diff, kueue_spec_patch, target_quotas, volcano_spec_patch
from quotaguard.quota.planner import Plan, plan
from quotaguard.quota.queues import QueueState, current_state
from tests.quota.test_cluster import FIXTURE, SAMPLE


def fixture_plan(*, without: str = "") -> tuple[Plan, dict[str, QueueState]]:
    snapshot = load_snapshot(FIXTURE, gpu_resources=SAMPLE.gpu_resources)
    current = current_state(SAMPLE, snapshot)
    current.pop(without, None)
    capacity = class_capacity(SAMPLE, snapshot.nodes, snapshot.pods)
    return plan(SAMPLE, capacity, demand_of(SAMPLE, snapshot), current=current), current


def test_nothing_to_write_when_queues_hold_the_plan() -> None:
    result, _ = fixture_plan()
    synced = {
        tenant.name: QueueState(
            tenant.queue, result.cohort, tenant.weight, target_quotas(result, tenant)
        )
        for tenant in result.tenants
    }
    assert diff(synced, result) == []


def test_changes_list_only_what_differs() -> None:
    result, current = fixture_plan()
    changes = {change.tenant: change for change in diff(current, result)}
    training = changes["training"]
    assert (training.create, training.cohort, training.weight) == (False, None, None)
    by_class = {quota.class_name: quota for quota in training.quotas}
    # 16 -> 20: a step of 25%; the classes training has no quota for already read 0/0/0.
    assert set(by_class) == {"h100", "h100-3g.40gb"}
    assert by_class["h100"].before == ResourceQuota(16, 32, 0)
    assert by_class["h100"].quota == ResourceQuota(20, 28, 4)
    assert "step limited to 25% (target 42)" in by_class["h100"].reason


def test_missing_queue_is_created_with_cohort_weight_and_every_class() -> None:
    # Without a queue to step from, the targets are written as they are.
    result, current = fixture_plan(without="notebooks")
    change = next(c for c in diff(current, result) if c.tenant == "notebooks")
    assert (change.create, change.cohort, change.weight) == (True, "gpu-pool", 1.0)
    assert {q.class_name: q.quota for q in change.quotas} == {
        "h100": ResourceQuota(0, 0, 0),
        "h100-1g.10gb": ResourceQuota(7, 0, 7),
        "h100-3g.40gb": ResourceQuota(0, 0, 0),
        "shared": ResourceQuota(30, 2, 22),
    }


def test_kueue_patch_rewrites_only_the_gpu_group() -> None:
    result, _ = fixture_plan()
    snapshot = load_snapshot(FIXTURE, gpu_resources=SAMPLE.gpu_resources)
    queue = next(q for q in snapshot.cluster_queues if q.name == "training")
    training = result.tenant("training")
    assert training is not None
    spec = kueue_spec_patch(result, training, queue)["spec"]
    cpu_group, gpu_group = spec["resourceGroups"]
    assert cpu_group == queue.spec["resourceGroups"][0]
    resources = [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-3g.40gb",
    ]
    assert gpu_group["coveredResources"] == resources
    assert [f["name"] for f in gpu_group["flavors"]] == [
        "h100",
        "h100-1g.10gb",
        "h100-3g.40gb",
        "shared",
    ]
    for flavor in gpu_group["flavors"]:
        assert [r["name"] for r in flavor["resources"]] == resources
    h100 = gpu_group["flavors"][0]["resources"]
    assert h100[0] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "20",
        "borrowingLimit": "28",
        "lendingLimit": "4",
    }
    assert h100[1] == {"name": "nvidia.com/gpu.shared", "nominalQuota": "0"}
    shared = gpu_group["flavors"][3]["resources"][1]
    assert shared == {
        "name": "nvidia.com/gpu.shared",
        "nominalQuota": "0",
        "borrowingLimit": "0",
        "lendingLimit": "0",
    }
    assert spec["cohortName"] == "gpu-pool"
    assert spec["fairSharing"] == {"weight": "3"}


def test_kueue_patch_of_a_v1beta1_queue_uses_cohort() -> None:
    result, _ = fixture_plan()
    snapshot = load_snapshot(FIXTURE, gpu_resources=SAMPLE.gpu_resources)
    queue = next(q for q in snapshot.cluster_queues if q.name == "inference")
    old = replace(queue, api_version="kueue.x-k8s.io/v1beta1")
    inference = result.tenant("inference")
    assert inference is not None
    spec = kueue_spec_patch(result, inference, old)["spec"]
    assert spec["cohort"] == "gpu-pool" and "cohortName" not in spec
    new = kueue_spec_patch(result, inference)["spec"]
    assert len(new["resourceGroups"]) == 1


def test_volcano_patch() -> None:
    result, _ = fixture_plan()
    training = result.tenant("training")
    assert training is not None
    assert volcano_spec_patch(result, training) == {
        "spec": {
            "weight": 3,
            "capability": {"nvidia.com/gpu": "48", "nvidia.com/mig-3g.40gb": "4"},
            "guarantee": {"resource": {"nvidia.com/gpu": "16", "nvidia.com/mig-3g.40gb": "0"}},
            "deserved": {"nvidia.com/gpu": "20", "nvidia.com/mig-3g.40gb": "1"},
        }
    }


def test_fixture_path_is_shared() -> None:
    assert Path(FIXTURE).is_file()
