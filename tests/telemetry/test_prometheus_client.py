"""The Prometheus HTTP API client against loopback servers that misbehave on purpose."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from quotaguard.cli import main
from quotaguard.policy.model import Rebalance
from quotaguard.telemetry import series as series_module
from quotaguard.telemetry.metrics_sources import PrometheusClient, TelemetryError
from quotaguard.telemetry.series import XID
from tests.quota.test_cluster import FIXTURE

POLICY = str(Path(__file__).parents[2] / "config" / "policy.yaml")
# Prometheus's own answer to a range query past its resolution limit (HTTP 400 bad_data).
TOO_MANY_POINTS = {
    "status": "error",
    "errorType": "bad_data",
    "error": "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing "
    "the query resolution (?step=XX)",
}


@pytest.fixture
def trickling() -> Iterator[str]:
    """A server that promises a megabyte and sends it one byte every 50 ms: each read gets
    something well within any socket timeout, the whole answer would take 14 hours."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(1_000_000))
            self.end_headers()
            self.wfile.write(b'{"status": "success", "data": {"resultType": "matrix", "result": [')
            self.wfile.flush()
            while not stop.is_set():
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.05)

        def log_message(self, *args: Any) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    http.daemon_threads = True
    threading.Thread(target=http.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{http.server_address[1]}"
    stop.set()
    http.shutdown()
    http.server_close()


def test_an_answer_trickled_past_the_timeout_is_cut_off_not_waited_for(trickling: str) -> None:
    outcome: dict[str, object] = {}

    def ask() -> None:
        try:
            PrometheusClient(trickling, timeout=0.5).gpu_metrics(Rebalance(), now=30.0)
        except TelemetryError as exc:
            outcome["error"] = str(exc)

    started = time.monotonic()
    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "the client was still reading after 10 s"
    assert time.monotonic() - started < 2 * 0.5 + 1
    assert outcome.get("error") == f"{trickling}: no whole answer within 0.5s"


@dataclass
class Answers:
    """What a stand-in Prometheus answers per API path (status, body), and what was asked."""

    by_path: dict[str, tuple[int, object]] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)


@pytest.fixture
def prometheus() -> Iterator[tuple[str, Answers]]:
    answers = Answers()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = urlparse(self.path).path
            answers.asked.append(path)
            status, body = answers.by_path.get(path, (404, {"status": "error", "error": "?"}))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{http.server_address[1]}", answers
    http.shutdown()
    http.server_close()


def vector(at: float, xid: float) -> dict[str, Any]:
    labels = {"gpu": "3", "UUID": "GPU-h100-01-3", "Hostname": "h100-01"}
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": {"__name__": XID, **labels}, "value": [at, str(xid)]}],
        },
    }


def test_a_refused_range_query_falls_back_to_an_instant_query_and_says_so(
    prometheus: tuple[str, Answers],
) -> None:
    url, answers = prometheus
    answers.by_path["/api/v1/query_range"] = (400, TOO_MANY_POINTS)
    answers.by_path["/api/v1/query"] = (200, vector(1000.0, 79))
    found = PrometheusClient(url, timeout=2).gpu_metrics(Rebalance(), now=1000.0)
    assert answers.asked == ["/api/v1/query_range", "/api/v1/query"]
    assert found.single_sample and [s.points for s in found.series] == [((1000.0, 79.0),)]
    assert found.note is not None
    assert found.note.startswith("range query refused (HTTP 400: ")
    assert found.note.endswith("; read an instant query")
    assert "exceeded maximum resolution" in found.note

    # Refused too: no telemetry. Unreachable: no second try.
    answers.by_path["/api/v1/query"] = (422, {"status": "error", "error": "execution: nope"})
    with pytest.raises(TelemetryError, match=r"HTTP 422: .*execution: nope"):
        PrometheusClient(url, timeout=2).gpu_metrics(Rebalance(), now=1000.0)
    answers.asked.clear()
    answers.by_path["/api/v1/query_range"] = (200, {"status": "success", "data": {}})
    with pytest.raises(TelemetryError, match=r"no data\.result list"):
        PrometheusClient(url, timeout=2).gpu_metrics(Rebalance(), now=1000.0)
    assert answers.asked == ["/api/v1/query_range"]


