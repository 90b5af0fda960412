"""The showback object and its CSV: a tenant's totals are the sum of its rows, every row in
the CSV once, costs only where a price applies."""

from __future__ import annotations

import csv
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaguard.policy.sections import Showback
from quotaguard.quota.showback import accumulate, rates_of
from quotaguard.quota.showback_report import (
    CSV_COLUMNS,
    showback_json,
    simulated_day,
    to_csv,
    utc_day,
)

from .test_showback import HOLDINGS, SPANS, STARTS

SHOWBACK = Showback.model_validate(
    {"pricePerGPUHour": {"h100": 2.5, "A100": 1.2}, "currency": "EUR"}
)


@given(HOLDINGS, STARTS, SPANS, st.booleans())
def test_tenant_totals_are_the_sum_of_their_rows(found, start, seconds, priced) -> None:
    totals = accumulate({}, rates_of(found), start=start, seconds=seconds)
    showback = showback_json(
        totals, SHOWBACK if priced else None, basis="simulated", day_label=simulated_day
    )
    for tenant in showback["tenants"]:
        rows = [row for row in showback["rows"] if row["tenant"] == tenant["tenant"]]
        for figure in ("allocatedGpuHours", "busyGpuHours", "idleGpuHours", "unobservedGpuHours"):
            assert tenant[figure] == pytest.approx(sum(r[figure] for r in rows), abs=1e-3)
        priced_rows = [r for r in rows if r["cost"] is not None]
        assert tenant["cost"] == pytest.approx(sum(r["cost"] for r in priced_rows), abs=1e-3)
        unpriced = sum(r["allocatedGpuHours"] for r in rows if r["cost"] is None)
        assert tenant["unpricedGpuHours"] == pytest.approx(unpriced, abs=1e-3)
    assert {row["tenant"] for row in showback["rows"]} == {t["tenant"] for t in showback["tenants"]}
    lines = list(csv.DictReader(io.StringIO(to_csv(showback))))
    assert len(lines) == len(showback["rows"])
    assert all(list(line) == list(CSV_COLUMNS) for line in lines)
    assert all((line["currency"] == "EUR") == (line["cost"] != "") for line in lines)


def test_days_are_labelled_by_date_or_by_simulated_day() -> None:
    assert utc_day(20427) == "2025-12-05"
    assert utc_day(-1) == "1969-12-31"
    assert [simulated_day(day) for day in (0, 1)] == ["day 1", "day 2"]
