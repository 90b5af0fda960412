"""A chart title longer than its chart is cut with an ellipsis, never drawn past the edge."""

from __future__ import annotations

import re
from html import unescape

from hypothesis import given
from hypothesis import strategies as st

from quotaguard.charts.svg import TITLE_CHAR_WIDTH, WIDTH, Line, line_chart, title_text


@given(st.text(min_size=1, max_size=300))
def test_a_title_fits_its_chart_and_keeps_its_whole_text_as_tooltip(title):
    svg = title_text(title, 56, WIDTH)
    shown, whole = re.fullmatch(r"<text [^>]*>(.*)<title>(.*)</title></text>", svg, re.S).groups()
    assert unescape(whole) == title
    assert 56 + TITLE_CHAR_WIDTH * len(unescape(shown)) <= WIDTH
    assert unescape(shown) == title or unescape(shown).endswith("…")


def test_a_long_tenant_name_is_cut_in_the_chart_but_named_in_full_for_readers():
    name = "tenant-" + "x" * 140
    svg = line_chart(f"{name}: quota over time", [0, 60], [Line("h100", [1, 2], "#000")])
    assert f'aria-label="{name}: quota over time"' in svg
    assert f"<title>{name}: quota over time</title>" in svg
    assert "…<title>" in svg
