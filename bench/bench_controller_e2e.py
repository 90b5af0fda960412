"""The controller's initial list on a real API server with 100,000 pods, side by side with the
kubernetes client's own model deserialisation of the same list.

    python bench/bench_controller_e2e.py [--pods 100000] [--workers 20] [--workdir DIR]

Starts the e2e control plane (etcd + kube-apiserver from ~/.cache/quotaguard-e2e; see
e2e/cluster.py), creates GPU nodes and the pods (one in five holding GPUs, in the tenant
namespaces of config/policy.yaml and a few others) through the API with `--workers` concurrent
connections, then runs bench/controller_list.py in a fresh process per measurement:
quotaguard's list + trim + plan (targets: < 30 s, < 500 MB peak RSS) and the client's
`list_pod_for_all_namespaces` with models, all pods kept or GPU pods only. With `--workdir`
the etcd data is kept, and a later run with the same directory reuses the pods already there.
The latest results go to bench/results/controller_e2e.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import queue
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import cpu_seconds_of, load_average, machine, write_result
from e2e import build
from e2e.cluster import Cluster, mig_node, shared_gpu_node, whole_gpu_node

ROOT = Path(__file__).resolve().parents[1]
LIST_TARGET_S, RSS_TARGET_MB = 30.0, 500.0
NAMESPACES = [
    "training", "research-a", "research-b", "inference", "serving-x", "notebooks", "nb-1",
    "web", "batch", "data",
]  # fmt: skip
GPU_EVERY = 5
LABELS = {"client": "client models, all kept", "client-gpu-only": "client models, GPU pods"}


def pod(index: int) -> dict[str, Any]:
    """About 4 KB as listed: labels, a last-applied annotation, an owner, env, probes."""
    namespace = NAMESPACES[index % len(NAMESPACES)]
    gpu = index % GPU_EVERY == 0
    limits = {"cpu": "2", "memory": "8Gi"}
    if gpu:
        limits[("nvidia.com/mig-1g.10gb", "nvidia.com/gpu", "nvidia.com/gpu.shared")[index % 3]] = (
            "1"
        )
    container = {
        "name": "main",
        "image": "registry.example/team/app:1.4.2",
        "command": ["python", "-m", "app", "--config", "/etc/app/config.yaml"],
        "env": [{"name": f"APP_SETTING_{i}", "value": f"value-{i}-" + "v" * 24} for i in range(12)],
        "resources": {"limits": limits, "requests": dict(limits)},
        "ports": [{"containerPort": 8080, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 10},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{index:06d}",
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": f"app-{index % 97}",
                "app.kubernetes.io/part-of": "bench",
                "kueue.x-k8s.io/queue-name": namespace,
            },
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "x" * 900,
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": f"job-{index // 4}",
                    "uid": f"00000000-0000-4000-8000-{index // 4:012d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [container],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}] if gpu else [],
            "restartPolicy": "Never",
        },
    }


class Api:
    """Plain HTTPS to the API server, one connection per thread."""

    def __init__(self, cluster: Cluster) -> None:
        self.port = cluster.port
        self.context = cluster.pki.client_context()
        self.local = threading.local()

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One request; a kept-alive connection the server has closed meanwhile is reopened
        once."""
        try:
            return self._request(method, path, body)
        except (
            http.client.RemoteDisconnected,
            ConnectionResetError,
            BrokenPipeError,
            ssl.SSLEOFError,
        ):
            return self._request(method, path, body)

    def _request(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        connection = getattr(self.local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection(
                "127.0.0.1", self.port, context=self.context, timeout=60
            )
            self.local.connection = connection
        headers = {"Content-Type": "application/json"}
        payload = json.dumps(body).encode() if body is not None else None
        if method == "PATCH":
            headers["Content-Type"] = "application/merge-patch+json"
        try:
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):
            self.local.connection = None
            connection.close()
            raise
        return response.status, json.loads(data) if data else None


def count_pods(api: Api) -> int:
    status, body = api.request("GET", "/api/v1/pods?limit=1")
    assert status == 200, body
    return len(body["items"]) + int(body["metadata"].get("remainingItemCount") or 0)


def ensure_nodes(api: Api) -> None:
    nodes = (
        [whole_gpu_node(f"gpu-h100-{i}", 8) for i in range(100)]
        + [mig_node(f"gpu-mig-{i}", {"1g.10gb": 7}) for i in range(60)]
        + [shared_gpu_node(f"gpu-shared-{i}", 2, 4) for i in range(40)]
    )
    for node in nodes:
        name = node["metadata"]["name"]
        status, body = api.request("POST", "/api/v1/nodes", node)
        assert status in (201, 409), body
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
        condition = {"status": {"conditions": [ready], **node["status"]}}
        status, body = api.request("PATCH", f"/api/v1/nodes/{name}/status", condition)
        assert status == 200, body


def create_pods(api: Api, first: int, last: int, workers: int, deadline: float) -> int:
    """Create pods first..last-1 with `workers` threads; stops at the deadline; returns how
    many exist afterwards."""
    for namespace in NAMESPACES:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        status, answer = api.request("POST", "/api/v1/namespaces", body)
        assert status in (201, 409), answer
    indexes: queue.Queue[int] = queue.Queue()
    for index in range(first, last):
        indexes.put(index)
    created = [0] * workers
    errors: list[str] = []

    def work(slot: int) -> None:
        while time.monotonic() < deadline and not errors:
            try:
                index = indexes.get_nowait()
            except queue.Empty:
                return
            manifest = pod(index)
            path = f"/api/v1/namespaces/{manifest['metadata']['namespace']}/pods"
            for attempt in range(5):
                try:
                    status, answer = api.request("POST", path, manifest)
                except (OSError, http.client.HTTPException) as exc:
                    status, answer = 0, str(exc)
                if status in (201, 409):
                    created[slot] += 1
                    break
                if status not in (0, 429, 500, 503, 504) or attempt == 4:
                    errors.append(f"{status}: {answer}")
                    return
                time.sleep(0.5 * (attempt + 1))

    started = time.monotonic()
    threads = [threading.Thread(target=work, args=(slot,), daemon=True) for slot in range(workers)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        time.sleep(10)
        done = sum(created)
        elapsed = time.monotonic() - started
        print(
            f"  created {first + done:,} pods ({done / elapsed:,.0f}/s, "
            f"load {load_average()[0]:.1f})",
            flush=True,
        )
    if errors:
        raise SystemExit(f"pod creation failed: {errors[0]}")
    return count_pods(api)


def measure(cluster: Cluster, mode: str) -> dict[str, Any]:
    """One run of controller_list.py, with the CPU seconds the API server and etcd spent
    meanwhile (on this machine they share the cores with the list's reader)."""
    servers = {name: cluster.processes[name].popen for name in ("kube-apiserver", "etcd")}
    pids = {name: popen.pid for name, popen in servers.items() if popen is not None}
    cpu_before = {name: cpu_seconds_of(pid) for name, pid in pids.items()}
    load = load_average()[0]
    kubeconfig = cluster.kubeconfig
    output = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "controller_list.py"), "--kubeconfig",
         str(kubeconfig), "--mode", mode],
        capture_output=True, text=True, check=True, timeout=1800, cwd=ROOT,
    ).stdout  # fmt: skip
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    result["load_average"] = load
    for name, pid in pids.items():
        result[f"{name}_cpu_s"] = round(cpu_seconds_of(pid) - cpu_before[name], 2)
    print(f"  {json.dumps(result)}", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=20)
    parser.add_argument("--workdir", type=Path, help="keep the cluster's data here for reuse")
    parser.add_argument(
        "--create-minutes", type=float, default=20.0, help="stop creating pods after this long"
    )
    args = parser.parse_args()
    toolchain = build.toolchain()
    if toolchain.missing():
        print(f"e2e toolchain missing; run `python -m e2e.build`: {toolchain.missing()}")
        return 2
    cluster = Cluster(toolchain, workdir=args.workdir, controllers=False, kwok=False, crds=False)
    cluster.start()
    try:
        api = Api(cluster)
        ensure_nodes(api)
        existing = count_pods(api)
        creation: dict[str, Any] = {"existing": existing}
        if existing < args.pods:
            print(f"creating pods {existing:,}..{args.pods:,} with {args.workers} workers")
            started = time.monotonic()
            total = create_pods(
                api, existing, args.pods, args.workers, started + args.create_minutes * 60
            )
            seconds = time.monotonic() - started
            creation |= {
                "created": total - existing,
                "seconds": round(seconds, 1),
                "per_second": round((total - existing) / seconds, 1),
            }
        pods = count_pods(api)
        print(f"{pods:,} pods in the API server; measuring", flush=True)
        runs = [
            measure(cluster, mode)
            for mode in ("quotaguard", "client", "client-gpu-only", "quotaguard")
        ]
    finally:
        cluster.stop()
        if args.workdir is None:
            cluster.cleanup()

    ours = min((r for r in runs if r["mode"] == "quotaguard"), key=lambda r: r["list_wall_s"])
    theirs = {r["mode"]: r for r in runs if r["mode"] != "quotaguard"}
    ours_total = ours["list_wall_s"] + ours["plan_wall_s"]
    print(f"\n{pods:,} pods ({ours['kept']:,} with GPUs kept), {ours['nodes']} nodes")
    print(f"{'':28s} {'wall s':>8s} {'CPU s':>8s} {'peak RSS MB':>12s} {'API server CPU s':>17s}")
    print(
        f"{'quotaguard list+trim+plan':28s} {ours_total:8.1f} "
        f"{ours['list_cpu_s'] + ours['plan_cpu_s']:8.1f} {ours['max_rss_mb']:12.0f} "
        f"{ours.get('kube-apiserver_cpu_s', 0):17.1f}"
    )
    for mode, run in theirs.items():
        print(
            f"{LABELS[mode]:28s} "
            f"{run['list_wall_s']:8.1f} {run['list_cpu_s']:8.1f} {run['max_rss_mb']:12.0f} "
            f"{run.get('kube-apiserver_cpu_s', 0):17.1f}   "
            f"{run['list_cpu_s'] / ours['list_cpu_s']:.1f}x the CPU, "
            f"{run['max_rss_mb'] / ours['max_rss_mb']:.1f}x the memory"
        )
    ok = ours_total < LIST_TARGET_S and ours["max_rss_mb"] < RSS_TARGET_MB
    print(
        f"targets: < {LIST_TARGET_S:.0f} s and < {RSS_TARGET_MB:.0f} MB: {'ok' if ok else 'MISSED'}"
    )
    path = write_result(
        "controller_e2e",
        {"pods": pods, "creation": creation, "quotaguard": ours, "runs": runs},
    )
    print(f"wrote {path.relative_to(ROOT)}; machine {machine()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
