"""The `reports` component of `quotaguard serve`: /reports routes on the plain-HTTP server."""

from __future__ import annotations

from typing import Final

from quotaguard.reports.report_routes import ReportSource, report_routes
from quotaguard.serve.components import ServeContext, Slot

# What the controller component provides for the reports routes (started after it).
REPORT_SOURCE: Final = Slot[ReportSource]("report-source")


async def start(ctx: ServeContext) -> None:
    ctx.add_routes(report_routes(ctx.provided(REPORT_SOURCE)))
