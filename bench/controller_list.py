"""One initial list of every pod (and node) from a real API server, in a process of its own so
that its peak memory is its own; prints one JSON line.

    python bench/controller_list.py --kubeconfig K --mode quotaguard
    python bench/controller_list.py --kubeconfig K --mode client
    python bench/controller_list.py --kubeconfig K --mode client-gpu-only

quotaguard: the controller's own path (`wanted_sources` -> `Watch.list_once`: raw JSON pages,
trimmed, non-GPU pods dropped) and then one interval's pure part (`plan_interval`: parse,
capacity, demand, plan, report).
client: the kubernetes client's `CoreV1Api.list_pod_for_all_namespaces` with its models, in
the same pages and with the same field selector, every V1Pod kept (what a cache built on the
client holds). client-gpu-only: the same, keeping only pods that hold GPUs.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quotaguard.controller.interval_planning import PlanningMemory, plan_interval
from quotaguard.controller.kube_clients import KubeClients, ServedGroups
from quotaguard.controller.watch import Watch
from quotaguard.controller.watch_sources import TERMINATED_PODS_EXCLUDED, wanted_sources
from quotaguard.kube.client import api_client
from quotaguard.planning.cycle import CycleSettings
from quotaguard.policy.loader import load_policy_file

ROOT = Path(__file__).resolve().parents[1]
PAGE = 500


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def quotaguard_list(kubeconfig: str) -> dict[str, Any]:
    policy = load_policy_file(ROOT / "config" / "policy.yaml")
    clients = KubeClients.connect(kubeconfig)
    sources = wanted_sources(clients, policy, ServedGroups(kueue=None, volcano=False))
    watches = {name: Watch(source.kind) for name, source in sources.items()}
    started = time.perf_counter(), time.process_time()
    for watch in watches.values():
        watch.list_once()
    listed = time.perf_counter(), time.process_time()
    objects = watches["nodes"].objects() + watches["pods"].objects()
    settings = CycleSettings(mode="recommend", from_previous=True)
    planned = plan_interval(
        policy, objects, time.time(), "no --prometheus-url given", PlanningMemory(), settings
    )
    the_plan = planned.cycle.plan
    planned = time.perf_counter(), time.process_time()
    return {
        "list_wall_s": listed[0] - started[0],
        "list_cpu_s": listed[1] - started[1],
        "plan_wall_s": planned[0] - listed[0],
        "plan_cpu_s": planned[1] - listed[1],
        "kept": len(watches["pods"].objects()),
        "nodes": len(watches["nodes"].objects()),
        "tenants_planned": len(the_plan.tenants),
    }


def holds_gpus(pod: Any) -> bool:
    for container in (pod.spec.containers or []) + (pod.spec.init_containers or []):
        resources = container.resources
        for amounts in (resources.limits or {}, resources.requests or {}):
            if any(name.startswith("nvidia.com/") for name in amounts):
                return True
    return False


def client_list(kubeconfig: str, gpu_only: bool) -> dict[str, Any]:
    from kubernetes import client

    api = client.CoreV1Api(api_client(kubeconfig))
    cache: dict[str, Any] = {}
    listed = 0
    started = time.perf_counter(), time.process_time()
    token = None
    while True:
        kwargs: dict[str, Any] = {"limit": PAGE, "field_selector": TERMINATED_PODS_EXCLUDED}
        if token:
            kwargs["_continue"] = token
        page = api.list_pod_for_all_namespaces(**kwargs)
        for pod in page.items:
            listed += 1
            if not gpu_only or holds_gpus(pod):
                cache[f"{pod.metadata.namespace}/{pod.metadata.name}"] = pod
        token = page.metadata._continue
        if not token:
            break
    done = time.perf_counter(), time.process_time()
    return {
        "list_wall_s": done[0] - started[0],
        "list_cpu_s": done[1] - started[1],
        "listed": listed,
        "kept": len(cache),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--mode", choices=("quotaguard", "client", "client-gpu-only"))
    args = parser.parse_args()
    rss_at_start = max_rss_mb()
    if args.mode == "quotaguard":
        result = quotaguard_list(args.kubeconfig)
    else:
        result = client_list(args.kubeconfig, gpu_only=args.mode == "client-gpu-only")
    result |= {"mode": args.mode, "rss_at_start_mb": rss_at_start, "max_rss_mb": max_rss_mb()}
    print(
        json.dumps({key: round(v, 3) if isinstance(v, float) else v for key, v in result.items()})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
