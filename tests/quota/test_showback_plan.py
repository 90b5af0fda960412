"""`quotaguard plan`'s showback: one snapshot is one instant, so GPU-hours of one hour at what
it shows held, busy as DCGM says, priced by the policy."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from quotaguard.cli import main
from quotaguard.quota.showback_report import CSV_COLUMNS
from tests.quota.test_cluster import FIXTURE

ROOT = Path(__file__).parents[2]
POLICY = ROOT / "config" / "policy.yaml"
SCRAPE = ROOT / "tests" / "fixtures" / "telemetry" / "dcgm-scrape.txt"
PRICES = "  showback: {pricePerGPUHour: {h100: 2.5}, currency: USD}\n"


def priced(tmp_path: Path) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.read_text().replace("  rebalance:\n", PRICES + "  rebalance:\n", 1))
    return str(path)


def plan(capsys: pytest.CaptureFixture[str], policy: str, *args: str) -> tuple[int, str, str]:
    code = main(["plan", "--policy", policy, "--snapshot", str(FIXTURE), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_has_an_hour_at_the_snapshot_rates_priced_by_model(tmp_path, capsys):
    code, out, _ = plan(capsys, priced(tmp_path), "-o", "json", "--gpu-metrics", str(SCRAPE))
    assert code == 0
    report = json.loads(out)
    showback = report["showback"]
    assert (showback["basis"], showback["seconds"], showback["currency"]) == (
        "snapshot",
        3600,
        "USD",
    )
    rows = {(row["tenant"], row["class"]): row for row in showback["rows"]}
    training = rows[("training", "h100")]
    # 20 whole H100s held: 20 GPU-hours in an hour; telemetry saw 12 of them
    assert (
        training["allocatedGpuHours"]
        == 20
        == next(
            c["usage"] for t in report["tenants"] if t["name"] == "training" for c in t["classes"]
        )
    )
    assert training["model"] == "NVIDIA-H100-80GB-HBM3"
    assert training["unobservedGpuHours"] == 8
    assert training["busyGpuHours"] + training["idleGpuHours"] == pytest.approx(12)
    assert training["cost"] == 50.0
    # a 1g.10gb slice on an H100 node: a seventh of the H100 price per unit held
    inference = rows[("inference", "h100-1g.10gb")]
    assert inference["pricePerGpuHour"] == 2.5
    assert inference["cost"] == pytest.approx(inference["allocatedGpuHours"] * 2.5, abs=1e-3)
    assert inference["allocatedGpuHours"] == pytest.approx(6 / 7, abs=1e-4)
    # the shared node says no model: hours without a cost, and the tenant says so
    notebooks = next(t for t in showback["tenants"] if t["tenant"] == "notebooks")
    assert notebooks["unpricedGpuHours"] == notebooks["allocatedGpuHours"] == 1.25


def test_table_says_it_per_tenant(tmp_path, capsys):
    code, out, _ = plan(capsys, priced(tmp_path))
    assert code == 0
    lines = out.splitlines()
    start = lines.index("showback, GPU-hours per hour at the snapshot's allocations:")
    said = lines[start + 1 :]
    assert said[2] == (
        "  training: 20 GPU-hours allocated (busy or idle unknown: no GPU telemetry); "
        "cost 50.00 USD (idle 0.00 USD)"
    )
    assert said[1].endswith("1.25 GPU-hours with no price set")


def test_showback_csv_next_to_any_output(tmp_path, capsys):
    path = tmp_path / "showback.csv"
    code, out, _ = plan(capsys, str(POLICY), "-o", "csv", "--showback-csv", str(path))
    assert code == 0
    assert out.splitlines()[0].startswith("tenant,queue,weight")  # the quota CSV, as before
    rows = list(csv.reader(io.StringIO(path.read_text())))
    assert rows[0] == list(CSV_COLUMNS)
    assert [row[1:4] for row in rows[1:]] == [
        ["inference", "h100-1g.10gb", "NVIDIA-H100-80GB-HBM3"],
        ["inference", "h100-3g.40gb", "NVIDIA-H100-80GB-HBM3"],
        ["notebooks", "shared", "unknown"],
        ["training", "h100", "NVIDIA-H100-80GB-HBM3"],
    ]
    assert all(row[CSV_COLUMNS.index("cost")] == "" for row in rows[1:])  # no prices


def test_showback_csv_that_cannot_be_written_is_exit_2(tmp_path, capsys):
    target = str(tmp_path / "no" / "such" / "dir.csv")
    code, _, err = plan(capsys, str(POLICY), "--showback-csv", target)
    assert code == 2
    assert err == f"{target}: cannot write: no such file\n"
