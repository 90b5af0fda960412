"""Axes of whole units get whole ticks: no "2.5 GPUs" on a chart of GPU counts."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from quotaguard.charts.svg import Line, axis_fractions, line_chart, whole_top


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_a_whole_axis_covers_the_value_with_at_most_five_whole_steps(value):
    top = whole_top(value)
    assert top >= value and top >= 1
    assert top < 2.5 * max(value, 1)  # 1-2-5: never more than two and a half times too tall
    ticks = [f * top for f in axis_fractions(top, whole=True)]
    assert ticks[0] == 0 and ticks[-1] == top and 2 <= len(ticks) <= 6
    assert all(tick == int(tick) for tick in ticks)


def test_a_chart_of_units_labels_whole_ticks():
    svg = line_chart("q", [0, 60, 120], [Line("h100", [0, 3, 5], "#000")], whole=True)
    labels = re.findall(r'text-anchor="end">([^<]*)</text>', svg)
    assert labels == ["0", "1", "2", "3", "4", "5"]
    fractional = line_chart("q", [0, 60, 120], [Line("h100", [0, 3, 5], "#000")])
    assert "1.2" in re.findall(r'text-anchor="end">([^<]*)</text>', fractional)
