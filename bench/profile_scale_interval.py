"""One controller interval's pure part at the scale bench's size, in this process, no API
server: 2,000 nodes of bench_scale_e2e's three kinds, its 300-tenant policy, 300 ClusterQueues,
50,000 GPU pods bound to nodes and their 50,000 admitted Kueue Workloads (as Kueue's pod
integration makes them), each trimmed as the controller's watches trim it; then the
controller's `plan_interval` (parse, capacity, demand, weights, plan, report) timed in CPU seconds,
once warm, and profiled with cProfile.

    python bench/profile_scale_interval.py [--pods 50000] [--top 25]

Target (issue 20): one interval's work < 1 s CPU at 2,000 nodes / 300 tenants / 50,000 pods.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_scale_e2e import CLASSES, cluster_queue, gpu_pod, nodes, policy, tenant_class
from bench.machine import load_average
from e2e.kueue import KUEUE
from quotaguard.controller.interval_planning import PlanningMemory, plan_interval
from quotaguard.controller.trim import (
    pod_trimmer,
    trim_node,
    whole_spec_trimmer,
    workload_trimmer,
)
from quotaguard.planning.cycle import WEIGHT_HOLD_FRACTION, CycleSettings
from quotaguard.policy.model import TenantPolicy

NO_TELEMETRY = "no --prometheus-url given"

FLAVOR_OF = {"h100": "h100", "h100-1g.10gb": "h100-1g.10gb", "shared": "shared"}


def bound_pod(serial: int, tenants: int, node_names: list[str]) -> dict[str, Any]:
    pod = gpu_pod(serial, tenants, rewritten=True)
    pod["metadata"].update(uid=f"uid-{serial}", resourceVersion=str(serial))
    pod["spec"]["nodeName"] = node_names[serial % len(node_names)]
    pod["status"] = {"phase": "Running"}
    return pod


def admitted_workload(pod: dict[str, Any], tenants: int, serial: int) -> dict[str, Any]:
    name = tenant_class(serial % tenants)
    resource = CLASSES[name][0]
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {
            "name": f"pod-{pod['metadata']['name']}",
            "namespace": pod["metadata"]["namespace"],
            "uid": f"wl-{serial}",
            "resourceVersion": str(serial),
        },
        "spec": {
            "queueName": pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
            "podSets": [{"name": "main", "count": 1, "template": {"spec": pod["spec"]}}],
        },
        "status": {
            "admission": {
                "clusterQueue": pod["metadata"]["namespace"],
                "podSetAssignments": [
                    {
                        "name": "main",
                        "flavors": {resource: FLAVOR_OF[name]},
                        "resourceUsage": {resource: limits[resource]},
                        "count": 1,
                    }
                ],
            },
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {"type": "Admitted", "status": "True"},
            ],
        },
    }


def objects(tenants: int, pods: int, node_count: int, policy_model: TenantPolicy) -> list[Any]:
    node_list = nodes(node_count)
    names = [n["metadata"]["name"] for n in node_list]
    trim_pod = pod_trimmer(policy_model.gpu_resources)
    trim_workload = workload_trimmer(KUEUE)
    trim_queue = whole_spec_trimmer(KUEUE, "ClusterQueue")
    found: list[Any] = [trim_node(n) for n in node_list]
    found += [trim_queue(cluster_queue(i)) for i in range(tenants)]
    for serial in range(pods):
        pod = bound_pod(serial, tenants, names)
        found.append(trim_pod(pod))
        found.append(trim_workload(admitted_workload(pod, tenants, serial)))
    return [o for o in found if o is not None]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--tenants", type=int, default=300)
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    policy_model = TenantPolicy.model_validate(policy(args.tenants))
    cached = objects(args.tenants, args.pods, args.nodes, policy_model)
    settings = CycleSettings(mode="apply", weight_tolerance=WEIGHT_HOLD_FRACTION)
    memory = PlanningMemory()

    def plan_at(at: float) -> None:
        nonlocal memory
        memory = plan_interval(policy_model, cached, at, NO_TELEMETRY, memory, settings).memory

    now = time.time()
    plan_at(now)  # warm: the planner is built once
    runs = []
    for step in range(1, 4):
        started = time.process_time()
        plan_at(now + 5 * step)
        runs.append(time.process_time() - started)
    print(
        f"one interval's pure part, {len(cached):,} cached objects: best {min(runs):.3f} s CPU "
        f"of {', '.join(f'{r:.3f}' for r in runs)} (target < 1 s); load {load_average()[0]:.1f}"
    )
    profiler = cProfile.Profile()
    profiler.enable()
    plan_at(now + 20)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
