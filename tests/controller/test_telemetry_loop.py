"""The controller with GPU telemetry from a Prometheus HTTP API (a stand-in server on loopback):
faulty GPUs leave capacity until their quiet period is over, Prometheus down plans as before."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from quotaguard.controller.quota_controller import Controller

from .test_loop import make_controller, run, server, synced_interval  # noqa: F401

XID_79 = {"gpu": "3", "UUID": "GPU-3", "Hostname": "gpu-1", "modelName": "NVIDIA H100 80GB HBM3"}


class Prometheus:
    """Answers query_range with the XID series it is told, at the times asked."""

    def __init__(self) -> None:
        self.xid = 79.0
        self.queries: list[dict[str, list[str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlparse(self.path).query)
                outer.queries.append(query)
                end = float(query["end"][0])
                body = {
                    "status": "success",
                    "data": {
                        "resultType": "matrix",
                        "result": [
                            {
                                "metric": {"__name__": "DCGM_FI_DEV_XID_ERRORS", **XID_79},
                                "values": [[end, str(outer.xid)]],
                            }
                        ],
                    },
                }
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


@pytest.fixture
def prometheus() -> Iterator[Prometheus]:
    found = Prometheus()
    yield found
    found.http.shutdown()


def h100(report: dict[str, Any]) -> tuple[int, list[dict[str, str]]]:
    row = next(c for c in report["classes"] if c["name"] == "h100")
    return row["capacity"], row["faultyGpus"]


def test_an_xid_79_takes_one_gpu_out_until_its_quiet_period_is_over(server, prometheus):  # noqa: F811
    controller: Controller = make_controller(
        server, mode="recommend", prometheus_url=prometheus.url, prometheus_timeout=2
    )
    times = iter([1000.0, 1100.0, 1599.0, 1600.0])  # quiet period 600s (default)
    controller.clock = lambda: next(times)

    async def body(c: Controller) -> list[tuple[int, list[dict[str, str]]]]:
        seen = []
        assert await synced_interval(c) == "planned"
        seen.append(h100(c.latest_report()))  # type: ignore[arg-type]
        prometheus.xid = 0.0  # the GPU was reset
        for _ in range(3):
            await c.run_interval()
            seen.append(h100(c.latest_report()))  # type: ignore[arg-type]
        return seen

    seen = run(controller, body)
    assert seen[0] == (15, [{"node": "gpu-1", "gpu": "3", "reason": "XID 79"}])
    assert seen[1] == (
        15,
        [{"node": "gpu-1", "gpu": "3", "reason": "XID 79, 500s of quiet period left"}],
    )
    assert seen[2][0] == 15
    assert seen[3] == (16, [])
    assert prometheus.queries and "DCGM_FI_DEV_XID_ERRORS" in prometheus.queries[0]["query"][0]


def test_prometheus_down_plans_as_without_it_and_says_so(server):  # noqa: F811
    controller = make_controller(
        server, mode="recommend", prometheus_url="http://127.0.0.1:9", prometheus_timeout=1
    )

    async def body(c: Controller) -> dict[str, Any]:
        assert await synced_interval(c) == "planned"
        return c.latest_report()  # type: ignore[return-value]

    report = run(controller, body)
    assert h100(report) == (16, [])
    assert report["telemetry"]["available"] is False
    assert "unreachable" in report["telemetry"]["note"]
