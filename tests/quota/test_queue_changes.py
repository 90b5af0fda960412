"""Queue changes worked out by hand: which classes, limits and weights a write carries, and
in which pass (the cases mutation testing showed unchecked)."""

from __future__ import annotations

from dataclasses import replace

from quotaguard.quota.class_capacity import ClassCapacity
from quotaguard.quota.cluster import ResourceQuota
from quotaguard.quota.demand import ClassDemand
from quotaguard.quota.diff import (
    NO_QUOTA,
    QueueChange,
    QuotaChange,
    diff,
    held_back,
    held_quotas,
    room_first,
    volcano_weight,
    writes_for,
)
from quotaguard.quota.queues import QueueState
from quotaguard.quota.quota_planner import Plan, plan
from tests.policies import A100, H100, policy

CLASSES = (H100, A100)


CAPACITY = {
    "h100": ClassCapacity("h100", "nvidia.com/gpu", 10, 0, 10),
    "a100": ClassCapacity("a100", "nvidia.com/a100", 4, 0, 4),
}


def two_class_plan(*, weight: float = 1.0, backend: str = "kueue") -> Plan:
    """Tenant t, h100 only (max 6), no quota for a100."""
    tenant = {
        "name": "t",
        "weight": weight,
        "allowedClasses": ["h100"],
        "quota": {"h100": {"max": 6}},
    }
    example = policy([tenant], classes=CLASSES, backend=backend)
    return plan(example, CAPACITY, {"t": {"h100": ClassDemand(4, 0)}})


def test_a_class_without_quota_is_written_as_zero_with_its_flavor_resource_and_reason() -> None:
    result = two_class_plan()
    (change,) = diff({}, result)
    by_class = {q.class_name: q for q in change.quotas}
    assert by_class["a100"] == QuotaChange(
        "a100", "a100", "nvidia.com/a100", NO_QUOTA, None, "no quota for this class"
    )
    assert (by_class["h100"].flavor, by_class["h100"].resource) == ("h100", "nvidia.com/gpu")
    assert by_class["h100"].quota.nominal == 6  # demand 4, idle capacity up to its max


def test_a_volcano_queue_gets_no_entry_for_a_class_it_has_no_quota_for() -> None:
    result = two_class_plan(backend="volcano")
    (change,) = diff({}, result)
    assert [q.class_name for q in change.quotas] == ["h100"]  # a new queue: written in full
    assert change.create


def test_a_volcano_weight_is_a_whole_number_of_at_least_one() -> None:
    assert [volcano_weight(w) for w in (0.4, 1.4, 2.6)] == [1, 1, 3]
    kueue = two_class_plan(weight=1.4)
    volcano = two_class_plan(weight=1.4, backend="volcano")
    assert diff({}, kueue)[0].weight == 1.4
    assert diff({}, volcano)[0].weight == 1


def test_a_queue_whose_weight_differs_gets_the_plans_weight() -> None:
    result = two_class_plan(weight=2.0)
    (row,) = result.tenants[0].classes
    quotas = {
        "h100": ResourceQuota(row.nominal, row.borrowing_limit, row.lending_limit),
        "a100": NO_QUOTA,
    }
    held = QueueState("t", result.cohort, 1.0, quotas)
    assert [(c.weight, c.cohort, c.quotas) for c in diff({"t": held}, result)] == [(2.0, None, ())]
    same = replace(held, weight=2.0)
    assert diff({"t": same}, result) == []


def change_of(tenant: str, *moves: tuple[str, ResourceQuota | None, ResourceQuota]) -> QueueChange:
    quotas = tuple(
        QuotaChange(name, name, f"r/{name}", after, before, "") for name, before, after in moves
    )
    return QueueChange(tenant, tenant, False, None, None, quotas)


def q(nominal: int, borrowing: int | None = 0) -> ResourceQuota:
    return ResourceQuota(nominal, borrowing, 0)


def test_a_change_of_limits_only_is_neither_a_raise_nor_a_cut() -> None:
    # x keeps nominal 4 with a new borrowing limit; y is raised.
    limits_only = change_of("a", ("x", q(4, 2), q(4, 6)))
    raise_and_limits = change_of("b", ("x", q(4, 2), q(4, 6)), ("y", q(1), q(3)))
    first, second = room_first([limits_only, raise_and_limits])
    assert first == [(limits_only, False)]
    assert second == [raise_and_limits]


def test_holding_back_keeps_limit_changes_and_cuts_and_drops_only_raises() -> None:
    change = change_of("a", ("x", q(4, 2), q(4, 6)), ("y", q(1), q(3)), ("z", q(5), q(2)))
    assert [c.class_name for c in held_back(change).quotas] == ["x", "z"]


def test_a_new_queue_of_one_unit_is_a_raise() -> None:
    new = change_of("a", ("x", None, q(1)))
    assert room_first([new]) == ([], [new])


def test_the_held_back_write_keeps_what_the_queue_holds_for_the_classes_it_raises() -> None:
    # Two classes, a and b: a's h100 is cut 8 -> 6 while its a100 is raised from nothing.
    example = policy(
        [
            {"name": "a", "quota": {"h100": {}, "a100": {}}},
            {"name": "b", "allowedClasses": ["h100"]},
        ],
        classes=CLASSES,
        rebalance={"maxStepPercent": 100},
    )
    want = {
        "a": {"h100": ClassDemand(0, 20), "a100": ClassDemand(0, 20)},
        "b": {"h100": ClassDemand(0, 20)},
    }
    current = {
        "a": QueueState("a", None, 1.0, {"h100": ResourceQuota(8, None, 8)}),
        "b": QueueState("b", None, 1.0, {"h100": ResourceQuota(2, None, 2)}),
    }
    result = plan(example, CAPACITY, want, current=current)
    cuts, raises = writes_for(result, current)
    assert [w.queue for w in cuts] == ["a"]
    (held,) = cuts
    assert held.tenant.name == "a"
    assert held.quotas["h100"].nominal < 8  # the cut is written
    assert held.quotas["a100"] == NO_QUOTA  # the raise waits: the queue has no a100 yet
    assert [c.class_name for c in held.change.quotas] == ["h100"]
    assert {w.queue for w in raises} == {"a", "b"}
    full = next(w for w in raises if w.queue == "a")
    assert full.tenant.name == "a"
    assert full.quotas["a100"].nominal > 0
    assert {c.class_name for c in full.change.quotas} == {"h100", "a100"}
    a_plan = result.tenant("a")
    assert a_plan is not None
    direct = held_quotas(result, a_plan, full.change)
    assert direct == held.quotas


def test_looking_up_a_tenant_or_class_the_plan_lacks_gives_none() -> None:
    result = two_class_plan()
    assert result.tenant("nobody") is None
    tenant = result.tenant("t")
    assert tenant is not None
    assert tenant.for_class("a100") is None


def test_holding_back_keeps_the_quota_held_now_for_a_raise_and_the_target_otherwise() -> None:
    result = two_class_plan()
    tenant = result.tenant("t")
    assert tenant is not None
    target = ResourceQuota(6, 0, 6)  # demand 4 below max 6: idle units up to the max
    assert held_quotas(result, tenant, change_of("t"))["h100"] == target
    held_now = ResourceQuota(4, 2, 4)
    raise_from_four = change_of("t", ("h100", held_now, target))
    assert held_quotas(result, tenant, raise_from_four)["h100"] == held_now
    limits_only = change_of("t", ("h100", ResourceQuota(6, 9, 9), target))
    assert held_quotas(result, tenant, limits_only)["h100"] == target
