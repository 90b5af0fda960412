"""Worked examples with numbers checked by hand."""

from __future__ import annotations

from quotaguard.policy.loader import load_policy_file
from quotaguard.quota.class_capacity import capacities_from_totals
from quotaguard.quota.cluster import ResourceQuota
from quotaguard.quota.demand import ClassDemand
from quotaguard.quota.queues import QueueState
from quotaguard.quota.quota_planner import ClassPlan, Plan, plan
from tests.quota.helpers import h100, policy


def row(result: Plan, tenant: str, gpu_class: str = "h100") -> ClassPlan:
    found = result.tenant(tenant)
    assert found is not None
    plan_row = found.for_class(gpu_class)
    assert plan_row is not None
    return plan_row


def current(**nominals: int) -> dict[str, QueueState]:
    return {
        name: QueueState(name, "pool", 1.0, {"h100": ResourceQuota(nominal, None, None)})
        for name, nominal in nominals.items()
    }


def test_sample_policy_mig_class_shared_by_weight() -> None:
    # h100-1g.10gb: distributable floor(28 x 95%) = 26. inference (weight 2, guaranteed 14,
    # max 28) wants 40, notebooks (weight 1, max 7) wants 12. Level L: notebooks min(L, 7) = 7,
    # inference 2L = 26 - 7 = 19 (L = 9.5).
    sample = load_policy_file("config/policy.yaml")
    capacity = capacities_from_totals(sample, {"h100-1g.10gb": 28}, {})
    assert capacity["h100-1g.10gb"].distributable == 26
    demand = {
        "inference": {"h100-1g.10gb": ClassDemand(10, 30)},
        "notebooks": {"h100-1g.10gb": ClassDemand(2, 10)},
    }
    result = plan(sample, capacity, demand)
    inference, notebooks = (
        row(result, "inference", "h100-1g.10gb"),
        row(result, "notebooks", "h100-1g.10gb"),
    )
    assert (inference.nominal, inference.borrowing_limit, inference.lending_limit) == (19, 9, 5)
    assert (notebooks.nominal, notebooks.borrowing_limit, notebooks.lending_limit) == (7, 0, 7)
    assert inference.reason == "pending demand 30 above nominal; share by weight"
    assert notebooks.reason == "demand 12 capped at max 7"
    # A class with no capacity at all: guarantees are scaled to nothing, and reported.
    assert row(result, "training").nominal == 0
    assert "h100: guarantee scaled: capacity 0 < guarantees 16" in result.problems


def test_the_report_example_research_grows_by_one_step() -> None:
    # research: guaranteed 8, max 32, usage 14 + pending 6; batch: guaranteed 8, wants 50.
    # Targets over 60: research min(L, 20) = 20, batch L = 40. Research holds 16 now: the
    # step limit is 25% of 16 = 4, exactly what it needs.
    example = policy(
        [
            {"name": "research", "quota": {"h100": {"guaranteed": 8, "max": 32}}},
            {"name": "batch", "quota": {"h100": {"guaranteed": 8}}},
        ]
    )
    demand = {"research": {"h100": ClassDemand(14, 6)}, "batch": {"h100": ClassDemand(40, 10)}}
    result = plan(example, h100(60), demand, current=current(research=16, batch=40))
    research = row(result, "research")
    assert (research.nominal, research.borrowing_limit, research.lending_limit) == (20, 12, 12)
    assert research.reason == "demand 20 met"
    assert row(result, "batch").nominal == 40
    assert row(result, "batch").borrowing_limit is None


def test_guarantees_scaled_by_largest_remainder_when_capacity_is_short() -> None:
    # 40 x 32/48 = 26.67 and 40 x 16/48 = 13.33: floors 26 + 13, the spare unit goes to the
    # larger remainder.
    example = policy(
        [
            {"name": "alpha", "quota": {"h100": {"guaranteed": 32, "max": 40}}},
            {"name": "beta", "quota": {"h100": {"guaranteed": 16, "max": 40}}},
        ]
    )
    result = plan(example, h100(40), {})
    assert (row(result, "alpha").guaranteed, row(result, "beta").guaranteed) == (27, 13)
    assert (row(result, "alpha").nominal, row(result, "beta").nominal) == (27, 13)
    assert row(result, "alpha").configured_guarantee == 32
    assert row(result, "alpha").reason.startswith("guarantee scaled: capacity 40 < guarantees 48")
    assert result.problems == ("h100: guarantee scaled: capacity 40 < guarantees 48",)


