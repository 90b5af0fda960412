"""The plain-HTTP app: /metrics, /healthz, /readyz and routes added by other components."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from aiohttp import web

from quotaguard.serve.plain_http import STORE_KEY, build_http_app
from quotaguard.serve.policystore import PolicyStore

from .conftest import LiveServer


def get(port: int, path: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read(), response.headers["Content-Type"]
    except urllib.error.HTTPError as error:
        return error.code, error.read(), error.headers["Content-Type"]


def test_readyz_is_503_until_the_policy_loads_then_200(policy_file: Path, certificate: Any) -> None:
    store = PolicyStore(policy_file)
    with LiveServer(store, certificate) as server:
        status, body, _ = get(server.http_port, "/readyz")
        assert status == 503
        assert "not loaded" in json.loads(body)["reasons"]["policy"]
        assert get(server.http_port, "/healthz")[0] == 200  # alive all the same
        server.call(store.load)
        status, body, _ = get(server.http_port, "/readyz")
        assert status == 200
        assert json.loads(body) == {
            "ready": True,
            "generation": 1,
            "policy": {"name": "gpu-platform", "generation": 1, "lastRefused": None},
        }


def test_readyz_reports_a_refused_policy_while_the_last_good_one_stays(
    policy_file: Path, certificate: Any
) -> None:
    store = PolicyStore(policy_file)
    store.load()
    with LiveServer(store, certificate) as server:
        policy_file.write_text("spec: [")
        server.call(store.reload_if_changed)
        status, body, _ = get(server.http_port, "/readyz")
        report = json.loads(body)
        assert status == 200 and report["policy"]["name"] == "gpu-platform"
        assert report["policy"]["lastRefused"] == "policy refused"


def test_metrics_are_prometheus_text_with_admission_and_policy_series(server: LiveServer) -> None:
    status, body, content_type = get(server.http_port, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    text = body.decode()
    for name in (
        "quotaguard_admission_requests_total",
        "quotaguard_admission_duration_seconds_bucket",
        "quotaguard_admission_in_flight_requests",
        "quotaguard_policy_generation",
        "quotaguard_policy_reload_failures_total",
        "quotaguard_tls_certificate_expiry_timestamp_seconds",
    ):
        assert name in text


def test_metrics_asked_for_by_name_are_the_only_series_served(server: LiveServer) -> None:
    query = "name[]=quotaguard_policy_generation&name[]=quotaguard_watch_events_total"
    status, body, _ = get(server.http_port, f"/metrics?{query}")
    assert status == 200
    names = {line.split("{")[0].split(" ")[0] for line in body.decode().splitlines() if line}
    names -= {"#"}
    assert "quotaguard_policy_generation" in names
    assert "quotaguard_admission_requests_total" not in names
    assert names <= {"quotaguard_policy_generation", "quotaguard_watch_events_total"}


def test_extra_routes_and_readiness_checks(store: PolicyStore) -> None:
    async def report(request: web.Request) -> web.Response:
        return web.json_response({"policy": request.app[STORE_KEY].policy.name})

    reasons = {"controller": "no snapshot yet"}

    def broken() -> str | None:
        raise RuntimeError("boom")

    async def scenario() -> list[tuple[int, Any]]:
        app = build_http_app(
            store,
            extra_routes=[web.get("/reports", report)],
            readiness_checks={"controller": lambda: reasons.get("controller")},
        )
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        answers = []
        for path in ("/reports", "/readyz"):
            status, body, _ = await asyncio.to_thread(get, port, path)
            answers.append((status, json.loads(body)))
        reasons.pop("controller")
        status, body, _ = await asyncio.to_thread(get, port, "/readyz")
        answers.append((status, json.loads(body)))
        await runner.cleanup()

        failing = web.AppRunner(build_http_app(store, readiness_checks={"broken": broken}))
        await failing.setup()
        await web.TCPSite(failing, "127.0.0.1", 0).start()
        status, body, _ = await asyncio.to_thread(get, failing.addresses[0][1], "/readyz")
        answers.append((status, json.loads(body)))
        await failing.cleanup()
        return answers

    reports, not_ready, ready, broken_check = asyncio.run(scenario())
    assert reports == (200, {"policy": "gpu-platform"})
    assert not_ready[0] == 503
    assert not_ready[1]["reasons"] == {"controller": "no snapshot yet"}
    assert ready[0] == 200
    assert broken_check[0] == 503
    assert "boom" in broken_check[1]["reasons"]["broken"]
