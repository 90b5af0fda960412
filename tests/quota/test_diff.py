"""What the controller writes: queue changes and the patches that make them."""

from __future__ import annotations

from pathlib import Path

from quotaguard.quota.class_capacity import class_capacity
from quotaguard.quota.cluster import ResourceQuota, load_snapshot
from quotaguard.quota.demand import demand_of
from quotaguard.quota.diff import diff, target_quotas
from quotaguard.quota.queues import QueueState, current_state
from quotaguard.quota.quota_planner import Plan, plan
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


def test_fixture_path_is_shared() -> None:
    assert Path(FIXTURE).is_file()


def test_room_first_writes_every_cut_before_any_raise() -> None:
    from quotaguard.quota.diff import QueueChange, QuotaChange, held_back, room_first

    def change(tenant: str, *moves: tuple[str, int, int]) -> QueueChange:
        quotas = tuple(
            QuotaChange(
                name, name, f"r/{name}", ResourceQuota(after, 0, 0), ResourceQuota(b, 0, 0), ""
            )
            for name, b, after in moves
        )
        return QueueChange(tenant, tenant, False, None, None, quotas)

    # a: cuts x, raises y; b: raises x, cuts y; c: only raises; d: only cuts
    a = change("a", ("x", 8, 4), ("y", 2, 6))
    b = change("b", ("x", 2, 6), ("y", 8, 4))
    c = change("c", ("x", 0, 1))
    d = change("d", ("y", 3, 1))
    first, second = room_first([a, b, c, d])
    assert first == [(a, True), (b, True), (d, False)]
    assert second == [a, b, c]
    assert [q.class_name for q in held_back(a).quotas] == ["x"]
    assert [q.class_name for q in held_back(b).quotas] == ["y"]


def test_volcano_queues_move_under_the_cohort_only_when_the_policy_names_one() -> None:
    from dataclasses import replace

    from quotaguard.quota.diff import volcano_weight

    result, _ = fixture_plan()
    volcano = replace(result, backend="volcano", parent=None)

    def synced(parent: str | None) -> dict[str, QueueState]:
        return {
            tenant.name: QueueState(
                tenant.queue,
                parent,
                volcano_weight(tenant.weight),
                target_quotas(volcano, tenant),
            )
            for tenant in volcano.tenants
        }

    assert diff(synced(None), volcano) == []  # no cohort named: Volcano parents are left alone
    assert diff(synced("elsewhere"), volcano) == []
    under_pool = replace(volcano, parent="gpu-pool")
    changes = diff(synced(None), under_pool)
    assert {change.tenant: change.cohort for change in changes} == {
        tenant.name: "gpu-pool" for tenant in volcano.tenants
    }
    assert diff(synced("gpu-pool"), under_pool) == []
