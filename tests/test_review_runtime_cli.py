"""`quotaguard review --runtime FILE`: a TrainJob judged offline with its runtime's GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from quotaguard.cli import main
from tests.admission.test_trainjob_runtime import runtime, trainjob

POLICY = str(Path(__file__).resolve().parents[1] / "config" / "policy.yaml")


def _write(path: Path, *documents: object) -> str:
    path.write_text(yaml.safe_dump_all(documents))
    return str(path)


def test_the_runtime_file_gives_the_trainjob_its_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _write(tmp_path / "job.yaml", trainjob())
    runtimes = _write(tmp_path / "runtime.yaml", runtime(8))
    code = main(["review", "-p", POLICY, "-n", "inference", "--runtime", runtimes, job])
    assert code == 1
    assert "nvidia.com/gpu: 8 as nvidia.com/mig-3g.40gb" in capsys.readouterr().err


def test_a_runtime_in_the_input_counts_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = _write(tmp_path / "both.yaml", runtime(2), trainjob())
    assert main(["review", "-p", POLICY, "-n", "training", "--patched", both]) == 0
    out = capsys.readouterr().out
    patched = (
        [d for d in json.loads(out) if d.get("kind") == "TrainJob"]
        if out.startswith("[")
        else [json.loads(out)]
    )
    assert patched[-1]["spec"]["trainer"]["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": 2}


def test_a_runtime_not_given_is_a_denial_once_runtimes_are_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _write(tmp_path / "job.yaml", trainjob())
    other = runtime(2)
    other["metadata"]["name"] = "torch-distributed"
    runtimes = _write(tmp_path / "runtime.yaml", other)
    code = main(["review", "-p", POLICY, "-n", "training", "--runtime", runtimes, job])
    assert code == 1
    assert "cannot be read by quotaguard" in capsys.readouterr().err
