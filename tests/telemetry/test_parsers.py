"""Reading telemetry: a dcgm-exporter scrape and Prometheus API answers, bad parts skipped."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.telemetry.client import TelemetryError, parse_metrics_text, read_metrics_file
from quotaguard.telemetry.exposition import parse_exposition
from quotaguard.telemetry.promjson import parse_query_response
from quotaguard.telemetry.series import GR_ENGINE_ACTIVE, XID

SCRAPE = Path(__file__).parents[1] / "fixtures" / "telemetry" / "dcgm-scrape.txt"


def test_scrape_keeps_every_dcgm_label_and_counts_what_it_skips() -> None:
    found = read_metrics_file(SCRAPE, now=1000.0)
    assert found.single_sample and found.at == 1000.0
    xid = next(
        s for s in found.of(XID) if s.labels.get("Hostname") == "h100-01" and s.labels["gpu"] == "3"
    )
    assert xid.points == ((1000.0, 79.0),)
    assert xid.labels["UUID"] == "GPU-h100-01-3"
    assert xid.labels["pod"] == "pretrain-0" and xid.labels["namespace"] == "research-llm"
    mig = [s for s in found.of(GR_ENGINE_ACTIVE) if "GPU_I_ID" in s.labels]
    assert {s.labels["GPU_I_PROFILE"] for s in mig} == {"1g.10gb"} and len(mig) == 7
    assert found.warnings == {"not a number": 1}


def test_one_malformed_line_costs_only_itself() -> None:
    text = (
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
        'DCGM_FI_DEV_XID_ERRORS{gpu="0",Hostname="n"} 79\n'
        'DCGM_FI_DEV_XID_ERRORS{gpu="1",Hostname="n" 79\n'
        'DCGM_FI_DEV_XID_ERRORS{gpu="2",Hostname="n"} 0 1700000000000\n'
        'DCGM_FI_DEV_SM_CLOCK{gpu="0"} 1980\n'
    )
    found = parse_exposition(text, at=5.0)
    assert [(s.labels["gpu"], s.points) for s in found.series] == [
        ("0", ((5.0, 79.0),)),
        ("2", ((1_700_000_000.0, 0.0),)),
    ]
    assert found.warnings == {"malformed line": 1}


def test_query_range_matrix_is_many_points_per_series() -> None:
    document = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {"__name__": XID, "gpu": "0", "Hostname": "n"},
                    "values": [[10, "0"], [20, "79"], [30, "NaN"]],
                },
                {"metric": {"gpu": "1"}, "values": [[10, "0"]]},
            ],
        },
    }
    found = parse_metrics_text(json.dumps(document), source="range.json", now=0)
    assert not found.single_sample
    assert [s.points for s in found.series] == [((10.0, 0.0), (20.0, 79.0))]
    assert found.warnings == {"missing labels": 1, "not a number": 1}
    assert found.at == 20.0


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"status": "error", "error": "parse error"}, "Prometheus answered an error: parse error"),
        ({"status": "success", "data": {"resultType": "scalar", "result": []}}, "resultType"),
        ([], "not a Prometheus API response"),
    ],
)
def test_unusable_answers_are_one_line_errors(document: object, message: str) -> None:
    with pytest.raises(TelemetryError, match=message):
        parse_query_response(document, source="p")


def test_a_file_too_big_or_unreadable_is_refused_not_read(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text("x" * 100)
    with pytest.raises(TelemetryError, match="larger than 10 bytes"):
        read_metrics_file(big, max_bytes=10)
    with pytest.raises(TelemetryError, match="cannot read"):
        read_metrics_file(tmp_path / "missing.txt")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(TelemetryError, match=r"bad\.json:1:2: not JSON"):
        read_metrics_file(tmp_path / "bad.json")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_any_text_parses_or_is_skipped_never_raises(text: str) -> None:
    found = parse_exposition("DCGM_FI_DEV_XID_ERRORS" + text, at=0.0)
    assert all(p[1] == p[1] for s in found.series for p in s.points)  # no NaN kept


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_any_json_answer_is_parsed_or_refused_with_telemetry_error(result: object) -> None:
    document = {"status": "success", "data": {"resultType": "matrix", "result": [result]}}
    with contextlib.suppress(TelemetryError):
        parse_query_response(document)
