"""The controller's read path on a big cluster: 50,000 pods (10,000 with GPUs), 2,000 nodes.

Measures, in CPU seconds of this process:
  - the initial list of pods: paginated raw JSON (~3 KB a pod), trimmed into the cache
    (target < 10 s; json.loads is most of it);
  - watch events per second: pods without GPUs (skipped undecoded) and GPU pods;
  - one interval's pure part on the cache: parse, capacity, demand, weights, plan, report
    (target < 1 s);
and, for comparison, what the kubernetes client's model deserialisation costs for one page.

    python bench/bench_controller.py [--pods 50000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import machine, write_result
from quotaguard.controller.interval_planning import PlanningMemory, plan_interval
from quotaguard.controller.trim import pod_line_filter, pod_trimmer, trim_node
from quotaguard.controller.watch import ResourceKind, Watch
from quotaguard.planning.cycle import CycleSettings
from quotaguard.policy.loader import load_policy_file

ROOT = Path(__file__).resolve().parents[1]
POLICY = load_policy_file(ROOT / "config" / "policy.yaml")
LIST_TARGET, PLAN_TARGET = 10.0, 1.0
NAMESPACES = ["training", "research-a", "inference", "serving-x", "notebooks", "nb-1", "web"]


def pod(index: int, gpu: bool) -> dict[str, Any]:
    limits = {"cpu": "4", "memory": "16Gi"}
    if gpu:
        limits["nvidia.com/gpu" if index % 3 else "nvidia.com/mig-1g.10gb"] = "1"
    return {
        "metadata": {
            "name": f"pod-{index}",
            "namespace": NAMESPACES[index % len(NAMESPACES)],
            "uid": f"uid-{index}",
            "resourceVersion": str(index + 10),
            "labels": {"app": "x", "kueue.x-k8s.io/queue-name": "training"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x" * 1500},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": f"job-{index}",
                    "uid": f"job-uid-{index}",
                    "controller": True,
                }
            ],
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"x": {}}}}] * 4,
        },
        "spec": {
            "nodeName": f"node-{index % 2000}",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/app:1",
                    "command": ["python", "-m", "app"],
                    "env": [{"name": f"E{i}", "value": "v" * 20} for i in range(10)],
                    "resources": {"limits": limits, "requests": limits},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}] if gpu else [],
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def node(index: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"node-{index}",
            "resourceVersion": "1",
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        },
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "7", "cpu": "96"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


class Pages:
    """A list call that serves pre-encoded pages, as `_preload_content=False` would."""

    def __init__(self, items: list[dict[str, Any]], page: int = 500) -> None:
        self.pages = []
        for start in range(0, len(items), page):
            metadata = {"resourceVersion": "99"}
            if start + page < len(items):
                metadata["continue"] = str(start + page)
            self.pages.append(
                json.dumps({"metadata": metadata, "items": items[start : start + page]}).encode()
            )

    def __call__(self, **kwargs: Any) -> Any:
        index = int(kwargs.get("_continue") or 0) // 500
        return _Response(self.pages[index])


class _Response:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def cpu(work: Any) -> float:
    started = time.process_time()
    work()
    return time.process_time() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=50_000)
    args = parser.parse_args()
    gpu_share = 5
    pods = [pod(i, i % gpu_share == 0) for i in range(args.pods)]
    nodes = [node(i) for i in range(2000)]
    kind = ResourceKind(
        "pods",
        Pages(pods),
        pod_trimmer(POLICY.gpu_resources),
        keep_line=pod_line_filter(POLICY.gpu_resources),
    )
    watch = Watch(kind)
    list_seconds = cpu(watch.list_once)
    print(
        f"initial list of {args.pods} pods: {list_seconds:.2f} s CPU "
        f"({len(watch.objects())} GPU pods kept; target < {LIST_TARGET:.0f} s)"
    )

    lines = [
        json.dumps({"type": "MODIFIED", "object": p}, separators=(",", ":")).encode()
        for p in pods[:5000]
    ]
    plain = [line for line in lines if b"nvidia.com/" not in line]
    gpu = [line for line in lines if b"nvidia.com/" in line]
    for label, batch in (("without GPUs", plain), ("with GPUs", gpu)):
        seconds = cpu(lambda batch=batch: [watch._apply_line(line) for line in batch])
        print(f"watch events, pods {label}: {len(batch) / seconds:,.0f}/s")

    node_watch = Watch(ResourceKind("nodes", Pages(nodes), trim_node))
    node_watch.list_once()
    objects = node_watch.objects() + watch.objects()
    plan_seconds = cpu(
        lambda: plan_interval(
            POLICY,
            objects,
            time.time(),
            "no --prometheus-url given",
            PlanningMemory(),
            CycleSettings(mode="recommend", from_previous=True),
        )
    )
    print(
        f"one interval's pure part on {len(objects)} cached objects: {plan_seconds:.2f} s CPU "
        f"(target < {PLAN_TARGET:.0f} s)"
    )

    from kubernetes.client import ApiClient

    page = Pages(pods[:500]).pages[0].decode()
    models = cpu(lambda: ApiClient().deserialize(page, "V1PodList", "application/json"))
    raw = cpu(lambda: [pod_trimmer(POLICY.gpu_resources)(p) for p in json.loads(page)["items"]])
    print(
        f"one page of 500 pods: client models {models * 1000:.0f} ms, "
        f"json.loads + trim {raw * 1000:.0f} ms ({models / raw:.0f}x)"
    )
    write_result(
        "controller",
        {
            "pods": args.pods,
            "list_cpu_s": round(list_seconds, 3),
            "list_target_s": LIST_TARGET,
            "plan_cpu_s": round(plan_seconds, 3),
            "plan_target_s": PLAN_TARGET,
            "page_of_500": {
                "client_models_ms": round(models * 1e3, 1),
                "json_loads_and_trim_ms": round(raw * 1e3, 1),
                "ratio": round(models / raw, 1),
            },
        },
    )
    print(f"machine {machine()}")
    return 0 if list_seconds < LIST_TARGET and plan_seconds < PLAN_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