def test_a_range_answer_past_the_size_bound_falls_back_to_an_instant_query(
    prometheus: tuple[str, Answers],
) -> None:
    url, answers = prometheus
    many = vector(1000.0, 0)
    many["data"]["resultType"] = "matrix"
    row = many["data"]["result"][0]
    row["values"] = [[1000.0 - i, "0"] for i in range(2000)]
    del row["value"]
    answers.by_path["/api/v1/query_range"] = (200, many)
    answers.by_path["/api/v1/query"] = (200, vector(1000.0, 79))
    found = PrometheusClient(url, timeout=2, max_bytes=10_000).gpu_metrics(Rebalance(), now=1000.0)
    assert answers.asked == ["/api/v1/query_range", "/api/v1/query"]
    assert (
        found.note
        == "range query refused (response larger than 10000 bytes); read an instant query"
    )
    assert [s.points for s in found.series] == [((1000.0, 79.0),)]


def test_a_range_answer_past_the_points_bound_falls_back_to_an_instant_query(
    prometheus: tuple[str, Answers], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cluster too large for the window: a range answer cut at the bound would leave GPUs
    # unjudged; one sample of every series judges them all.
    monkeypatch.setattr(series_module, "MAX_POINTS", 3)
    url, answers = prometheus
    labels = {"gpu": "3", "Hostname": "h100-01"}
    answers.by_path["/api/v1/query_range"] = (
        200,
        {
            "status": "success",
            "data": {
                "resultType": "matrix",
                "result": [
                    {
                        "metric": {"__name__": XID, **labels, "gpu": gpu},
                        "values": [[990, "0"], [1000, "0"]],
                    }
                    for gpu in ("0", "1")
                ],
            },
        },
    )
    answers.by_path["/api/v1/query"] = (200, vector(1000.0, 79))
    found = PrometheusClient(url, timeout=2).gpu_metrics(Rebalance(), now=1000.0)
    assert answers.asked == ["/api/v1/query_range", "/api/v1/query"]
    assert found.note == "range query refused (past 2,000,000 points); read an instant query"
    assert found.warnings == {} and [s.points for s in found.series] == [((1000.0, 79.0),)]


def test_plan_on_an_instant_query_takes_the_gpu_out_and_the_report_says_how(
    prometheus: tuple[str, Answers], capsys: pytest.CaptureFixture[str]
) -> None:
    url, answers = prometheus
    answers.by_path["/api/v1/query_range"] = (400, TOO_MANY_POINTS)
    answers.by_path["/api/v1/query"] = (200, vector(time.time(), 79))
    argv = ["plan", "--policy", POLICY, "--snapshot", str(FIXTURE), "--prometheus-url", url]
    assert main([*argv, "--output", "json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    h100 = next(c for c in report["classes"] if c["name"] == "h100")
    assert h100["capacity"] == 47
    assert h100["faultyGpus"] == [{"node": "h100-01", "gpu": "3", "reason": "XID 79"}]
    note = report["telemetry"]["note"]
    assert note.startswith("range query refused (HTTP 400: ") and "read an instant query" in note
    assert note.endswith("idleness judged on a single sample per series, not over idleFor")
    assert "read an instant query" in captured.err


@pytest.mark.parametrize("timeout", ["inf", "nan", "0", "-1", "soon"])
def test_plan_refuses_a_prometheus_timeout_that_is_not_a_positive_number(
    timeout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--policy", POLICY, "--snapshot", str(FIXTURE)]
    down = ["--prometheus-url", "http://127.0.0.1:9", f"--prometheus-timeout={timeout}"]
    assert main([*argv, *down]) == 2
    assert "argument --prometheus-timeout: " in capsys.readouterr().err


def test_a_timeout_past_what_a_socket_takes_is_no_telemetry_not_a_crash(
    prometheus: tuple[str, Answers],
) -> None:
    url, _ = prometheus
    with pytest.raises(TelemetryError, match="unreachable"):
        PrometheusClient(url, timeout=1e300).gpu_metrics(Rebalance(), now=1000.0)
