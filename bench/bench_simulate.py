"""How fast `quotaguard simulate` replays a 10,000-workload trace (both arms).

    python bench/bench_simulate.py [--days 5] [--repeat 3]

The trace is the sample day (config/traces/day.yaml) repeated over consecutive days, so the
load and its contention are realistic; five days give about 10,000 workloads. Printed: wall and
CPU seconds of each step (best of --repeat), and ratios against baselines measured in the same
run: admission with the verdict cache against admission without it, each arm against the
admission pass, the whole simulation against the target, with the default preemption (the
sample ClusterQueues' reclaim) and without it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import machine, write_result
from quotaguard.policy.loader import load_policy_file
from quotaguard.simulate.arm_replay import run_arm, setup
from quotaguard.simulate.arrivals import AdmissionCache, arrivals, verdict_of
from quotaguard.simulate.preemption import PRESETS
from quotaguard.simulate.simulation import simulate
from quotaguard.simulate.trace import Trace, load_trace

ROOT = Path(__file__).parents[1]
POLICY = ROOT / "config" / "policy.yaml"
DAY = ROOT / "config" / "traces" / "day.yaml"
DAY_SECONDS = 86400.0
# "A 10,000-workload trace simulates (both arms) in seconds." Judged on CPU seconds: the
# machine is shared, so wall time also measures the neighbours.
TARGET_SECONDS = 10.0
UNCACHED_SAMPLE = 300


def timed(step: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """Best wall and CPU seconds over `repeat` runs, and the last result."""
    best_wall = best_cpu = float("inf")
    result = None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = step()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best_wall, best_cpu, result


def days_of(day: Trace, days: int) -> Trace:
    workloads = tuple(
        dataclasses.replace(w, index=n * len(day.workloads) + w.index, at=w.at + n * DAY_SECONDS)
        for n in range(days)
        for w in day.workloads
    )
    return dataclasses.replace(day, workloads=workloads, horizon=days * DAY_SECONDS)


def as_json_file(trace: Trace, directory: Path) -> Path:
    document = {
        "horizon": trace.end,
        "nodes": [
            {
                "name": n.name,
                "labels": dict(n.labels),
                "allocatable": {k: str(v) for k, v in n.allocatable.items()},
            }
            for n in trace.nodes
        ],
        "workloads": [
            {
                "at": w.at,
                "duration": w.duration,
                "namespace": w.namespace,
                "count": w.count,
                "every": w.every,
                "pod": w.manifest,
            }
            for w in trace.workloads
        ],
    }
    path = directory / "week.json"
    path.write_text(json.dumps(document))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    policy = load_policy_file(POLICY)
    gpus = policy.gpu_resources
    rows: list[tuple[str, float, float, str]] = []

    wall, cpu, day = timed(lambda: load_trace(DAY, gpu_resources=gpus), args.repeat)
    rows.append(("load day.yaml (YAML, C loader)", wall, cpu, f"{day.size:,} workloads"))
    trace = days_of(day, args.days)
    with tempfile.TemporaryDirectory() as directory:
        path = as_json_file(trace, Path(directory))
        wall, cpu, _ = timed(lambda: load_trace(path, gpu_resources=gpus), args.repeat)
        rows.append((f"load {args.days}-day trace (JSON)", wall, cpu, f"{trace.size:,} workloads"))

    sample = [(w.manifest, w.namespace) for w in trace.workloads[:UNCACHED_SAMPLE]]
    wall, cpu, _ = timed(lambda: [verdict_of(policy, m, ns) for m, ns in sample], 1)
    uncached_each = cpu / len(sample)
    rows.append(
        (
            f"admission without cache ({len(sample)} workloads)",
            wall,
            cpu,
            f"{1e3 * uncached_each:.2f} ms each",
        )
    )
    cache = AdmissionCache()
    wall, cpu, admitted = timed(
        lambda: arrivals(policy, trace, cache=AdmissionCache()), args.repeat
    )
    arrivals(policy, trace, cache=cache)
    admission_cpu = cpu
    rows.append(
        (
            "admission pass, verdict cache",
            wall,
            cpu,
            f"{uncached_each * trace.size / cpu:.0f}x faster than uncached; "
            f"{cache.misses} distinct of {trace.size:,}",
        )
    )
    shared = setup(policy, trace, admitted)
    for arm in ("static", "dynamic"):
        wall, cpu, run = timed(lambda arm=arm: run_arm(shared, arm), args.repeat)  # type: ignore[misc]
        note = f"{cpu / admission_cpu:.1f}x the admission pass"
        if arm == "dynamic":
            note += f"; {run.plans:,} controller ticks"
        rows.append((f"{arm} arm", wall, cpu, note))
    wall, cpu, result = timed(lambda: simulate(policy, trace), args.repeat)
    total_cpu = cpu
    rows.append(
        (
            "simulate(): admission + both arms + reference",
            wall,
            cpu,
            f"{total_cpu / TARGET_SECONDS:.0%} of the {TARGET_SECONDS:.0f} CPU-second target",
        )
    )
    never = PRESETS["never"]
    wall, cpu, _ = timed(lambda: simulate(policy, trace, preemption=never), args.repeat)
    never_cpu = cpu
    rows.append(
        (
            "simulate(), --preemption never",
            wall,
            cpu,
            f"preemption costs {total_cpu / cpu:.2f}x",
        )
    )
    width = max(len(row[0]) for row in rows)
    print(f"quotaguard simulate benchmark: {trace.size:,} workloads over {args.days} days, "
          f"best of {args.repeat}")  # fmt: skip
    print(f"{'step'.ljust(width)}  {'wall s':>7}  {'cpu s':>7}  notes")
    for name, step_wall, step_cpu, note in rows:
        print(f"{name.ljust(width)}  {step_wall:7.3f}  {step_cpu:7.3f}  {note}")
    static, dynamic = result.static.overall, result.dynamic.overall
    print(
        f"result: utilisation {static.utilization:.1%} -> {dynamic.utilization:.1%}, "
        f"p95 wait {static.p95_wait / 60:.0f}m -> {dynamic.p95_wait / 60:.0f}m, "
        f"preempted {static.preempted} -> {dynamic.preempted} "
        f"({static.lost_gpu_seconds / 3600:.1f} -> {dynamic.lost_gpu_seconds / 3600:.1f} "
        "GPU-hours lost)"
    )
    write_result(
        "simulate",
        {
            "workloads": trace.size,
            "target_cpu_s": TARGET_SECONDS,
            "steps": [
                {"step": name, "wall_s": round(w, 3), "cpu_s": round(c, 3), "note": note}
                for name, w, c, note in rows
            ],
            "simulate_cpu_s": round(total_cpu, 3),
            "simulate_without_preemption_cpu_s": round(never_cpu, 3),
            "admission_cpu_s": round(admission_cpu, 3),
            "preempted": {"static": static.preempted, "dynamic": dynamic.preempted},
            "gpu_hours_lost": {
                "static": round(static.lost_gpu_seconds / 3600, 2),
                "dynamic": round(dynamic.lost_gpu_seconds / 3600, 2),
            },
        },
    )
    print(f"machine {machine()}")
    return 0 if total_cpu <= TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
