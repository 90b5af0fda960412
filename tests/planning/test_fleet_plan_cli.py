"""`quotaguard plan --fleet-snapshot DIR` on the sample fleet: the fleet, the manager and each
worker, and a worker without a snapshot reported unreachable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from quotaguard.cli import main

SAMPLE = Path(__file__).parents[2] / "config" / "samples" / "fleet"
POLICY = str(SAMPLE / "policy.yaml")


def plan(directory: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    code = main(["plan", "-p", POLICY, "--fleet-snapshot", str(directory), "-o", "json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out else {}, captured.err


def quotas(rows: list[dict[str, object]]) -> dict[object, object]:
    return {row["tenant"]: row["nominal"] for row in rows}


def test_the_sample_fleet_moves_waiting_work_to_the_worker_with_room(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, report, err = plan(SAMPLE / "snapshots", capsys)
    assert code == 0, err
    assert report["capacity"] == {"h100": 40}
    clusters = {c["name"]: c for c in report["clusters"]}
    # east is full of research's pretraining: it keeps it; the waiting work goes west
    assert quotas(clusters["east"]["quotas"]) == {"product": 0, "research": 16}
    assert quotas(clusters["west"]["quotas"]) == {"product": 16, "research": 8}
    assert quotas(report["manager"]) == {"product": 16, "research": 24}
    assert report["unreachable"] == {}


def test_a_worker_without_a_snapshot_is_unreachable_and_guarantees_go_to_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("manager.yaml", "west.yaml"):
        shutil.copy(SAMPLE / "snapshots" / name, tmp_path / name)
    code, report, err = plan(tmp_path, capsys)
    assert code == 0
    assert report["capacity"] == {"h100": 24}
    assert list(report["unreachable"]) == ["east"]
    assert "cluster east unreachable" in err
    west = quotas({c["name"]: c for c in report["clusters"]}["west"]["quotas"])
    assert west["research"] >= 8 and west["product"] >= 4  # both fleet guarantees
    assert sum(west.values()) <= 24


def test_the_table_shows_the_fleet_the_manager_and_each_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "-p", POLICY, "--fleet-snapshot", str(SAMPLE / "snapshots")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fleet gpu-fleet (mode apply): capacity h100 40")
    assert "manager: the sum over the workers that answered" in out
    assert "cluster east: capacity h100 16" in out and "cluster west: capacity h100 24" in out


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, "no manager.yaml"),
        ({"manager.yaml": "kind: [unclosed"}, "manager.yaml"),
        ({"manager.yaml": "apiVersion: v1\nkind: List\nitems: 3\n"}, "'items' is not a list"),
    ],
)
def test_bad_snapshot_directories_are_input_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, str], message: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, _, err = plan(tmp_path, capsys)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_a_policy_without_a_fleet_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = Path(__file__).parents[2] / "config" / "policy.yaml"
    assert main(["plan", "-p", str(plain), "--fleet-snapshot", str(tmp_path)]) == 2
    assert "has no spec.fleet" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-o", "csv"], "prints a table, json or yaml, not csv"),
        (["--html", "page.html"], "--html plans one cluster"),
        (["--showback-csv", "-"], "--showback-csv plans one cluster"),
    ],
)
def test_what_only_one_cluster_plans_is_refused_with_a_fleet(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["plan", "-p", POLICY, "--fleet-snapshot", str(SAMPLE / "snapshots"), *extra]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
