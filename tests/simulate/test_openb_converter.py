"""tools/openb.py on a tiny CSV in the upstream columns: `--load` sizes the inventory to the
demand, keeping the model mix; the output replays; bad options exit 2 with a message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from quotaguard.policy.loader import load_policy_file
from quotaguard.simulate.simulation import simulate
from quotaguard.simulate.trace import load_trace

ROOT = Path(__file__).parents[2]
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
)


def _csvs(directory: Path) -> Path:
    nodes = ["sn,cpu_milli,memory_mib,gpu,model\n"]
    nodes += [f"node-{i:02},96000,786432,8,{'V100M32' if i % 2 else 'T4'}\n" for i in range(20)]
    (directory / "openb_node_list_gpu_node.csv").write_text("".join(nodes))
    # 16 pods of 4 GPUs each running the whole hour: a mean demand of 64 GPUs
    pods = [POD_HEADER]
    pods += [f"pod-{i},8000,1000,4,1000,,LS,Running,0,3600,0\n" for i in range(16)]
    pods.append("last,8000,1000,1,1000,,BE,Running,3600,3601,3600\n")
    (directory / "pods.csv").write_text("".join(pods))
    return directory


def _convert(directory: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.openb", "--csv-dir", str(directory), "--pods", "pods.csv",
         "--policy", str(directory / "policy.yaml"), "--trace", str(directory / "trace.yaml"),
         *options],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_load_keeps_as_many_nodes_as_the_demand_asks_in_the_inventory_mix(tmp_path):
    done = _convert(_csvs(tmp_path), "--load", "0.5")
    assert done.returncode == 0, done.stderr
    trace = yaml.safe_load((tmp_path / "trace.yaml").read_text())
    # 64 GPUs of mean demand at 0.5 of the inventory: 128 GPUs, 16 of the 20 nodes of 8
    assert len(trace["nodes"]) == 16
    models = [node["labels"]["nvidia.com/gpu.product"] for node in trace["nodes"]]
    assert models.count("T4") == models.count("V100M32") == 8
    assert "sized so that demand is 0.5 of them" in trace["description"]
    simulation = simulate(
        load_policy_file(tmp_path / "policy.yaml"), load_trace(trace_path(tmp_path))
    )
    # replayed, the demand fills the kept GPUs to the load asked (the last pod arrives as the
    # span ends)
    assert simulation.metrics["dynamic"].overall.workloads == 16
    assert simulation.metrics["dynamic"].overall.utilization == pytest.approx(0.5)


def trace_path(directory: Path) -> Path:
    return directory / "trace.yaml"


def test_without_load_every_nth_node_is_kept(tmp_path):
    done = _convert(_csvs(tmp_path), "--node-every", "4")
    assert done.returncode == 0, done.stderr
    assert len(yaml.safe_load(trace_path(tmp_path).read_text())["nodes"]) == 5


@pytest.mark.parametrize(
    ("options", "said"),
    [(("--load", "0"), "--load 0: a share"), (("--node-every", "0"), "--node-every 0: at least 1")],
)
def test_bad_sizing_exits_2_saying_why(tmp_path, options, said):
    done = _convert(_csvs(tmp_path), *options)
    assert done.returncode == 2
    assert said in done.stderr and "Traceback" not in done.stderr
