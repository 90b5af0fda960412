"""Reading telemetry: a dcgm-exporter scrape and Prometheus API answers, bad parts skipped."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.policy.model import Rebalance
from quotaguard.telemetry import series as series_module
from quotaguard.telemetry.exposition import parse_exposition
from quotaguard.telemetry.metrics_sources import (
    PrometheusClient,
    TelemetryError,
    parse_metrics_text,
    read_metrics_file,
)
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


@pytest.fixture
def answering() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A loopback HTTP server answering every GET with `body["body"]`."""
    body = {"body": b"{}"}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body["body"])))
            self.end_headers()
            self.wfile.write(body["body"])

        def log_message(self, *args: Any) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{http.server_address[1]}", body
    http.shutdown()
    http.server_close()


def matrix(count: int) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {"__name__": XID, "gpu": str(i), "Hostname": "n"},
                    "values": [[10, "0"], [20, "0"]],
                }
                for i in range(count)
            ],
        },
    }


def test_a_huge_prometheus_answer_is_refused_whole_not_read(
    answering: tuple[str, dict[str, bytes]],
) -> None:
    url, body = answering
    body["body"] = json.dumps(matrix(200)).encode()
    assert len(body["body"]) > 10_000
    with pytest.raises(TelemetryError, match="response larger than 10000 bytes"):
        PrometheusClient(url, timeout=2, max_bytes=10_000).gpu_metrics(Rebalance(), now=30.0)
    found = PrometheusClient(url, timeout=2).gpu_metrics(Rebalance(), now=30.0)
    assert len(found.series) == 200 and found.warnings == {}
    body["body"] = b"<html>proxy error</html>"
    with pytest.raises(TelemetryError, match="response is not JSON"):
        PrometheusClient(url, timeout=2).gpu_metrics(Rebalance(), now=30.0)


def test_past_the_series_and_point_bounds_the_rest_is_skipped_and_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(series_module, "MAX_SERIES", 3)
    found = parse_query_response(matrix(5))
    assert len(found.series) == 3 and found.warnings == {"too many series": 2}
    monkeypatch.setattr(series_module, "MAX_SERIES", 100)
    monkeypatch.setattr(series_module, "MAX_POINTS", 7)  # two points per series
    found = parse_query_response(matrix(5))
    assert len(found.series) == 3 and found.warnings == {"too many points": 2}


def test_json_nested_past_any_prometheus_answer_is_refused_not_a_crash(
    tmp_path: Path, answering: tuple[str, dict[str, bytes]]
) -> None:
    deep = '{"status": "success", "data": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (tmp_path / "deep.json").write_text(deep)
    with pytest.raises(TelemetryError, match=r"deep\.json:1:\d+: nested deeper than 32 levels"):
        read_metrics_file(tmp_path / "deep.json")
    url, body = answering
    body["body"] = deep.encode()
    with pytest.raises(TelemetryError, match="response is not JSON: nested deeper"):
        PrometheusClient(url, timeout=2).gpu_metrics(Rebalance(), now=30.0)
