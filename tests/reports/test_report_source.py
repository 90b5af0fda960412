"""The reports routes read the controller the controller component provides, started before
them in one `serve` process."""

from __future__ import annotations

import asyncio
import types
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from quotaguard.reports.history import QuotaHistory
from quotaguard.reports.reports_component import REPORT_SOURCE
from quotaguard.reports.reports_component import start as start_reports
from quotaguard.serve.components import COMPONENTS, ServeContext, ServeOptions


class Source:
    history = QuotaHistory()

    def latest_report(self) -> dict[str, Any] | None:
        return {"policy": "p", "tenants": [], "classes": []}

    def not_ready_reason(self) -> str:
        return "no plan yet"

    def interval(self) -> float:
        return 60.0


def test_the_controller_starts_before_the_reports_that_read_it() -> None:
    names = list(COMPONENTS)
    assert names.index("controller") < names.index("reports")


def answer(ctx: ServeContext) -> tuple[int, Any]:
    async def main() -> tuple[int, Any]:
        await start_reports(ctx)
        app = web.Application()
        app.add_routes(ctx.routes)
        async with TestClient(TestServer(app)) as client:
            response = await client.get("/reports/quota")
            return response.status, await response.json()

    return asyncio.run(main())


def context() -> ServeContext:
    return ServeContext(ServeOptions(policy="policy.yaml"), types.SimpleNamespace())  # type: ignore[arg-type]


def test_the_reports_serve_what_the_provided_source_planned() -> None:
    ctx = context()
    ctx.provide(REPORT_SOURCE, Source())
    status, body = answer(ctx)
    assert status == 200 and body["policy"] == "p"


def test_without_a_provided_source_the_reports_say_the_controller_runs_elsewhere() -> None:
    status, body = answer(context())
    assert status == 503 and "controller" in str(body)
