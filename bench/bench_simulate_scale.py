"""`simulate` at cluster scale: the curve from 1,500 to 20,000 nodes, and the public openb trace,
each beside a baseline tree (the main branch) measured in the same run.

    python bench/bench_simulate_scale.py [--nodes 1500 5000 10000 20000]
        [--workloads-per-node 7.5] [--baseline DIR] [--baseline-up-to 5000]
        [--openb-dir ~/.cache/quotaguard-traces/openb]

Synthetic sizes: for each size a fresh process builds the inventory (seven models in equal
numbers of nodes, 8 GPUs per node for the big models, 4 for the small), a policy of one GPU
class per model and two tenants per model (a training tenant with gangs of 8-GPU pods and a
serving tenant with 1- and 2-GPU pods; guarantees 30% and 20% of the model, max the whole
model), and a one-day trace with the same load per node at every size (150,000 workloads at
20,000 nodes), written as JSON, then runs `simulate()` with every arm of `ARMS`. Printed per
size: CPU seconds of loading and of simulating, peak memory, each arm's utilisation beside the
bound, and the same for `--baseline` (a checkout of the main branch's tree: its `quotaguard`
package is imported instead) up to `--baseline-up-to` nodes, with the ratio.

openb: Alibaba's cluster-trace-gpu-v2023 (`tools/openb.py`: every one of its 1,213 GPU
nodes, its 7,064 GPU pods, arrivals 1,000 times faster so that 149 days of arrivals contend in
3.6 hours), as YAML, through the whole `quotaguard simulate` command: CPU seconds of the process
(reading the trace included) and its peak memory, beside the baseline's, and whether the JSON
outputs are byte-identical.

Targets (issue 29): the largest size under 300 CPU seconds and 2 GB; openb, all arms, under 5
CPU seconds. Issue 15's, kept: 1,500 nodes and 10,000 workloads under 60 CPU s and 1 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import machine, write_result

ROOT = Path(__file__).resolve().parents[1]

TARGET_CPU_SECONDS = 300.0  # the largest size (20,000 nodes, 150,000 workloads)
TARGET_MEMORY_MB = 2048.0
TARGET_OPENB_CPU_SECONDS = 5.0
OPENB_SPEEDUP = 1000
DAYS = 1
# (class, nvidia.com/gpu.product, GPUs per node)
MODELS = (
    ("h100", "NVIDIA-H100-80GB-HBM3", 8),
    ("h200", "NVIDIA-H200", 8),
    ("a100", "NVIDIA-A100-SXM4-80GB", 8),
    ("a100-40", "NVIDIA-A100-SXM4-40GB", 8),
    ("l40s", "NVIDIA-L40S", 4),
    ("a10", "NVIDIA-A10", 4),
    ("t4", "Tesla-T4", 4),
)


def inventory(nodes: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    found, gpus = [], dict.fromkeys((m[0] for m in MODELS), 0)
    for index in range(nodes):
        name, product, per_node = MODELS[index % len(MODELS)]
        found.append(
            {
                "name": f"{name}-{index:05d}",
                "labels": {"nvidia.com/gpu.product": product},
                "allocatable": {"nvidia.com/gpu": str(per_node)},
            }
        )
        gpus[name] += per_node
    return found, gpus


def policy_text(gpus: dict[str, int]) -> str:
    classes = "".join(
        f"    - {{name: {name}, resource: nvidia.com/gpu, memory: 80Gi, "
        f"nodeSelector: {{nvidia.com/gpu.product: {product}}}}}\n"
        for name, product, _ in MODELS
    )
    tenants = ""
    for name, _, _ in MODELS:
        total = gpus[name]
        for role, share, per_pod in (("train", 0.3, 8), ("serve", 0.2, 2)):
            tenants += (
                f"    - name: {role}-{name}\n      namespaces: [{role}-{name}]\n"
                f"      maxGPUsPerPod: {per_pod}\n      allowedClasses: [{name}]\n"
                f"      quota: {{{name}: {{guaranteed: {int(total * share)}, max: {total}}}}}\n"
                f"      rewrite: [{{to: {name}}}]\n"
            )
    return (
        "apiVersion: quotaguard.dev/v1alpha1\nkind: TenantPolicy\nmetadata: {name: scale}\n"
        "spec:\n  backend: kueue\n  cohort: all\n  unmatchedNamespaces: deny\n"
        f"  gpuClasses:\n{classes}  tenants:\n{tenants}"
        "  rebalance: {mode: apply, interval: 60s, demandWindow: 15m}\n"
    )


def pod(gpus: int, pods: int) -> dict[str, Any]:
    template = {
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]
        }
    }
    if pods == 1:
        return template
    spec = {"parallelism": pods, "template": template}
    return {"apiVersion": "batch/v1", "kind": "Job", "spec": spec}


def workloads(count: int, seed: int = 1500) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    span = DAYS * 86400
    found = []
    for _ in range(count):
        name = rng.choice(MODELS)[0]
        if rng.random() < 0.35:  # training: 1-8 GPUs, sometimes a gang of 8-GPU pods
            gpus, pods = rng.choice(((1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (8, 4)))
            tenant, duration = f"train-{name}", rng.uniform(1800, 8 * 3600)
        else:
            gpus, pods = rng.choice(((1, 1), (1, 1), (2, 1)))
            tenant, duration = f"serve-{name}", rng.uniform(300, 2 * 3600)
        found.append(
            {
                "at": round(rng.uniform(0, span)),
                "duration": round(duration),
                "namespace": tenant,
                "uses": round(rng.uniform(0.2, 1.0), 2),
                "pod": pod(gpus, pods),
            }
        )
    return sorted(found, key=lambda w: w["at"])


def one_size(nodes: int, count: int, root: Path) -> dict[str, Any]:
    """Build, load and simulate one size in this process, with the `quotaguard` of `root`."""
    sys.path.insert(0, str(root))
    from quotaguard.policy.loader import load_policy_file
    from quotaguard.simulate.simulation import simulate
    from quotaguard.simulate.trace import load_trace

    found, gpus = inventory(nodes)
    with tempfile.TemporaryDirectory() as directory:
        policy_path = Path(directory) / "policy.yaml"
        policy_path.write_text(policy_text(gpus))
        trace_path = Path(directory) / "trace.json"
        document = {"horizon": f"{DAYS * 24}h", "nodes": found, "workloads": workloads(count)}
        trace_path.write_text(json.dumps(document))
        del document
        cpu = time.process_time()
        policy = load_policy_file(policy_path)
        trace = load_trace(trace_path, gpu_resources=policy.gpu_resources)
        load_cpu = time.process_time() - cpu
    cpu, wall = time.process_time(), time.perf_counter()
    simulation = simulate(policy, trace)
    simulate_cpu, simulate_wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "nodes": nodes,
        "gpus": sum(gpus.values()),
        "workloads": trace.size,
        "load_cpu_s": round(load_cpu, 2),
        "simulate_cpu_s": round(simulate_cpu, 2),
        "simulate_wall_s": round(simulate_wall, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "utilization": {
            arm: round(metrics.overall.utilization, 4)
            for arm, metrics in simulation.metrics.items()
        },
        "bound": round(simulation.bound, 4),
    }


def _child(nodes: int, per_node: float, root: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--one", str(nodes), "--root", str(root)]
    command += ["--workloads-per-node", str(per_node)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    row: dict[str, Any] = json.loads(out)
    return row


def _show(label: str, row: dict[str, Any]) -> str:
    arms = ", ".join(f"{arm} {u:.1%}" for arm, u in row["utilization"].items())
    return (
        f"{label:>8} {row['nodes']:>6,} nodes {row['gpus']:>7,} GPUs {row['workloads']:>7,} "
        f"workloads: load {row['load_cpu_s']:.1f} CPU s, simulate {row['simulate_cpu_s']:.1f} "
        f"CPU s ({row['simulate_wall_s']:.0f} s wall), peak {row['peak_rss_mb']:.0f} MB; "
        f"{arms}; bound {row['bound']:.1%}"
    )


def _command_cpu(argv: list[str], root: Path, out: Path) -> tuple[float, float]:
    """CPU seconds (user + system) and peak MB of one quotaguard command run from `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    with out.open("w") as handle:
        child = subprocess.Popen(
            [sys.executable, "-m", "quotaguard", *argv], stdout=handle, env=env, cwd=root
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise RuntimeError(f"quotaguard {' '.join(argv)} exited {child.returncode}")
    return round(usage.ru_utime + usage.ru_stime, 2), round(usage.ru_maxrss / 1024, 1)


def openb(csv_dir: Path, baseline: Path | None) -> dict[str, Any]:
    """The whole openb trace through `quotaguard simulate -o json`, best of three, and the
    baseline's, in the same run."""
    work = Path(tempfile.mkdtemp(prefix="openb-"))
    policy, trace = work / "policy.yaml", work / "trace.yaml"
    convert = [sys.executable, "-m", "tools.openb", "--csv-dir", str(csv_dir)]
    convert += ["--node-every", "1", "--speedup", str(OPENB_SPEEDUP)]
    subprocess.run([*convert, "--policy", str(policy), "--trace", str(trace)], check=True, cwd=ROOT)
    argv = ["simulate", "--policy", str(policy), "--trace", str(trace), "-o", "json"]
    row: dict[str, Any] = {"trace": f"openb, --node-every 1 --speedup {OPENB_SPEEDUP}"}
    trees = {"current": ROOT} | ({"baseline": baseline} if baseline else {})
    for label, root in trees.items():
        runs = [_command_cpu(argv, root, work / f"{label}.json") for _ in range(3)]
        row[f"{label}_cpu_s"] = min(cpu for cpu, _ in runs)
        row[f"{label}_peak_rss_mb"] = max(mb for _, mb in runs)
    if baseline:
        row["ratio"] = round(row["baseline_cpu_s"] / row["current_cpu_s"], 2)
        same = (work / "current.json").read_bytes() == (work / "baseline.json").read_bytes()
        row["output_identical"] = same
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1500, 5000, 10000, 20000])
    parser.add_argument("--workloads-per-node", type=float, default=7.5)
    parser.add_argument("--baseline", type=Path, help="a tree with the baseline's quotaguard/")
    parser.add_argument("--baseline-up-to", type=int, default=5000)
    parser.add_argument(
        "--openb-dir", type=Path, default=Path.home() / ".cache/quotaguard-traces/openb"
    )
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one size
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        row = one_size(args.one, round(args.one * args.workloads_per_node), args.root)
        print(json.dumps(row))
        return 0
    result: dict[str, Any] = {"target_cpu_s": TARGET_CPU_SECONDS}
    result |= {"target_memory_mb": TARGET_MEMORY_MB, "target_openb_cpu_s": TARGET_OPENB_CPU_SECONDS}
    if (args.openb_dir / "openb_node_list_gpu_node.csv").exists():
        result["openb"] = openb(args.openb_dir, args.baseline)
        print(f"openb: {json.dumps(result['openb'])}", flush=True)
    rows = result["sizes"] = []
    for nodes in args.nodes:
        row = _child(nodes, args.workloads_per_node, ROOT)
        print(_show("current", row), flush=True)
        if args.baseline and nodes <= args.baseline_up_to:
            base = row["baseline"] = _child(nodes, args.workloads_per_node, args.baseline)
            row["ratio"] = round(
                (base["load_cpu_s"] + base["simulate_cpu_s"])
                / max(0.01, row["load_cpu_s"] + row["simulate_cpu_s"]),
                2,
            )
            print(_show("baseline", base) + f"; ratio {row['ratio']}x", flush=True)
        rows.append(row)
        write_result("simulate_scale", result)
    largest = rows[-1]
    met = (
        largest["load_cpu_s"] + largest["simulate_cpu_s"] <= TARGET_CPU_SECONDS
        and largest["peak_rss_mb"] <= TARGET_MEMORY_MB
    )
    openb_met = result.get("openb", {}).get("current_cpu_s", 0.0) <= TARGET_OPENB_CPU_SECONDS
    print(f"target ({TARGET_CPU_SECONDS:.0f} CPU s, {TARGET_MEMORY_MB:.0f} MB at the largest "
          f"size): {'met' if met else 'MISSED'}; openb under {TARGET_OPENB_CPU_SECONDS:.0f} CPU "
          f"s: {'met' if openb_met else 'MISSED'}; machine {machine()}")  # fmt: skip
    return 0 if met and openb_met else 1


if __name__ == "__main__":
    sys.exit(main())
