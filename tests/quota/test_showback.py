"""Showback's arithmetic: GPU-hours held, busy, idle and their cost, per day."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaguard.policy.prices import model_of, price_of
from quotaguard.quota.showback import (
    DAY,
    HOUR,
    KEEP_DAYS,
    Holding,
    Hours,
    Ledger,
    accumulate,
    advance,
    cost_of,
    rates_of,
    summed,
)

TENANTS = ["alpha", "bravo", "charlie"]
CLASSES = ["h100", "h100-1g.10gb", "shared"]
MODELS = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "unknown"]
GPUS = st.floats(0, 64, allow_nan=False)
PRICES = {"h100": 2.5, "a100": 1.2}


@st.composite
def holdings(draw: st.DrawFn) -> Holding:
    gpus = draw(GPUS)
    busy = draw(st.one_of(st.none(), st.floats(-1, 70, allow_nan=False)))
    return Holding(
        draw(st.sampled_from(TENANTS)),
        draw(st.sampled_from(CLASSES)),
        draw(st.sampled_from(MODELS)),
        gpus,
        busy,
    )


HOLDINGS = st.lists(holdings(), max_size=12)
STARTS = st.floats(0, 40 * DAY, allow_nan=False)
SPANS = st.floats(0, 3 * DAY, allow_nan=False)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def total(totals: dict[int, dict[tuple[str, str, str], Hours]]) -> Hours:
    return sum((hours for rows in totals.values() for hours in rows.values()), Hours())


@given(HOLDINGS, STARTS, SPANS)
def test_allocated_is_busy_idle_and_unobserved(
    found: list[Holding], start: float, seconds: float
) -> None:
    for hours in summed(accumulate({}, rates_of(found), start=start, seconds=seconds)).values():
        assert hours.allocated >= hours.busy >= 0
        assert min(hours.idle, hours.unobserved) >= 0
        assert close(hours.allocated, hours.busy + hours.idle + hours.unobserved)


@given(HOLDINGS, STARTS, SPANS)
def test_hours_are_gpus_times_time(found: list[Holding], start: float, seconds: float) -> None:
    held = sum(h.gpus for h in found)
    totals = accumulate({}, rates_of(found), start=start, seconds=seconds)
    assert close(total(totals).allocated, held * seconds / HOUR)


@given(HOLDINGS, STARTS, SPANS, SPANS)
def test_additive_over_spans_and_days(
    found: list[Holding], start: float, first: float, second: float
) -> None:
    """Two spans one after the other count as the one span they make, whatever days they
    cross; and no day holds more than 24 hours of what is held."""
    rates = rates_of(found)
    once = accumulate({}, rates, start=start, seconds=first + second)
    half = accumulate({}, rates, start=start, seconds=first)
    twice = accumulate(half, rates, start=start + first, seconds=second)
    assert once.keys() == twice.keys() or not rates
    for day, rows in once.items():
        for key, hours in rows.items():
            assert close(hours.allocated, twice[day][key].allocated)
            assert close(hours.busy, twice[day][key].busy)
            assert hours.allocated <= rates[key].allocated * 24 * (1 + 1e-9)


@given(HOLDINGS, STARTS, SPANS)
def test_cost_is_hours_times_price(found: list[Holding], start: float, seconds: float) -> None:
    totals = accumulate({}, rates_of(found), start=start, seconds=seconds)
    for (_, class_name, model), hours in summed(totals).items():
        price = price_of(PRICES, class_name, model)
        cost = cost_of(hours, price)
        if price is None:
            assert cost.cost is None
        else:
            assert cost.cost is not None and cost.idle_cost is not None
            assert close(cost.cost, hours.allocated * price)
            assert cost.idle_cost <= cost.cost + 1e-9


@given(HOLDINGS, STARTS, SPANS)
def test_accumulate_leaves_the_totals_alone(
    found: list[Holding], start: float, seconds: float
) -> None:
    before = accumulate({}, rates_of(found), start=start, seconds=seconds)
    copy = {day: dict(rows) for day, rows in before.items()}
    accumulate(before, rates_of(found), start=start, seconds=seconds)
    assert before == copy


def test_a_span_across_midnight_is_split() -> None:
    rates = rates_of([Holding("alpha", "h100", "m", 8, 6)])
    totals = accumulate({}, rates, start=2 * DAY - HOUR, seconds=3 * HOUR)
    assert totals[1][("alpha", "h100", "m")] == Hours(8, 6, 2, 0)
    assert totals[2][("alpha", "h100", "m")] == Hours(16, 12, 4, 0)


def test_busy_beyond_the_allocation_counts_as_the_allocation() -> None:
    rates = rates_of([Holding("a", "c", "m", 1, 3), Holding("a", "c", "m", 1, -2)])
    assert rates[("a", "c", "m")] == Hours(allocated=2, busy=1, idle=1)


def test_no_telemetry_is_unobserved_not_idle() -> None:
    rates = rates_of([Holding("a", "c", "m", 4, None)])
    assert rates[("a", "c", "m")] == Hours(allocated=4, unobserved=4)


@pytest.mark.parametrize(
    ("labels", "model"),
    [
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "NVIDIA-H100-80GB-HBM3"),
        ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}, "NVIDIA-A100-SXM4-40GB"),
        ({"nvidia.com/gpu.product": "Tesla-T4-SHARED"}, "Tesla-T4"),
        ({}, "unknown"),
    ],
)
def test_the_model_is_the_product_without_mig_or_sharing(
    labels: dict[str, str], model: str
) -> None:
    assert model_of(labels) == model


@pytest.mark.parametrize(
    ("class_name", "model", "price"),
    [
        ("h100", "whatever", 9.0),  # the class's own price first
        ("mig", "NVIDIA-H100-80GB-HBM3", 2.0),  # the most specific model key
        ("mig", "NVIDIA-H100-94GB-NVL", 1.5),
        ("mig", "NVIDIA-GH200-480GB", None),  # h200 is no word of GH200
        ("mig", "NVIDIA-H200-141GB", 3.0),
        ("mig", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 1.0),
        ("mig", "unknown", None),
    ],
)
def test_prices_by_class_then_model(class_name: str, model: str, price: float | None) -> None:
    prices = {"h100": 9.0, "H100": 1.5, "h100-80gb": 2.0, "h200": 3.0, "rtx-pro-6000": 1.0}
    assert price_of(prices, class_name, model) == price


def test_the_ledger_counts_from_its_second_look_and_not_across_a_gap() -> None:
    held = [Holding("alpha", "h100", "m", 4, 1)]
    ledger = advance(Ledger(), held, 1000.0, max_gap=120)
    assert ledger.days == {} and ledger.started == 1000.0
    ledger = advance(ledger, held, 1060.0, max_gap=120)
    assert ledger.days[0][("alpha", "h100", "m")].allocated == pytest.approx(4 / 60)
    ledger = advance(ledger, held, 1060.0 + 3600, max_gap=120)  # stopped for an hour
    assert ledger.since_start[("alpha", "h100", "m")].allocated == pytest.approx(4 * 3 / 60)
    assert ledger.since_start[("alpha", "h100", "m")].busy == pytest.approx(3 / 60)


@given(st.lists(st.floats(0, 600, allow_nan=False), max_size=30))
def test_the_ledger_keeps_its_days_and_never_lowers_its_totals(steps: list[float]) -> None:
    held = [Holding("alpha", "h100", "m", 2, 1)]
    ledger, now, before = Ledger(), 0.0, 0.0
    for step in steps:
        now += step * 3600
        ledger = advance(ledger, held, now, max_gap=DAY)
        after = sum(h.allocated for h in ledger.since_start.values())
        assert after >= before
        before = after
        assert len(ledger.days) <= KEEP_DAYS
