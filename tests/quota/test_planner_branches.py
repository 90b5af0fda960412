"""Planner branches worked out by hand: each case reaches one rule of hysteresis or fitting."""

from __future__ import annotations

from quotaguard.quota.cluster import ResourceQuota
from quotaguard.quota.demand import ClassDemand
from quotaguard.quota.queues import QueueState
from quotaguard.quota.quota_planner import ClassPlan, Plan, plan
from tests.quota.helpers import h100, policy

BIG = ClassDemand(0, 20)


def tenants(*names: str, **quota: int) -> list[dict]:
    return [{"name": name, "quota": {"h100": dict(quota)}} for name in names]


def holding(**nominals: int) -> dict[str, QueueState]:
    return {
        name: QueueState(name, "pool", 1.0, {"h100": ResourceQuota(nominal, None, None)})
        for name, nominal in nominals.items()
    }


def wanting(*names: str, demand: ClassDemand = BIG) -> dict[str, dict[str, ClassDemand]]:
    return {name: {"h100": demand} for name in names}


def row(result: Plan, tenant: str) -> ClassPlan:
    found = result.tenant(tenant)
    assert found is not None
    plan_row = found.for_class("h100")
    assert plan_row is not None
    return plan_row


def nominals(result: Plan) -> dict[str, int]:
    return {t.name: t.classes[0].nominal for t in result.tenants}


def test_a_plan_one_unit_over_capacity_is_lowered_to_fit() -> None:
    # Capacity 10, targets 5 and 5. a holds 6: a move of 1 is below minChange 2, so it is held
    # at 6, one unit over capacity; fitting lowers it to its target after all.
    example = policy(tenants("a", "b"), minChange=2)
    result = plan(example, h100(10), wanting("a", "b"), current=holding(a=6, b=5))
    assert nominals(result) == {"a": 5, "b": 5}
    assert row(result, "a").reason.endswith("lowered beyond step to fit capacity 10")
    assert sum(nominals(result).values()) == 10


def test_a_raise_cut_below_min_change_snaps_back_to_the_baseline() -> None:
    # Capacity 9, targets 5 (a, first by name on the tie) and 4. a rises 2 -> 4 (step 2), b
    # falls 8 -> 6 (step 2): 10, one over. Holding a back by 1 leaves a raise of 1, below
    # minChange 2, so a stays at 2.
    example = policy(tenants("a", "b"), minChange=2)
    result = plan(example, h100(9), wanting("a", "b"), current=holding(a=2, b=8))
    assert nominals(result) == {"a": 2, "b": 6}
    assert "increase held back: capacity 9 in use (target 5)" in row(result, "a").reason


def test_raises_are_held_back_only_as_far_as_capacity_needs() -> None:
    # Capacity 13, targets 5, 4, 4. a and c rise by one step (2 -> 3), b falls by one (10 -> 8):
    # 14, one over; the one unit comes off a (equal room, first by name), c keeps its raise.
    example = policy(tenants("a", "b", "c"))
    result = plan(example, h100(13), wanting("a", "b", "c"), current=holding(a=2, b=10, c=2))
    assert nominals(result) == {"a": 2, "b": 8, "c": 3}
    assert "increase held back" in row(result, "a").reason
    assert "increase held back" not in row(result, "c").reason


def test_a_quota_above_a_lowered_max_comes_down_to_it_at_once() -> None:
    # The policy's max went down to 6 while the queue holds 10: the step would stop at 8.
    example = policy(tenants("a", max=6))
    result = plan(example, h100(20), wanting("a"), current=holding(a=10))
    assert row(result, "a").nominal == 6
    assert row(result, "a").reason.endswith("lowered to max 6")


def test_a_move_of_exactly_min_change_is_made() -> None:
    example = policy(tenants("a"), minChange=2)
    result = plan(example, h100(7), wanting("a", demand=ClassDemand(7, 0)), current=holding(a=5))
    assert row(result, "a").nominal == 7
    assert "held" not in row(result, "a").reason


def test_a_move_just_below_min_change_is_held() -> None:
    example = policy(tenants("a"), minChange=3)
    result = plan(example, h100(7), wanting("a", demand=ClassDemand(0, 7)), current=holding(a=5))
    assert row(result, "a").nominal == 5
    assert row(result, "a").reason == "demand 7 met; held: change 2 below minChange 3"
