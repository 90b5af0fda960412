"""Turn Alibaba's public GPU cluster trace (cluster-trace-gpu-v2023, "openb") into a quotaguard
policy and trace, so `quotaguard simulate` replays production traffic.

The CSVs stay upstream (github.com/alibaba/clusterdata, `cluster-trace-gpu-v2023/csv/`):

    python -m tools.openb --csv-dir DIR [--pods openb_pod_list_gpuspec33.csv]
        [--node-every 3 | --load 0.9] [--days 7] --policy out-policy.yaml --trace out-trace.yaml

The CSVs are not in this repository: keep them in a cache (e.g. ~/.cache/quotaguard-traces/openb).

What is kept and what is not:
- Nodes: every `--node-every`-th GPU node of `openb_node_list_gpu_node.csv` (3: a third of the
  inventory, so demand contends), or with `--load L` an evenly spaced share of them sized so
  that the pods' mean GPU demand over the window is L of the GPUs kept (the model mix of the
  inventory is kept; 0.9: demand nearly fills the cluster), with `nvidia.com/gpu.product` =
  the trace's model name and its GPU count. On the models that carry sharing pods
  (`--shared-models`), every `--shared-every`-th node is time-sliced 4 ways
  (`nvidia.com/gpu.shared`).
- Pods: those that ask for GPUs, created within the `--days` days that end at the last
  creation (a window: the trace spans 149 days, most pods in the last 30). A pod asking a
  fraction of one GPU (`gpu_milli` < 1000) goes to its tenant's `-share` namespace, which the
  policy sends to the time-sliced class; whole-GPU pods stay whole. `gpu_spec` (the models a
  pod may run on) becomes the pod's own `nodeSelector` when it names one model; several models
  are left to Kueue's flavor order (a relaxation: the pod could then land on a model its spec
  excludes). `uses` is the GPU share asked (gpu_milli / 1000): the trace has no DCGM activity.
- Tenants are the trace's QoS classes (LS latency-sensitive, BE best-effort, the rest
  together), each guaranteed its share of the window's GPU-hours of the inventory kept, capped
  at the whole inventory; every tenant may use every model.
- Not kept: CPU and memory (quotaguard plans GPUs), pods that never ran (`Pending` at the end
  have no deletion time: they run to the end of the window), the pod phases.
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

TENANTS = {"LS": "online", "BE": "batch"}
OTHER_TENANT = "other"
SHARED_REPLICAS = 4


# GPU memory by the trace's model names (G2 and G3 are not named publicly: taken as 80 GiB parts)
MEMORY = {"P100": "16Gi", "T4": "16Gi", "V100M16": "16Gi", "V100M32": "32Gi", "A10": "24Gi"}


def _model_class(model: str) -> str:
    return model.lower()


def _nodes(
    path: Path, keep: float, shared_models: set[str], shared_every: int
) -> list[dict[str, Any]]:
    """An evenly spaced share `keep` (0 < keep <= 1) of the GPU nodes, in file order."""
    nodes = []
    seen: Counter[str] = Counter()
    owed = 1.0 - keep  # the first node is kept
    with path.open() as handle:
        for row in csv.DictReader(handle):
            owed += keep
            if owed < 1.0 - 1e-9:
                continue
            owed -= 1.0
            model, gpus = row["model"], int(row["gpu"])
            labels = {"nvidia.com/gpu.product": model}
            seen[model] += 1
            node: dict[str, Any] = {"name": row["sn"], "labels": labels}
            if model in shared_models and seen[model] % shared_every == 0:
                labels["nvidia.com/device-plugin.config"] = "ts-4"
                node["allocatable"] = {"nvidia.com/gpu.shared": str(gpus * SHARED_REPLICAS)}
            else:
                node["allocatable"] = {"nvidia.com/gpu": str(gpus)}
            nodes.append(node)
    return nodes


def _inventory_gpus(path: Path) -> int:
    with path.open() as handle:
        return sum(int(row["gpu"]) for row in csv.DictReader(handle))


def _mean_demand(workloads: list[dict[str, Any]], horizon: float) -> float:
    """GPUs asked on average over the window; a shared pod asks one replica of a GPU."""
    seconds = 0.0
    for item in workloads:
        gpus = int(item["pod"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        share = 1.0 / SHARED_REPLICAS if item["namespace"].endswith("-share") else float(gpus)
        seconds += share * min(item["duration"], horizon - item["at"])
    return seconds / horizon if horizon else 0.0


def _pods(path: Path, days: float) -> list[dict[str, str]]:
    with path.open() as handle:
        rows = [row for row in csv.DictReader(handle) if int(row["num_gpu"] or 0) > 0]
    end = max(int(row["creation_time"]) for row in rows)
    start = end - days * 86400
    return [row for row in rows if int(row["creation_time"]) >= start]


def _workload(row: dict[str, str], start: float, horizon: float, speedup: float) -> dict[str, Any]:
    created = int(row["creation_time"])
    deleted = int(row["deletion_time"]) if row["deletion_time"] else None
    at = (created - start) / speedup
    duration = (deleted - created) if deleted is not None else horizon - at
    gpus, milli = int(row["num_gpu"]), int(row["gpu_milli"])
    tenant = TENANTS.get(row["qos"], OTHER_TENANT)
    shared = gpus == 1 and milli < 1000
    namespace = f"{tenant}-share" if shared else tenant
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": resources}]}
    models = sorted(set(filter(None, row["gpu_spec"].split("|"))))
    if len(models) == 1 and not shared:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": models[0]}
    return {
        "at": round(at),
        "duration": max(1, round(duration)),
        "namespace": namespace,
        "uses": round(min(1.0, milli / 1000), 3),
        "pod": {"spec": spec},
    }


def _policy(
    nodes: list[dict[str, Any]], workloads: list[dict[str, Any]], horizon: float
) -> dict[str, Any]:
    models = sorted({node["labels"]["nvidia.com/gpu.product"] for node in nodes})
    whole: Counter[str] = Counter()
    shared_units = 0
    for node in nodes:
        for resource, amount in node["allocatable"].items():
            if resource == "nvidia.com/gpu":
                whole[node["labels"]["nvidia.com/gpu.product"]] += int(amount)
            else:
                shared_units += int(amount)
    classes: list[dict[str, Any]] = [
        {
            "name": _model_class(model),
            "resource": "nvidia.com/gpu",
            "memory": MEMORY.get(model, "80Gi"),
            "nodeSelector": {"nvidia.com/gpu.product": model},
        }
        for model in models
    ]
    classes.append(
        {
            "name": "shared",
            "resource": "nvidia.com/gpu.shared",
            "memory": "16Gi",
            "sharing": "time-slicing",
            "replicas": SHARED_REPLICAS,
        }
    )
    hours: dict[str, float] = defaultdict(float)  # GPU-hours asked per tenant and namespace
    for item in workloads:
        gpus = int(item["pod"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        hours[item["namespace"]] += gpus * min(item["duration"], horizon - item["at"])
    names = sorted(set(TENANTS.values()) | {OTHER_TENANT})
    total = sum(hours.get(name, 0.0) for name in names) or 1.0
    total_shared = sum(hours.get(f"{name}-share", 0.0) for name in names) or 1.0
    tenants = []
    fungible = tuple(_model_class(model) for model in sorted(models, key=lambda m: -whole[m]))
    for name in names:
        share = hours.get(name, 0.0) / total
        quota = {
            _model_class(model): {
                "guaranteed": math.floor(whole[model] * share),
                "max": whole[model],
            }
            for model in models
        }
        tenants.append(
            {
                "name": name,
                "namespaces": [name],
                "queue": name,
                "localQueue": name,
                "allowedClasses": list(fungible),
                "quota": quota,
                "rewrite": [{"to": list(fungible)}],
            }
        )
        tenants.append(
            {
                "name": f"{name}-share",
                "namespaces": [f"{name}-share"],
                "queue": f"{name}-share",
                "localQueue": f"{name}-share",
                "maxGPUsPerPod": 1,
                "allowedClasses": ["shared"],
                "quota": {
                    "shared": {
                        "guaranteed": math.floor(
                            shared_units * hours.get(f"{name}-share", 0.0) / total_shared
                        ),
                        "max": shared_units,
                    }
                },
                "rewrite": [{"to": "shared"}],
            }
        )
    return {
        "apiVersion": "quotaguard.dev/v1alpha1",
        "kind": "TenantPolicy",
        "metadata": {"name": "openb"},
        "spec": {
            "backend": "kueue",
            "cohort": "openb",
            "unmatchedNamespaces": "allow",
            "gpuClasses": classes,
            "tenants": tenants,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--csv-dir", type=Path, required=True)
    parser.add_argument("--pods", default="openb_pod_list_gpuspec33.csv")
    parser.add_argument("--node-every", type=int, default=3, help="keep every Nth GPU node")
    parser.add_argument(
        "--load",
        type=float,
        default=None,
        help="instead of --node-every, keep as many nodes as make the mean GPU demand this "
        "share of them (0.9: demand nearly fills the cluster)",
    )
    parser.add_argument("--shared-models", default="T4,G2")
    parser.add_argument("--shared-every", type=int, default=3)
    parser.add_argument("--days", type=float, default=150.0, help="the window (default: all)")
    parser.add_argument(
        "--speedup",
        type=float,
        default=1.0,
        help="arrivals come this many times faster (run times kept), so demand contends",
    )
    parser.add_argument("--policy", type=Path, required=True)
    parser.add_argument("--trace", type=Path, required=True)
    args = parser.parse_args()
    node_list = args.csv_dir / "openb_node_list_gpu_node.csv"
    rows = _pods(args.csv_dir / args.pods, args.days)
    if args.load is not None and not 0 < args.load <= 10:
        parser.error(f"--load {args.load:g}: a share of the GPUs kept, above 0 (at most 10)")
    if args.node_every < 1:
        parser.error(f"--node-every {args.node_every}: at least 1")
    if not rows:
        parser.error(f"no GPU pods in the last {args.days:g} days of {args.pods}")
    start = min(int(row["creation_time"]) for row in rows)
    span = max(int(row["creation_time"]) for row in rows) - start
    horizon = span / args.speedup
    workloads = [_workload(row, start, horizon, args.speedup) for row in rows]
    workloads.sort(key=lambda item: item["at"])
    keep = 1.0 / args.node_every
    if args.load is not None:
        keep = min(1.0, _mean_demand(workloads, horizon) / args.load / _inventory_gpus(node_list))
    shared_models = set(filter(None, args.shared_models.split(",")))
    nodes = _nodes(node_list, keep, shared_models, args.shared_every)
    sizing = f"{keep:.0%} of the GPU nodes"
    if args.load is not None:
        sizing += f", sized so that demand is {args.load:g} of them"
    description = (
        f"Alibaba cluster-trace-gpu-v2023 ({args.pods}): {len(workloads)} GPU pods of the last "
        f"{args.days:g} days, arrivals {args.speedup:g}x faster, on {sizing} ({len(nodes)} nodes)"
    )
    trace = {
        "description": description,
        "horizon": f"{round(horizon)}s",
        "nodes": nodes,
        "workloads": workloads,
    }
    args.policy.write_text(yaml.safe_dump(_policy(nodes, workloads, horizon), sort_keys=False))
    with args.trace.open("w") as handle:
        yaml.safe_dump(trace, handle, sort_keys=False, default_flow_style=None, width=200)


if __name__ == "__main__":
    main()
