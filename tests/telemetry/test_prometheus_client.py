"""The Prometheus HTTP API client against loopback servers that misbehave on purpose."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from quotaguard.policy.model import Rebalance
from quotaguard.telemetry.client import PrometheusClient, TelemetryError


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
