"""`simulate` at cluster scale: 1,500 nodes of seven GPU models, 10,000 workloads, every arm.

    python bench/bench_simulate_scale.py [--nodes 100 500 1500] [--workloads-per-node 6.67]

For each size a fresh process builds the inventory (seven models in equal numbers of nodes,
8 GPUs per node for the big models, 4 for the small), a policy of one GPU class per model
and two tenants per model (a training tenant with gangs of 8-GPU pods and a serving tenant
with 1- and 2-GPU pods; guarantees 30% and 20% of the model, max the whole model), and a
one-day trace with the same load per node at every size (10,000 workloads at 1,500 nodes),
then runs `simulate()` with every arm of `ARMS`. Printed per size: CPU seconds of loading and
of simulating, peak memory, and each arm's utilisation beside the bound. Target (issue 15):
1,500 nodes and 10,000 workloads in under 60 CPU seconds on one core and under 1 GB.
"""

from __future__ import annotations

import argparse
import json
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

TARGET_CPU_SECONDS = 60.0
TARGET_MEMORY_MB = 1024.0
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


def one_size(nodes: int, count: int) -> dict[str, Any]:
    """Build, load and simulate one size in this process; its figures."""
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 500, 1500])
    parser.add_argument("--workloads-per-node", type=float, default=10_000 / 1500)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one size
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one_size(args.one, round(args.one * args.workloads_per_node))))
        return 0
    rows = []
    for nodes in args.nodes:
        command = [sys.executable, __file__, "--one", str(nodes)]
        command += ["--workloads-per-node", str(args.workloads_per_node)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out))
        row = rows[-1]
        arms = ", ".join(f"{arm} {u:.1%}" for arm, u in row["utilization"].items())
        print(
            f"{row['nodes']:>5} nodes {row['gpus']:>6,} GPUs {row['workloads']:>6,} workloads: "
            f"load {row['load_cpu_s']:.1f} CPU s, simulate {row['simulate_cpu_s']:.1f} CPU s "
            f"({row['simulate_wall_s']:.1f} s wall), peak {row['peak_rss_mb']:.0f} MB; "
            f"{arms}; bound {row['bound']:.1%}",
            flush=True,
        )
    largest = rows[-1]
    met = (
        largest["load_cpu_s"] + largest["simulate_cpu_s"] <= TARGET_CPU_SECONDS
        and largest["peak_rss_mb"] <= TARGET_MEMORY_MB
    )
    targets = {"target_cpu_s": TARGET_CPU_SECONDS, "target_memory_mb": TARGET_MEMORY_MB}
    write_result("simulate_scale", {**targets, "sizes": rows})
    print(f"target ({TARGET_CPU_SECONDS:.0f} CPU s, {TARGET_MEMORY_MB:.0f} MB): "
          f"{'met' if met else 'MISSED'}; machine {machine()}")  # fmt: skip
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
