"""The invariants of the quota contract (spec quota.md, 1-5) as properties of `plan`."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.quota_planner import ClassPlan, Plan, plan
from tests.quota.strategies import Case, cases

EXAMPLES = settings(max_examples=75, deadline=None)


def run(case: Case, *, baseline: bool = True) -> Plan:
    return plan(
        case.policy,
        case.capacity,
        case.demand,
        current=case.current if baseline else None,
        weights=case.weights,
    )


def rows_by_class(result: Plan) -> dict[str, list[tuple[str, ClassPlan]]]:
    found: dict[str, list[tuple[str, ClassPlan]]] = {}
    for tenant in result.tenants:
        for row in tenant.classes:
            found.setdefault(row.class_name, []).append((tenant.name, row))
    return found


def weight_of(case: Case, tenant: str) -> float:
    return case.weights.get(tenant, case.policy.tenants_by_name[tenant].weight)


@EXAMPLES
@given(cases())
def test_1_nominal_quotas_fit_distributable_capacity(case: Case) -> None:
    for name, rows in rows_by_class(run(case)).items():
        assert sum(row.nominal for _, row in rows) <= case.capacity[name].distributable


@EXAMPLES
@given(cases())
def test_2_nominal_between_scaled_guarantee_and_max(case: Case) -> None:
    result = run(case)
    for name, rows in rows_by_class(result).items():
        distributable = case.capacity[name].distributable
        configured = sum(row.configured_guarantee for _, row in rows)
        scaled = sum(row.guaranteed for _, row in rows)
        if configured <= distributable:
            assert all(row.guaranteed == row.configured_guarantee for _, row in rows)
        else:
            assert scaled == distributable
            assert any(p.startswith(f"{name}: guarantee scaled") for p in result.problems)
        for _, row in rows:
            assert row.guaranteed <= row.nominal
            assert row.max is None or row.nominal <= row.max
            assert row.lending_limit == row.nominal - row.guaranteed >= 0
            assert row.borrowing_limit == (None if row.max is None else row.max - row.nominal)


@EXAMPLES
@given(cases())
def test_3_work_conserving_and_idle_capacity_assigned(case: Case) -> None:
    for name, rows in rows_by_class(run(case, baseline=False)).items():
        distributable = case.capacity[name].distributable
        assigned = sum(row.nominal for _, row in rows)
        for _, row in rows:
            assert row.nominal == row.target  # no baseline, no hysteresis
            demanded = row.usage + row.pending
            unmet = row.nominal < demanded and (row.max is None or row.nominal < row.max)
            if unmet:
                assert assigned == distributable
        if assigned < distributable:
            assert all(row.max is not None and row.nominal == row.max for _, row in rows)


@EXAMPLES
@given(cases(), st.randoms(use_true_random=False))
def test_4_deterministic_and_independent_of_tenant_order(case: Case, random) -> None:
    first = run(case)
    assert run(case) == first
    spec = case.policy.model_dump(by_alias=True)
    random.shuffle(spec["spec"]["tenants"])
    shuffled = TenantPolicy.model_validate(spec)
    again = plan(shuffled, case.capacity, case.demand, current=case.current, weights=case.weights)
    assert again == first


def step_limit(baseline: int, min_change: int, percent: float) -> int:
    return max(min_change, 1, math.floor(baseline * percent / 100 + 1e-9))


@EXAMPLES
@given(cases(with_current=True))
def test_5_moves_bounded_except_to_restore_invariants(case: Case) -> None:
    rebalance = case.policy.spec.rebalance
    result = run(case)
    for name, rows in rows_by_class(result).items():
        distributable = case.capacity[name].distributable
        assigned = sum(row.nominal for _, row in rows)
        for tenant, row in rows:
            state = case.current.get(tenant)
            if state is None or name not in state.quotas:
                assert row.nominal == row.target
                continue
            before = state.quotas[name].nominal
            move = row.nominal - before
            if move == 0:
                continue
            limit = step_limit(before, rebalance.min_change, rebalance.max_step_percent)
            within = rebalance.min_change <= abs(move) <= limit
            raised_to_guarantee = move > 0 and row.nominal == row.guaranteed
            lowered_to_max = move < 0 and row.nominal == row.max
            fitted_to_capacity = (
                move < 0 and assigned == distributable and row.nominal >= row.target
            )
            assert within or raised_to_guarantee or lowered_to_max or fitted_to_capacity, (
                tenant,
                name,
                before,
                row,
            )
            # a move never overshoots the target
            assert min(before, row.target) <= row.nominal or raised_to_guarantee
            assert row.nominal <= max(before, row.target) or raised_to_guarantee


@EXAMPLES
@given(cases())
def test_share_by_weight_under_contention(case: Case) -> None:
    """No unit could move from one tenant to another without making the split less fair."""
    for name, rows in rows_by_class(run(case, baseline=False)).items():
        wants = {
            tenant: min(
                max(row.usage + row.pending, row.guaranteed), 10**9 if row.max is None else row.max
            )
            for tenant, row in rows
        }
        if sum(wants.values()) < case.capacity[name].distributable:
            continue
        for giver, row in rows:
            if row.nominal <= row.guaranteed:
                continue
            for taker, other in rows:
                if other.nominal < wants[taker]:
                    assert (row.nominal - 1) / weight_of(case, giver) <= (
                        other.nominal + 1
                    ) / weight_of(case, taker) + 1e-9
