"""The quota report: the fixed JSON shape, CSV and the terminal table."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

from quotaguard.quota.quota_report import build_report, format_table, to_csv
from tests.quota.test_diff import fixture_plan

MOMENT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def test_report_has_the_contract_fields() -> None:
    result, current = fixture_plan()
    report = json.loads(json.dumps(build_report(result, current=current, generated_at=MOMENT)))
    assert {"policy", "mode", "generatedAt", "classes", "tenants"} <= report.keys()
    assert (report["policy"], report["mode"], report["generatedAt"]) == (
        "gpu-platform",
        "recommend",
        "2026-12-02T12:00:00Z",
    )
    assert {
        key: report["classes"][0][key] for key in ("name", "resource", "capacity", "distributable")
    } == {"name": "h100", "resource": "nvidia.com/gpu", "capacity": 48, "distributable": 42}
    training = next(t for t in report["tenants"] if t["name"] == "training")
    assert {"name", "queue", "baseWeight", "weight", "classes"} <= training.keys()
    assert training["baseWeight"] == 3
    row = training["classes"][0]
    expected = {
        "class": "h100",
        "resource": "nvidia.com/gpu",
        "guaranteed": 16,
        "max": 48,
        "nominal": 20,
        "borrowingLimit": 28,
        "lendingLimit": 4,
        "usage": 20,
        "pending": 24,
        "current": {"nominal": 16, "borrowingLimit": 32, "lendingLimit": 0},
    }
    assert {key: row[key] for key in expected} == expected
    assert row["reason"].startswith("pending demand 24 above nominal; share by weight")


def test_current_is_null_without_a_queue() -> None:
    result, _ = fixture_plan()
    report = build_report(result, generated_at=MOMENT)
    assert all(row["current"] is None for t in report["tenants"] for row in t["classes"])


def test_csv_has_a_row_per_tenant_and_class() -> None:
    result, current = fixture_plan()
    rows = list(csv.DictReader(io.StringIO(to_csv(build_report(result, current=current)))))
    assert len(rows) == 6
    training = next(r for r in rows if r["tenant"] == "training" and r["class"] == "h100")
    assert (training["nominal"], training["currentNominal"], training["max"]) == ("20", "16", "48")
    assert training["distributable"] == "42"


def test_table_shows_moves_next_to_current() -> None:
    result, current = fixture_plan()
    table = format_table(build_report(result, current=current, generated_at=MOMENT))
    training = next(
        line for line in table.splitlines() if line.startswith("training  ") and " h100 " in line
    )
    assert "16->20" in training and "32->28" in training and "0->4" in training
    assert "2026-12-02T12:00:00Z" in table.splitlines()[0]
