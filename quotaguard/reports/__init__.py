"""The quota reports over HTTP: JSON, CSV and the HTML page (`report_routes`, `report_page`),
and the history of quotas they chart."""

from quotaguard.reports.history import QuotaHistory
from quotaguard.reports.report_page import render_report_page
from quotaguard.reports.report_routes import ReportSource, report_routes

__all__ = ["QuotaHistory", "ReportSource", "render_report_page", "report_routes"]
