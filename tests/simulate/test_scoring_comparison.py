"""`simulate` replays quotaguard's arm spread and packed in one run and recommends a scoring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from quotaguard.cli import main
from quotaguard.simulate.scoring_comparison import PACK, SPREAD, ScoringArm, recommend

ROOT = Path(__file__).parents[2]
POLICY = str(ROOT / "config" / "policy.yaml")
PACKING = ROOT / "tests" / "simulate" / "packing.yaml"


def simulate_json(capsys: pytest.CaptureFixture[str], trace: Path, *args: str) -> dict:
    assert main(["simulate", "--policy", POLICY, "--trace", str(trace), "-o", "json", *args]) == 0
    found: dict = json.loads(capsys.readouterr().out)
    return found


def test_packing_is_recommended_where_the_big_pod_would_wait_for_a_whole_node(capsys):
    comparison = simulate_json(capsys, PACKING)["scoringComparison"]
    assert comparison["arm"] == "dynamic"
    spread, pack = comparison["spread"], comparison["pack"]
    assert (spread["scoring"], pack["scoring"]) == (SPREAD, PACK)
    assert spread["usefulUtilization"] == pytest.approx(0.25, abs=0.01)
    assert pack["usefulUtilization"] == pytest.approx(0.50, abs=0.01)
    assert (spread["unplaceable"], pack["unplaceable"]) == (1, 0)
    assert pack["fragmentedGpuHours"] < spread["fragmentedGpuHours"]
    assert comparison["recommended"] == PACK
    assert comparison["reason"] == "25.0 points more useful utilisation"


def test_the_comparison_is_the_same_whichever_scoring_the_arms_ran_with(capsys):
    spread_first = simulate_json(capsys, PACKING)["scoringComparison"]
    pack_first = simulate_json(capsys, PACKING, "--scoring", "MostAllocated")["scoringComparison"]
    for key in ("spread", "pack", "recommended", "reason"):
        assert spread_first[key] == pack_first[key], key


def test_when_both_finish_the_work_fewer_fragmented_hours_and_waits_decide(capsys, tmp_path):
    longer = yaml.safe_load(PACKING.read_text())
    longer["horizon"] = "4h"  # the big pod runs in both, later when spread
    trace = tmp_path / "trace.yaml"
    trace.write_text(yaml.safe_dump(longer))
    comparison = simulate_json(capsys, trace)["scoringComparison"]
    assert comparison["spread"]["usefulUtilization"] == comparison["pack"]["usefulUtilization"]
    assert comparison["recommended"] == PACK
    assert comparison["reason"].startswith("as useful, 23 GPU-hours less fragmented")
    assert "mean wait 23 min shorter" in comparison["reason"]


def test_no_scoring_comparison_skips_it(capsys):
    assert "scoringComparison" not in simulate_json(capsys, PACKING, "--no-scoring-comparison")
    assert main(["simulate", "--policy", POLICY, "--trace", str(PACKING)]) == 0
    assert "MostAllocated recommended (25.0 points" in capsys.readouterr().out
    argv = ["simulate", "--policy", POLICY, "--trace", str(PACKING), "--no-scoring-comparison"]
    assert main(argv) == 0
    assert "scheduler scoring" not in capsys.readouterr().out


def arm(useful: float, fragmented: float, wait: float = 0.0) -> ScoringArm:
    return ScoringArm(SPREAD, useful, useful, fragmented, wait, 0)


@pytest.mark.parametrize(
    ("spread", "pack", "recommended"),
    [
        (arm(0.50, 10), arm(0.52, 10), PACK),  # more useful
        (arm(0.52, 10), arm(0.50, 0), SPREAD),  # less fragmented but less useful
        (arm(0.50, 10), arm(0.501, 2), PACK),  # a tie, less fragmented
        (arm(0.50, 10), arm(0.50, 2, wait=3600), SPREAD),  # less fragmented, waits longer
        (arm(0.50, 0.5), arm(0.50, 0), SPREAD),  # no difference: no second scheduler
    ],
)
def test_recommendation(spread: ScoringArm, pack: ScoringArm, recommended: str) -> None:
    assert recommend(spread, pack)[0] == recommended


def test_a_policy_that_sends_gpu_pods_to_the_packing_profile_is_simulated_packed(capsys, tmp_path):
    policy = yaml.safe_load(Path(POLICY).read_text())
    policy["spec"]["scheduling"] = {"schedulerName": "quotaguard-gpu"}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    argv = ["simulate", "--policy", str(path), "--trace", str(PACKING), "-o", "json"]
    assert main(argv) == 0
    packed = json.loads(capsys.readouterr().out)
    assert packed["scoring"] == "MostAllocated"
    assert (
        packed["dynamic"]["usefulUtilization"]
        == packed["scoringComparison"]["pack"]["usefulUtilization"]
    )
    assert main([*argv, "--scoring", "LeastAllocated"]) == 0  # said on the command line: kept
    assert json.loads(capsys.readouterr().out)["scoring"] == "LeastAllocated"
    assert simulate_json(capsys, PACKING)["scoring"] == "LeastAllocated"  # the sample: spread
