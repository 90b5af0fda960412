"""`GET /reports/quota` (JSON), `/reports/quota.csv`, `/reports/showback.csv` and `/reports`
(HTML) over aiohttp.

The routes read whatever implements `ReportSource` (the controller of this process). Without
one (a webhook-only pod) or before its first plan, they answer 503 with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from quotaguard.quota.quota_report import to_csv
from quotaguard.quota.showback_report import to_csv as showback_to_csv
from quotaguard.reports.history import QuotaHistory
from quotaguard.reports.report_page import render_report_page, render_unavailable_page

NO_CONTROLLER = (
    "the quota controller does not run in this process; ask a pod that runs the controller "
    "component"
)


class ReportSource(Protocol):
    history: QuotaHistory

    def latest_report(self) -> dict[str, Any] | None: ...

    def not_ready_reason(self) -> str: ...

    def interval(self) -> float: ...


def report_routes(
    source: ReportSource | None, *, clock: Callable[[], float] = time.time
) -> list[web.RouteDef]:
    def unavailable() -> str:
        return NO_CONTROLLER if source is None else source.not_ready_reason()

    async def quota_json(_: web.Request) -> web.Response:
        report = source.latest_report() if source is not None else None
        if report is None:
            return web.json_response(
                {"error": "no quota report", "reason": unavailable()}, status=503
            )
        return web.json_response(report)

    async def quota_csv(_: web.Request) -> web.Response:
        report = source.latest_report() if source is not None else None
        if report is None:
            return web.Response(text=f"no quota report: {unavailable()}\n", status=503)
        return web.Response(
            text=to_csv(report),
            content_type="text/csv",
            headers={"Content-Disposition": 'inline; filename="quota.csv"'},
        )

    async def showback_csv(_: web.Request) -> web.Response:
        report = source.latest_report() if source is not None else None
        if report is None:
            return web.Response(text=f"no showback: {unavailable()}\n", status=503)
        return web.Response(
            text=showback_to_csv(report.get("showback") or {}),
            content_type="text/csv",
            headers={"Content-Disposition": 'inline; filename="showback.csv"'},
        )

    async def page(_: web.Request) -> web.Response:
        report = source.latest_report() if source is not None else None
        if source is None or report is None:
            return web.Response(
                text=render_unavailable_page(unavailable()), content_type="text/html", status=503
            )
        html = render_report_page(
            report, source.history.points(), now=clock(), refresh_seconds=source.interval()
        )
        return web.Response(text=html, content_type="text/html")

    return [
        web.get("/reports/quota", quota_json),
        web.get("/reports/quota.csv", quota_csv),
        web.get("/reports/showback.csv", showback_csv),
        web.get("/reports", page),
        web.get("/reports/", page),
    ]
