"""`quotaguard serve`: start-up errors, components, graceful SIGTERM."""

from __future__ import annotations

import asyncio
import json
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from quotaguard.admission.reviews import make_review
from quotaguard.serve import components as serving
from quotaguard.serve.components import (
    ServeContext,
    ServeOptions,
    StartupError,
    resolve_components,
    serve,
)

from .conftest import Certificates


def quotaguard(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "quotaguard", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_invalid_policy_at_start_exits_1_naming_file_line_column(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "apiVersion: quotaguard.dev/v1alpha1\nkind: TenantPolicy\nmetadata: {name: x}\n"
        "spec:\n  gpuClasses: []\n"
    )
    process = quotaguard("serve", "--policy", str(policy), "--components", "webhook")
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 1
    assert stderr.startswith(f"{policy}:5:"), stderr


def test_missing_tls_files_are_a_startup_error(policy_file: Path, tmp_path: Path) -> None:
    def options(cert: str | None, key: str | None) -> ServeOptions:
        return ServeOptions(
            reports_auth="none",
            policy=str(policy_file),
            components=("webhook",),
            http_port=0,
            webhook_port=0,
            tls_cert_file=cert,
            tls_key_file=key,
        )

    with pytest.raises(StartupError, match="needs --tls-cert-file and --tls-key-file"):
        asyncio.run(serve(options(None, None), handle_signals=False))
    missing = options(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    with pytest.raises(StartupError, match=f"^{tmp_path / 'tls.crt'}: No such file"):
        asyncio.run(serve(missing, handle_signals=False))


def test_unknown_or_absent_components_are_startup_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(StartupError, match="unknown component bogus"):
        resolve_components(["bogus"])
    monkeypatch.setitem(serving.COMPONENTS, "later", "quotaguard.not_written_yet.component:start")
    with pytest.raises(StartupError, match="'later' is not available"):
        resolve_components(["later"])


def fake_component(monkeypatch: pytest.MonkeyPatch, start: Any) -> None:
    module = types.ModuleType("quotaguard_fake_component")
    module.start = start  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(serving.COMPONENTS, "fake", f"{module.__name__}:start")


def test_component_hooks_routes_readiness_task_and_shutdown(
    policy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []

    async def start(ctx: ServeContext) -> None:
        async def hello(_: web.Request) -> web.Response:
            return web.json_response({"mode": ctx.options.mode, "policy": ctx.store.policy.name})

        async def loop_forever() -> None:
            await asyncio.Event().wait()

        async def closed() -> None:
            events.append("shutdown")

        ctx.add_routes([web.get("/reports", hello)])
        ctx.add_readiness_check("fake", lambda: None)
        ctx.run_task("fake-loop", loop_forever())
        ctx.on_shutdown(closed)

    fake_component(monkeypatch, start)
    port = free_port()
    options = ServeOptions(
        reports_auth="none",
        policy=str(policy_file),
        components=("fake",),
        bind_address="127.0.0.1",
        http_port=port,
        mode="recommend",
    )

    async def scenario() -> tuple[int, Any, Any]:
        stop = asyncio.Event()
        running = asyncio.create_task(serve(options, stop=stop, handle_signals=False))
        answer = await asyncio.to_thread(get_json, port, "/reports")
        ready = await asyncio.to_thread(get_json, port, "/readyz")
        stop.set()
        return await running, answer, ready

    code, answer, ready = asyncio.run(scenario())
    assert code == 0
    assert answer == {"mode": "recommend", "policy": "gpu-platform"}
    assert ready["ready"] is True
    assert events == ["shutdown"]


def test_a_failing_component_task_stops_serve_with_exit_1(
    policy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def start(ctx: ServeContext) -> None:
        async def crash() -> None:
            raise RuntimeError("lost the API server")

        ctx.run_task("crashing", crash())

    fake_component(monkeypatch, start)
    options = ServeOptions(
        reports_auth="none",
        policy=str(policy_file),
        components=("fake",),
        bind_address="127.0.0.1",
        http_port=0,
    )
    assert asyncio.run(serve(options, handle_signals=False)) == 1


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get_json(port: int, path: str) -> Any:
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                return json.loads(response.read())
        except urllib.error.URLError:
            time.sleep(0.05)
    raise AssertionError("server did not come up")


def test_sigterm_finishes_the_in_flight_request_then_exits_0(
    policy_file: Path, certificates: Certificates
) -> None:
    process = quotaguard(
        "serve",
        "--policy",
        str(policy_file),
        "--components",
        "webhook",
        "--tls-cert-file",
        str(certificates.cert_file),
        "--tls-key-file",
        str(certificates.key_file),
        "--http-port",
        "0",
        "--webhook-port",
        "0",
        "--bind-address",
        "127.0.0.1",
        "--reports-auth",
        "none",
    )
    assert process.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(line) for line in process.stderr], daemon=True
    ).start()  # type: ignore[union-attr]
    ports: dict[str, int] = {}
    try:
        while len(ports) < 2:
            entry = json.loads(lines.get(timeout=30))
            if entry["message"] in ("webhook listening", "http listening"):
                ports[entry["message"].split()[0]] = entry["addresses"][0][1]
        assert get_json(ports["http"], "/readyz")["ready"] is True

        pod = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "c"}]}}
        body = json.dumps(make_review(pod, namespace="inference", uid="in-flight")).encode()
        raw = socket.create_connection(("127.0.0.1", ports["webhook"]), timeout=10)
        connection = certificates.client_context().wrap_socket(raw, server_hostname="127.0.0.1")
        connection.sendall(
            b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[:10]
        )
        time.sleep(0.3)  # let the server start handling it
        process.send_signal(signal.SIGTERM)
        while json.loads(lines.get(timeout=10))["message"] != "shutting down":
            pass
        assert eventually_refused(ports["webhook"])  # no longer accepting
        connection.sendall(body[10:])
        answer = connection.recv(65536).decode()
        connection.close()
        assert answer.startswith("HTTP/1.1 200 OK"), answer
        assert '"uid":"in-flight"' in answer
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def eventually_refused(port: int) -> bool:
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except OSError:
            return True
        time.sleep(0.05)
    return False
