"""`simulate --gpu-metrics`: GPUs a dcgm-exporter scrape finds faulty are out of the replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotaguard.cli import main

ROOT = Path(__file__).parents[2]
POLICY = str(ROOT / "config" / "policy.yaml")
SMALL = str(Path(__file__).parent / "small.yaml")
SCRAPE = """\
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{gpu="3",UUID="GPU-1-3",device="nvidia3",Hostname="gpu-1"} 79
DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-2-0",device="nvidia0",Hostname="gpu-2"} 13
DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-9-0",device="nvidia0",Hostname="gpu-9"} 79
"""


def simulate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[dict, str]:
    code = main(["simulate", "--policy", POLICY, "--trace", SMALL, "-o", "json", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out), captured.err


def test_a_faulty_gpu_leaves_the_inventory_for_the_whole_replay(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    scrape = tmp_path / "scrape.txt"
    scrape.write_text(SCRAPE)
    before, _ = simulate(capsys)
    after, err = simulate(capsys, "--gpu-metrics", str(scrape))
    # gpu-1 keeps 7 GPUs: the static arm can no longer run a second 8-GPU training job
    # beside the first, so training gets 16 GPU-hours fewer.
    assert before["static"]["tenants"]["training"]["gpuHours"] == 40.0
    assert after["static"]["tenants"]["training"]["gpuHours"] == 24.0
    assert "gpu-1 GPU 3 out of the inventory: XID 79" in err
    assert "gpu-2" not in err  # XID 13 is an application error, not a faulty GPU
    assert "1 series skipped: unknown node" in err


def test_unreadable_telemetry_replays_the_trace_as_it_is(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    before, _ = simulate(capsys)
    after, err = simulate(capsys, "--gpu-metrics", str(tmp_path / "missing.txt"))
    assert "cannot read" in err and "replaying without GPU telemetry" in err
    assert after == before
