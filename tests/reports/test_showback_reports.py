"""The controller's showback as a reader meets it: /reports/showback.csv, the Showback section of
/reports, and the `quotaguard_showback_*` series a dashboard draws."""

from __future__ import annotations

import csv
import io
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from quotaguard.metrics.controller_metrics import class_facts, quota_families
from quotaguard.metrics.showback_metrics import showback_families
from quotaguard.policy.loader import load_policy_text
from quotaguard.quota.showback import DAY, Holding, Ledger, advance
from quotaguard.quota.showback_report import CSV_COLUMNS, ledger_showback
from quotaguard.reports.report_page import render_report_page
from quotaguard.reports.showback_html import showback_section

from .test_reports import POLICY, Source, a_report, get

H100 = "NVIDIA-H100-80GB-HBM3"
PRICED = load_policy_text(
    """
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {name: priced}
spec:
  gpuClasses:
    - {name: h100, resource: nvidia.com/gpu, memory: 80Gi}
    - {name: mig, resource: nvidia.com/mig-1g.10gb, memory: 10Gi, slices: 1}
  showback: {pricePerGPUHour: {h100: 3}, currency: EUR}
""",
    "priced.yaml",
)


def ledger(*steps: tuple[float, list[Holding]]) -> Ledger:
    found = Ledger()
    for now, held in steps:
        found = advance(found, held, now, max_gap=DAY)
    return found


def a_showback_report(busy: float | None = 3.0) -> dict[str, Any]:
    held = [
        Holding("research", "h100", H100, 4.0, busy),
        Holding("serving", "mig", H100, 1.0, None),  # 7 slices, no telemetry
        Holding("<script>", "mig", "<b>odd</b>", 1.0, None),
    ]
    report = a_report()
    start = 20 * DAY + 22 * 3600  # 22:00 UTC: the second look crosses midnight
    report["showback"] = ledger_showback(
        ledger((start, held), (start + 4 * 3600, held)), PRICED.spec.showback
    )
    return report


def series(report: dict[str, Any]) -> dict[tuple[str, ...], float]:
    registry = CollectorRegistry()

    class Collect:
        def collect(self) -> Any:
            return showback_families(report)

    registry.register(Collect())  # type: ignore[arg-type]
    found = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            labels = sample.labels
            key = (sample.name, labels["tenant"], labels["class"], labels.get("kind", ""))
            found[key] = sample.value
    return found


def test_metrics_count_since_the_controller_started_by_kind() -> None:
    found = series(a_showback_report())
    gpu_hours = "quotaguard_showback_gpu_hours"
    assert found[(gpu_hours, "research", "h100", "allocated")] == 16.0  # 4 GPUs x 4 h
    assert found[(gpu_hours, "research", "h100", "busy")] == 12.0
    assert found[(gpu_hours, "research", "h100", "idle")] == 4.0
    # no telemetry: allocated, neither busy nor idle
    assert found[(gpu_hours, "serving", "mig", "allocated")] == 4.0
    assert found[(gpu_hours, "serving", "mig", "busy")] == 0.0
    assert found[("quotaguard_showback_cost", "research", "h100", "")] == 48.0
    assert ("quotaguard_showback_cost", "serving", "mig", "") in found  # h100 prices the model


def test_metrics_are_among_the_quota_series_of_the_controller_only() -> None:
    names = {"quotaguard_showback_gpu_hours", "quotaguard_showback_cost"}
    assert names <= {f.name for f in quota_families(a_showback_report(), class_facts(POLICY))}
    plan_like = a_report()
    plan_like["showback"] = {"basis": "snapshot", "rows": [], "tenants": []}
    assert not {f.name for f in quota_families(plan_like, class_facts(POLICY))} & names


def test_unpriced_rows_have_hours_and_no_cost_series() -> None:
    report = a_report()
    report["showback"] = ledger_showback(
        ledger((0.0, []), (3600.0, [Holding("research", "h100", H100, 2.0, 1.0)])), None
    )
    found = series(report)
    assert found[("quotaguard_showback_gpu_hours", "research", "h100", "allocated")] == 2.0
    assert not any(key[0] == "quotaguard_showback_cost" for key in found)


def test_the_csv_route_has_one_row_per_day_tenant_class_and_model() -> None:
    status, kind, text = get(Source(a_showback_report()), "/reports/showback.csv")
    assert (status, kind.split(";")[0]) == (200, "text/csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == list(CSV_COLUMNS)
    research = [row for row in rows if row["tenant"] == "research"]
    assert [(r["day"], r["allocatedGpuHours"]) for r in research] == [
        ("1970-01-21", "8.0"),
        ("1970-01-22", "8.0"),
    ]
    assert research[0]["cost"] == "24.0" and research[0]["currency"] == "EUR"
    odd = next(row for row in rows if row["tenant"] == "<script>")
    assert (odd["model"], odd["cost"], odd["currency"]) == ("<b>odd</b>", "", "")


def test_the_csv_route_says_why_there_is_no_report() -> None:
    status, _, text = get(Source(None), "/reports/showback.csv")
    assert status == 503 and "watch not synced" in text


def test_the_page_has_a_showback_section_with_escaped_names() -> None:
    page = render_report_page(a_showback_report(), [], now=0)
    section = page[page.index('<section class="showback">') :]
    assert "<h2>Showback</h2>" in section and "costs in EUR" in section
    assert "&lt;script&gt;" in section and "<script>" not in page
    assert "&lt;b&gt;odd&lt;/b&gt;" in section
    assert ">busy</th>" in section and ">no telemetry</th>" in section


def test_without_telemetry_or_prices_the_section_has_no_columns_of_nothing() -> None:
    report = a_report()
    report["showback"] = ledger_showback(
        ledger((0.0, []), (3600.0, [Holding("research", "h100", "x", 2.0, None)])), None
    )
    section = showback_section(report["showback"])
    assert ">allocated</th>" in section
    assert ">busy</th>" not in section and ">cost</th>" not in section
    assert showback_section(None) == ""
