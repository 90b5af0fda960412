"""The `reports` component of `quotaguard serve`: /reports routes on the plain-HTTP server."""

from __future__ import annotations

from quotaguard.reports.http import ReportSource, report_routes
from quotaguard.serve.components import ServeContext

CONTROLLER_KEY = "controller"  # what the controller component puts in ctx.shared


async def start(ctx: ServeContext) -> None:
    source: ReportSource | None = ctx.shared.get(CONTROLLER_KEY)
    ctx.add_routes(report_routes(source))
