"""Every report form shows allocated against used, idle units and faulty GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotaguard.cli import main
from quotaguard.metrics.controller_metrics import class_facts, quota_families
from quotaguard.quota.quota_report import csv_rows
from quotaguard.reports.report_page import render_report_page
from tests.quota.test_cluster import FIXTURE, SAMPLE

POLICY = str(Path(__file__).parents[2] / "config" / "policy.yaml")
SCRAPE = Path(__file__).parents[1] / "fixtures" / "telemetry" / "dcgm-scrape.txt"


@pytest.fixture
def report(capsys: pytest.CaptureFixture[str]) -> dict:
    argv = ["plan", "--policy", POLICY, "--snapshot", str(FIXTURE), "--gpu-metrics", str(SCRAPE)]
    assert main([*argv, "--output", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_csv_has_allocated_used_idle_and_faulty_columns(report: dict) -> None:
    rows = csv_rows(report)
    header = rows[0]
    training = next(r for r in rows if r[0] == "training" and r[header.index("class")] == "h100")
    cell = dict(zip(header, training, strict=True))
    assert (cell["allocated"], cell["idle"], cell["faultyGpus"]) == ("20", "4", "2")
    assert (cell["idlePods"], cell["idleGpuHours"]) == ("training/finetune-0", "0.0")
    assert float(cell["used"]) == pytest.approx(8 * 0.93 + 4 * 0.01)


def test_html_names_the_faulty_gpus_and_idle_units(report: dict) -> None:
    page = render_report_page(report, [], now=0)
    assert "h100-01 GPU 3: XID 79" in page
    assert "idle: training/finetune-0 (0 GPU-hours)" in page
    assert '<th rowspan="2">idle</th>' in page and '<th rowspan="2">used</th>' in page
    assert "<dt>idle</dt>" in page and "<dt>used</dt>" in page  # the cluster summary too


def test_metrics_carry_idle_used_and_faulty_gpus(report: dict) -> None:
    samples = {
        (s.name, s.labels.get("tenant"), s.labels.get("class")): s.value
        for family in quota_families(report, class_facts(SAMPLE))
        for s in family.samples
    }
    assert samples[("quotaguard_quota_idle", "training", "h100")] == 4
    assert samples[("quotaguard_quota_allocated", "training", "h100")] == 20
    assert samples[("quotaguard_class_faulty_gpus", None, "h100")] == 2


def test_metrics_name_each_faulty_gpu_with_its_reason_without_the_countdown(
    report: dict,
) -> None:
    keys = ("class", "flavor", "node", "gpu", "reason")

    def faulty(found: dict) -> list[tuple[object, ...]]:
        return sorted(
            (*(s.labels[k] for k in keys), s.value)
            for family in quota_families(found, class_facts(SAMPLE))
            for s in family.samples
            if s.name == "quotaguard_class_faulty_gpu"
        )

    assert faulty(report) == [
        ("h100", "h100", "h100-01", "3", "XID 79", 1.0),
        ("h100", "h100", "h100-03", "7", "row remapping failed", 1.0),
    ]
    h100 = next(c for c in report["classes"] if c["name"] == "h100")
    h100["faultyGpus"][0]["reason"] = "XID 79, 412s of quiet period left"
    assert faulty(report)[0][-2] == "XID 79"
    for row in report["classes"]:
        row["faultyGpus"] = []
    assert faulty(report) == []


def test_metrics_say_whether_telemetry_was_read_and_count_what_was_skipped(
    report: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    def telemetry_samples(found: dict) -> dict[tuple[str, str | None], float]:
        return {
            (s.name, s.labels.get("kind")): s.value
            for family in quota_families(found, class_facts(SAMPLE))
            for s in family.samples
            if s.name.startswith("quotaguard_telemetry_")
        }

    assert telemetry_samples(report) == {
        ("quotaguard_telemetry_available", None): 1.0,
        ("quotaguard_telemetry_skipped_series", "missing labels"): 1.0,
        ("quotaguard_telemetry_skipped_series", "not a number"): 1.0,
        ("quotaguard_telemetry_skipped_series", "unknown node"): 1.0,
    }
    base = ["plan", "--policy", POLICY, "--snapshot", str(FIXTURE), "--output", "json"]
    assert main(base) == 0
    assert telemetry_samples(json.loads(capsys.readouterr().out)) == {}  # no source given
    down = ["--prometheus-url", "http://127.0.0.1:9", "--prometheus-timeout", "1"]
    assert main([*base, *down]) == 0
    found = json.loads(capsys.readouterr().out)
    assert telemetry_samples(found) == {("quotaguard_telemetry_available", None): 0.0}
