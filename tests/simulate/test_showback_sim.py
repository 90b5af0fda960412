"""Showback in `quotaguard simulate`: per simulated day, the arm that stands for the policy,
GPU-hours that agree with the arm's own figures, and the CSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from quotaguard.cli import main
from quotaguard.policy.loader import load_policy_file, load_policy_text
from quotaguard.simulate.arm_showback import HeldNow, showback_arm
from quotaguard.simulate.simulation import simulate
from quotaguard.simulate.trace import load_trace

ROOT = Path(__file__).parents[2]
POLICY = ROOT / "config" / "policy.yaml"
SMALL = Path(__file__).parent / "small.yaml"
PRICES = "  showback: {pricePerGPUHour: {h100: 2.5, h100-1g.10gb: 0.5}, currency: USD}\n"


def priced_policy(tmp_path: Path) -> Path:
    text = POLICY.read_text().replace("  rebalance:\n", PRICES + "  rebalance:\n", 1)
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


def two_day_trace(tmp_path: Path) -> Path:
    """The small trace with a training job that runs from 20:00 to 04:00 of the next day."""
    trace = yaml.safe_load(SMALL.read_text())
    trace["horizon"] = "30h"
    trace["workloads"].append(
        {
            "at": "20h",
            "duration": "8h",
            "namespace": "training",
            "uses": 0.25,
            "pod": trace["manifests"]["train-8"],
        }
    )
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump(trace))
    return path


def test_each_simulated_day_has_its_rows_and_the_tenants_agree_with_the_arm(tmp_path):
    policy = load_policy_file(priced_policy(tmp_path))
    trace = load_trace(str(two_day_trace(tmp_path)), gpu_resources=policy.gpu_resources)
    simulation = simulate(policy, trace, arms=("static", "dynamic"))
    showback = simulation.showback()
    assert (showback["arm"], showback["basis"], showback["currency"]) == (
        "dynamic",
        "simulated",
        "USD",
    )
    training = {
        row["day"]: row
        for row in showback["rows"]
        if row["tenant"] == "training" and row["class"] == "h100"
    }
    # the late job: 8 GPUs from 20:00 to 24:00 on day 1 and to 04:00 on day 2, a quarter busy
    assert training["day 2"]["allocatedGpuHours"] == pytest.approx(8 * 4, abs=0.2)
    assert training["day 2"]["busyGpuHours"] == pytest.approx(8 * 4 / 4, abs=0.1)
    assert training["day 2"]["cost"] == pytest.approx(training["day 2"]["allocatedGpuHours"] * 2.5)
    assert training["day 2"]["model"] == "NVIDIA-H100-80GB-HBM3"
    # sampled every interval, the hours agree with what the arm counts exactly
    dynamic = simulation.metrics["dynamic"]
    for row in showback["tenants"]:
        exact = dynamic.tenants[row["tenant"]].gpu_seconds / 3600
        assert row["allocatedGpuHours"] == pytest.approx(exact, rel=0.02, abs=0.1)
    idle = sum(row["idleGpuHours"] for row in showback["tenants"])
    assert idle == pytest.approx(dynamic.idle["heldIdle"] / 3600, abs=0.01)
    assert all(row["unobservedGpuHours"] == 0 for row in showback["rows"])


def test_a_mig_node_without_a_product_label_is_priced_by_its_class(tmp_path):
    policy = load_policy_file(priced_policy(tmp_path))
    trace = load_trace(str(SMALL), gpu_resources=policy.gpu_resources)
    showback = simulate(policy, trace, arms=("dynamic",)).showback()
    inference = [row for row in showback["rows"] if row["tenant"] == "inference"]
    assert inference and {row["model"] for row in inference} == {"unknown"}
    small = next(row for row in inference if row["class"] == "h100-1g.10gb")
    assert small["pricePerGpuHour"] == 0.5  # a 1g slice: 1/7 of the GPU-hour price of it
    assert small["cost"] == pytest.approx(small["allocatedGpuHours"] * 0.5)
    notebooks = next(row for row in showback["tenants"] if row["tenant"] == "notebooks")
    assert notebooks["unpricedGpuHours"] == notebooks["allocatedGpuHours"] > 0


def test_the_arm_shown_is_the_policy_as_written() -> None:
    plain = load_policy_file(POLICY)
    assert showback_arm(plain, ("none", "static", "pool", "dynamic", "geometry")) == "dynamic"
    assert showback_arm(plain, ("static",)) == "static"
    assert showback_arm(plain, ()) is None
    shifting = load_policy_text(
        POLICY.read_text().replace(
            "  rebalance:\n",
            "  geometry:\n    pools: [{name: mig, configs: [all-1g.10gb],"
            " nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}]\n  rebalance:\n",
            1,
        )
    )
    assert showback_arm(shifting, ("dynamic", "geometry")) == "geometry"


def test_the_command_writes_the_json_object_and_the_csv(tmp_path, capsys):
    path = tmp_path / "showback.csv"
    policy = str(priced_policy(tmp_path))
    code = main(
        ["simulate", "-p", policy, "--trace", str(SMALL), "-o", "json", "--showback-csv", str(path)]
    )
    assert code == 0
    showback = json.loads(capsys.readouterr().out)["showback"]
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert len(rows) == len(showback["rows"]) > 0
    assert {row["day"] for row in rows} == {"day 1"}
    assert sum(float(row["allocatedGpuHours"]) for row in rows) == pytest.approx(
        sum(row["allocatedGpuHours"] for row in showback["tenants"]), abs=0.01
    )


def test_the_text_and_html_say_it_and_an_unwritable_csv_is_exit_2(tmp_path, capsys):
    html = tmp_path / "sim.html"
    policy = str(priced_policy(tmp_path))
    unwritable = str(tmp_path / "missing" / "showback.csv")
    argv = ["simulate", "-p", policy, "--trace", str(SMALL), "--html", str(html)]
    assert main([*argv, "--showback-csv", unwritable]) == 2
    captured = capsys.readouterr()
    assert "showback, GPU-hours over the simulated span (arm dynamic):" in captured.out
    assert f"{unwritable}: cannot write: no such file" in captured.err
    page = html.read_text()
    assert '<section class="showback"><h2>Showback</h2>' in page
    assert "arm dynamic; costs in USD" in page


def test_what_is_held_follows_starts_and_stops_and_leaves_nothing_behind() -> None:
    policy = load_policy_file(POLICY)
    labels = [{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}, {}]
    held = HeldNow(policy, labels)
    held.start(1, "inference", ((0, "h100-1g.10gb", 7), (1, "h100-1g.10gb", 7)), 0.5)
    held.start(2, "inference", ((0, "h100-1g.10gb", 3), (0, "no-such-class", 9)), 1.0)
    rates = held.rates()
    on_h100 = rates[("inference", "h100-1g.10gb", "NVIDIA-H100-80GB-HBM3")]
    assert on_h100.allocated == pytest.approx(10 / 7)
    assert on_h100.busy == pytest.approx(0.5 + 3 / 7)
    assert rates[("inference", "h100-1g.10gb", "unknown")].idle == pytest.approx(0.5)
    held.stop(1)
    held.stop(2)
    held.stop(3)  # never started: nothing happens
    assert held.rates() == {}