def test_ties_go_to_the_tenant_first_by_name() -> None:
    # Two identical tenants and an odd unit: 7 = 3.5 + 3.5, the spare unit goes to "ant".
    example = policy([{"name": "bee"}, {"name": "ant"}])
    demand = {"ant": {"h100": ClassDemand(0, 9)}, "bee": {"h100": ClassDemand(0, 9)}}
    result = plan(example, h100(7), demand)
    assert (row(result, "ant").nominal, row(result, "bee").nominal) == (4, 3)


def test_idle_capacity_is_handed_out_by_weight_up_to_max() -> None:
    # Nobody demands anything: 30 is split 2:1 (20/10), but light stops at its max of 6,
    # so heavy takes the rest up to 24.
    example = policy(
        [
            {"name": "heavy", "weight": 2},
            {"name": "light", "weight": 1, "quota": {"h100": {"max": 6}}},
        ]
    )
    result = plan(example, h100(30), {})
    assert (row(result, "heavy").nominal, row(result, "light").nominal) == (24, 6)
    assert row(result, "heavy").reason == "idle capacity lendable by weight; demand 0"
    assert row(result, "heavy").lending_limit == 24


def test_small_change_is_held() -> None:
    example = policy([{"name": "solo", "quota": {"h100": {"max": 11}}}], minChange=2)
    result = plan(example, h100(40), {}, current=current(solo=10))
    solo = row(result, "solo")
    assert (solo.target, solo.nominal) == (11, 10)
    assert solo.reason.endswith("held: change 1 below minChange 2")


def test_big_change_is_step_limited() -> None:
    example = policy([{"name": "solo"}], maxStepPercent=25)
    result = plan(example, h100(40), {}, current=current(solo=20))
    solo = row(result, "solo")
    assert (solo.target, solo.nominal) == (40, 25)
    assert solo.reason.endswith("step limited to 25% (target 40)")


def test_capacity_loss_lowers_quotas_beyond_the_step() -> None:
    # Both hold 30; capacity falls to 40. The step limit (25% of 30 = 7) would leave 23 + 23,
    # more than there is: both are cut to their targets of 20.
    example = policy([{"name": "alpha"}, {"name": "beta"}])
    demand = {"alpha": {"h100": ClassDemand(30)}, "beta": {"h100": ClassDemand(30)}}
    result = plan(example, h100(40), demand, current=current(alpha=30, beta=30))
    assert (row(result, "alpha").nominal, row(result, "beta").nominal) == (20, 20)
    assert "lowered beyond step to fit capacity 40" in row(result, "alpha").reason
    assert row(result, "alpha").over_quota


def test_increase_waits_for_the_capacity_a_decrease_frees() -> None:
    # grow wants 30, shrink wants 10. Each moves by at most 25% of what it holds: from 16/24
    # to 20/18, from 10/30 to 12/23. With capacity 33, 12 + 23 does not fit: grow's increase
    # waits until shrink's decreases free the room.
    example = policy([{"name": "grow"}, {"name": "shrink"}], maxStepPercent=25, minChange=1)
    demand = {"grow": {"h100": ClassDemand(10, 20)}, "shrink": {"h100": ClassDemand(10)}}
    result = plan(example, h100(40), demand, current=current(grow=16, shrink=24))
    grow, shrink = row(result, "grow"), row(result, "shrink")
    assert (grow.target, shrink.target) == (30, 10)
    assert (shrink.nominal, grow.nominal) == (18, 20)
    result = plan(example, h100(40), demand, current=current(grow=10, shrink=30))
    grow, shrink = row(result, "grow"), row(result, "shrink")
    assert (shrink.nominal, grow.nominal) == (23, 12)
    tight = plan(example, h100(33), demand, current=current(grow=10, shrink=30))
    grow, shrink = row(tight, "grow"), row(tight, "shrink")
    assert (shrink.nominal, grow.nominal) == (23, 10)
    assert grow.reason.endswith("increase held back: capacity 33 in use (target 23)")


def test_previous_recommendation_is_the_baseline_in_recommend_mode() -> None:
    example = policy([{"name": "solo"}], maxStepPercent=50)
    first = plan(example, h100(40), {}, current=current(solo=10))
    second = plan(example, h100(40), {}, current=current(solo=10), previous=first)
    assert [row(p, "solo").nominal for p in (first, second)] == [15, 22]


def test_effective_weights_steer_the_share() -> None:
    example = policy([{"name": "alpha"}, {"name": "beta"}])
    demand = {"alpha": {"h100": ClassDemand(0, 40)}, "beta": {"h100": ClassDemand(0, 40)}}
    result = plan(example, h100(30), demand, weights={"alpha": 2.0, "beta": 1.0})
    assert (row(result, "alpha").nominal, row(result, "beta").nominal) == (20, 10)
    assert result.tenant("alpha") is not None
    assert result.tenant("alpha").weight == 2.0  # type: ignore[union-attr]
