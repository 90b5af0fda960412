"""The whole product at cluster scale through the real API server: GPU nodes of three kinds,
hundreds of tenants, the real Kueue controller with its webhooks, quotaguard's webhook and two
controller replicas, pods arriving and leaving.

    python bench/bench_scale_e2e.py [--nodes 2000] [--tenants 300] [--pods 50000]
        [--rate 100] [--churn-seconds 60] [--create-minutes 10] [--workers 16]
        [--webhooks 2] [--front reuse-port|round-robin] [--webhook-nice 0]
        [--low-rate 10] [--burst-pods 10] [--profile]

Phases, each bounded in time and count, everything on 127.0.0.1:
1. Cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (from
   ~/.cache/quotaguard-e2e), `--nodes` kwok GPU nodes (60% whole H100 x8, 30% MIG 1g.10gb x7,
   10% time-sliced 2x4), a policy of `--tenants` tenants (one class each, in turn), their
   ClusterQueues and LocalQueues, Kueue v0.17.0 with its webhooks, `--webhooks` quotaguard
   webhook replicas (two: `clientConfig.url` names one address, so the replicas listen on one
   port with `--webhook-reuse-port` and the kernel spreads the API server's connections over
   them as kube-proxy would; `--front round-robin`: bench/round_robin.py, a user-space proxy)
   and two controller replicas (`--components controller,reports`, one Lease).
2. Steady state: bare GPU pods (no queue label) created in the tenants' namespaces with
   `--workers` connections for at most `--create-minutes` or `--pods`, through quotaguard's
   rewrite and stamp and Kueue's gate; Kueue admits within quota, the scheduler binds.
3. Churn: pods created at `--rate` per second and each deleted 20 s later, for
   `--churn-seconds`, once with quotaguard's webhooks registered and once with them removed
   (and, with quotaguard's webhooks, once more at `--low-rate`, and with `--webhook-nice` once
   with the replicas at that CPU priority); the API server's own histograms give the added
   admission latency (per quotaguard webhook,
   `apiserver_admission_webhook_admission_duration_seconds`, Kueue's webhooks in the same
   window as the yardstick, and pod create with against without) beside the replicas' own
   answer time; the leader's writes, plan CPU, CPU and wall seconds are sampled per interval,
   its watch events per second counted, and the time its pod watch takes to see the last
   create measured.
4. Convergence: 10% of the nodes cordoned, then uncordoned, then the burst tenant (no pods
   before) asks what it holds (at least `--burst-pods` x 4 GPUs) and then as much again;
   from the first plan on the new capacity (or demand), the intervals (plans) until one plans
   every queue at its target,
   against what the step limit implies (`follow_change`), whether the writes landed, and every
   ClusterQueue version read back from etcd against the invariants; each direction is bounded
   by CONVERGENCE_BUDGET_S and says `timed_out` when it ran out.
5. Leadership: the leading controller killed with SIGKILL mid-churn; time until the other
   leads, writes before and after, invariants over every version.
The latest results go to bench/results/scale_e2e.json.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import json
import math
import os
import queue
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from bench.bench_controller_e2e import Api
from bench.machine import cpu_seconds_of, load_average, machine, max_rss_mb_of, write_result
from bench.pyspy_profile import Profile
from e2e import build
from e2e.cluster import (
    Cluster,
    QuotaguardServer,
    free_port,
    mig_node,
    shared_gpu_node,
    tls_ready,
    wait_until,
    whole_gpu_node,
)
from e2e.kueue import (
    KUEUE,
    KUEUE_SAMPLES,
    POLICY,
    ControllerProcess,
    EtcdHistory,
    Version,
    gpu_quotas,
    history_problems,
    lease_holder,
    report_capacity,
    report_rows,
    sample_documents,
    serve_controller,
    start_kueue,
    step_allowed,
    write_document,
)

ROOT = Path(__file__).resolve().parents[1]
LEASE_NAMESPACE = "quotaguard-system"
INTERVAL_S = 5
PROFILES = Path(tempfile.gettempdir()) / "quotaguard-scale-profiles"  # raw stacks, kept after
ADDED_P99_TARGET_MS, RSS_TARGET_MB, INTERVAL_CPU_TARGET_S = 5.0, 500.0, 1.0
# class name -> (resource, guaranteed per tenant, max per tenant)
CLASSES = {
    "h100": ("nvidia.com/gpu", 20, 200),
    "h100-1g.10gb": ("nvidia.com/mig-1g.10gb", 8, 80),
    "shared": ("nvidia.com/gpu.shared", 3, 30),
}
FLAVORS = ("h100", "h100-1g.10gb", "h100-3g.40gb", "shared")
GPU_RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-3g.40gb",
    "nvidia.com/gpu.shared",
)


# --------------------------------------------------------------------------------------------
# What the cluster holds


def lease_seconds(cluster: Cluster, field: str) -> float:
    """A MicroTime of the controller's Lease (e.g. renewTime) as POSIX seconds: the replicas and
    this bench share one wall clock, so it is comparable with the next holder's acquireTime."""
    found = cluster.kubectl(
        "get", "lease", "quotaguard-controller", "-n", LEASE_NAMESPACE, "-o", "json"
    )
    stamp = json.loads(found.stdout)["spec"][field]
    return (
        datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
        .replace(tzinfo=datetime.UTC)
        .timestamp()
    )


def tenant_class(index: int) -> str:
    return tuple(CLASSES)[index % len(CLASSES)]


def tenant_name(index: int) -> str:
    return f"t{index:03d}"


def nodes(count: int) -> list[dict[str, Any]]:
    whole, mig = round(count * 0.6), round(count * 0.3)
    return (
        [whole_gpu_node(f"h100-{i:04d}", 8) for i in range(whole)]
        + [mig_node(f"mig-{i:04d}", {"1g.10gb": 7}) for i in range(mig)]
        + [shared_gpu_node(f"shared-{i:04d}", 2, 4) for i in range(count - whole - mig)]
    )


def policy(tenants: int) -> dict[str, Any]:
    """The sample policy's classes, `tenants` tenants with one class each, short intervals."""
    document: dict[str, Any] = yaml.safe_load(POLICY.read_text())
    spec = document["spec"]
    spec["rebalance"].update({"mode": "apply", "interval": f"{INTERVAL_S}s", "demandWindow": "30s"})
    spec["tenants"] = [
        {
            "name": tenant_name(i),
            "namespaces": [tenant_name(i)],
            "queue": tenant_name(i),
            "localQueue": tenant_name(i),
            "weight": 1 + i % 3,
            "maxGPUsPerPod": 8,
            "allowedClasses": [tenant_class(i)],
            "quota": {
                tenant_class(i): {
                    "guaranteed": CLASSES[tenant_class(i)][1],
                    "max": BURST_MAX if i == BURST_TENANT else CLASSES[tenant_class(i)][2],
                }
            },
            "rewrite": [{"to": tenant_class(i)}],
        }
        for i in range(tenants)
    ]
    return document


def cluster_queue(index: int) -> dict[str, Any]:
    """A tenant's ClusterQueue at its guarantee, every GPU resource in every flavor."""
    resource, guaranteed, most = CLASSES[tenant_class(index)]
    own_flavor = tenant_class(index)

    def quota(flavor: str, name: str) -> dict[str, Any]:
        mine = flavor == own_flavor and name == resource
        return {
            "name": name,
            "nominalQuota": guaranteed if mine else 0,
            "borrowingLimit": most - guaranteed if mine else 0,
            "lendingLimit": 0,
        }

    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": tenant_name(index), "labels": {"quotaguard.dev/tenant": "bench"}},
        "spec": {
            "cohortName": "gpu-pool",
            "namespaceSelector": {},
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": list(GPU_RESOURCES),
                    "flavors": [
                        {"name": f, "resources": [quota(f, r) for r in GPU_RESOURCES]}
                        for f in FLAVORS
                    ],
                }
            ],
        },
    }


def local_queue(index: int) -> dict[str, Any]:
    name = tenant_name(index)
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": name},
        "spec": {"clusterQueue": name},
    }


BURST_TENANT = 0  # no pods but its own: the demand phase doubles what it asks for (h100)
BURST_POD_GPUS = 4
BURST_MAX = 2000  # its max never binds: the demand phase measures demand, not the ceiling


def pod_tenant(serial: int, tenants: int) -> int:
    """The tenant of the steady-state and churn pod `serial`: every tenant but the burst one,
    in turn."""
    return 1 + serial % (tenants - 1)


def gpu_pod(
    serial: int,
    tenants: int,
    *,
    rewritten: bool = False,
    tenant: int | None = None,
    gpus: int | None = None,
) -> dict[str, Any]:
    """A bare GPU pod as a user writes it (`nvidia.com/gpu`, no queue label), or, `rewritten`,
    as quotaguard's webhook leaves it (the class resource, its nodeSelector, the queue label):
    the baseline without quotaguard's webhooks gives Kueue the same work. `tenant` and `gpus`
    default to the steady state's round of tenants and sizes."""
    tenant = pod_tenant(serial, tenants) if tenant is None else tenant
    name = tenant_class(tenant)
    if gpus is None:
        gpus = 1 if name != "h100" else (1, 2, 4)[serial % 3]
    resource = CLASSES[name][0] if rewritten else "nvidia.com/gpu"
    metadata: dict[str, Any] = {"name": f"p{serial:07d}", "namespace": tenant_name(tenant)}
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.example/team/app:1",
                "resources": {"limits": {resource: str(gpus)}},
            }
        ],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
    }
    if rewritten:
        metadata["labels"] = {"kueue.x-k8s.io/queue-name": tenant_name(tenant)}
        if name == "h100":
            spec["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


# --------------------------------------------------------------------------------------------
# Reading numbers


def scrape(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        text: str = response.read().decode()
        return text


def apiserver_metrics(api: Api) -> str:
    connection = http.client.HTTPSConnection("127.0.0.1", api.port, context=api.context, timeout=30)
    try:
        connection.request("GET", "/metrics")
        return connection.getresponse().read().decode()
    finally:
        connection.close()


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    found = []
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and match.group(1) == name:
            labels = dict(LABEL.findall(match.group(2) or ""))
            found.append((labels, float(match.group(3))))
    return found


def histogram(
    text: str, name: str, keep: Callable[[Mapping[str, str]], bool]
) -> dict[float, float]:
    """Cumulative bucket counts (le -> count) summed over the series `keep` selects."""
    buckets: dict[float, float] = {}
    for labels, value in samples(text, f"{name}_bucket"):
        if keep(labels):
            le = math.inf if labels["le"] == "+Inf" else float(labels["le"])
            buckets[le] = buckets.get(le, 0.0) + value
    return buckets


def minus(after: dict[float, float], before: dict[float, float]) -> dict[float, float]:
    return {le: count - before.get(le, 0.0) for le, count in after.items()}


def quantile(buckets: dict[float, float], q: float) -> float | None:
    """Prometheus' histogram_quantile over cumulative buckets (linear inside a bucket)."""
    ordered = sorted(buckets.items())
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower_le, lower_count = 0.0, 0.0
    for le, count in ordered:
        if count >= rank:
            if math.isinf(le):
                return lower_le
            span = count - lower_count
            return lower_le + (le - lower_le) * ((rank - lower_count) / span if span else 1)
        lower_le, lower_count = le, count
    return None


def counter(text: str, name: str, keep: Callable[[Mapping[str, str]], bool] = bool) -> float:
    return sum(v for labels, v in samples(text, name) if keep(labels) or not labels)


# --------------------------------------------------------------------------------------------
# Load


class Churn:
    """Creates pods at a rate with a pool of workers and deletes each `lifetime` s later."""

    def __init__(self, api: Api, tenants: int, *, workers: int, first_serial: int) -> None:
        self.api, self.tenants, self.workers = api, tenants, workers
        self.serial = first_serial
        self.lock = threading.Lock()
        self.statuses: dict[int, int] = {}
        self.latencies: list[float] = []
        self.to_delete: queue.Queue[tuple[float, str, str]] = queue.Queue()
        self.rewritten = False
        self.newest_version = 0

    def next_serial(self) -> int:
        with self.lock:
            self.serial += 1
            return self.serial

    def _count(self, status: int) -> None:
        with self.lock:
            self.statuses[status] = self.statuses.get(status, 0) + 1

    def _created_at(self, body: Any) -> None:
        """Keep the newest resourceVersion a create answered with: once the controller's pod
        watch has seen it, its cache holds every pod created so far."""
        version = ((body or {}).get("metadata") or {}).get("resourceVersion", "")
        if str(version).isdigit():
            with self.lock:
                self.newest_version = max(self.newest_version, int(version))

    def post(self, manifest: dict[str, Any]) -> int:
        """Create one pod; its status is counted, its latency and resourceVersion kept; returns
        the status (0: no answer)."""
        namespace = manifest["metadata"]["namespace"]
        t0 = time.monotonic()
        try:
            status, body = self.api.request(
                "POST", f"/api/v1/namespaces/{namespace}/pods", manifest
            )
        except OSError:
            status, body = 0, None
        self._count(status)
        if status == 201:
            self._created_at(body)
        with self.lock:
            self.latencies.append(time.monotonic() - t0)
        return status

    def create(
        self, *, rate: float | None, seconds: float, limit: int, lifetime: float | None
    ) -> int:
        """Create pods for `seconds` (at most `limit`; `rate` per second, or as fast as the
        workers go); returns how many were created."""
        deadline = time.monotonic() + seconds
        created = [0]
        started = time.monotonic()

        def work(slot: int) -> None:
            while time.monotonic() < deadline:
                with self.lock:
                    if created[0] >= limit:
                        return
                    index = created[0]
                    created[0] += 1
                if rate is not None:
                    due = started + index / rate
                    pause = due - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                manifest = gpu_pod(self.next_serial(), self.tenants, rewritten=self.rewritten)
                if self.post(manifest) == 201 and lifetime is not None:
                    metadata = manifest["metadata"]
                    self.to_delete.put(
                        (time.monotonic() + lifetime, metadata["namespace"], metadata["name"])
                    )

        threads = [
            threading.Thread(target=work, args=(s,), daemon=True) for s in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        reported = time.monotonic()
        while any(t.is_alive() for t in threads):
            time.sleep(0.2)
            if time.monotonic() - reported > 10:
                reported = time.monotonic()
                print(f"    {created[0]:,} pods sent, load {load_average()[0]:.1f}", flush=True)
        return int(sum(v for k, v in self.statuses.items() if k == 201))

    def delete_due(self, until: float) -> int:
        """Delete the pods whose time has come, until `until` (monotonic); returns how many."""
        deleted = 0
        while time.monotonic() < until:
            try:
                due, namespace, name = self.to_delete.get(timeout=0.5)
            except queue.Empty:
                continue
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(min(pause, max(until - time.monotonic(), 0)))
            try:
                status, _ = self.api.request(
                    "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}?gracePeriodSeconds=0"
                )
            except OSError:
                status = 0
            deleted += status in (200, 202)
        return deleted


# --------------------------------------------------------------------------------------------
# Processes


class Watched:
    """CPU and peak memory of one process, sampled at the start and end of a phase."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu = cpu_seconds_of(pid)

    def since(self) -> dict[str, float]:
        return {
            "cpu_s": round(cpu_seconds_of(self.pid) - self.cpu, 2),
            "peak_rss_mb": round(max_rss_mb_of(self.pid), 1),
        }


# What the bench reads of the controller's metrics, asked for by name: a full scrape at 300
# tenants renders thousands of quota series (~0.2 s of the controller's CPU each), and polled
# every half second it was most of the CPU the bench then measured.
POLLED = (
    "quotaguard_controller_intervals_total",
    "quotaguard_queue_writes_total",
    "quotaguard_controller_plan_cpu_seconds_total",
    "quotaguard_watch_events_total",
    "quotaguard_watch_resource_version",
)


def controller_metrics(controller: ControllerProcess) -> str:
    query = "&".join(f"name[]={name}" for name in POLLED)
    return scrape(f"{controller.url}/metrics?{query}")


def answered(webhook: QuotaguardServer) -> float:
    """Admission requests this webhook replica has answered so far."""
    return counter(scrape(f"{webhook.http_url}/metrics"), "quotaguard_admission_requests_total")


def front_port(cluster: Cluster, webhooks: list[QuotaguardServer]) -> int:
    """Where the API server calls the webhook: the one replica's port, or a loopback
    round-robin over the replicas' ports (what the Service and kube-proxy do in a cluster)."""
    if len(webhooks) == 1:
        return webhooks[0].webhook_port
    port = free_port()
    argv = [sys.executable, str(ROOT / "bench" / "round_robin.py"), "--listen", str(port)]
    argv += ["--to", ",".join(str(w.webhook_port) for w in webhooks)]
    process = cluster.start_process("round-robin", argv, cwd=ROOT)

    def listening() -> bool:
        process.check_alive()
        return tls_ready(port, cluster.pki.ca_file)  # a TLS handshake through it, with a replica

    wait_until(listening, timeout=30, what="the round-robin listening")
    return port


def leader_of(controllers: list[ControllerProcess]) -> ControllerProcess | None:
    for controller in controllers:
        if controller.process.alive() and controller.leader():
            return controller
    return None


def intervals(text: str) -> float:
    return counter(
        text,
        "quotaguard_controller_intervals_total",
        lambda labels: labels.get("outcome") == "planned",
    )


def writes(text: str) -> float:
    return counter(
        text,
        "quotaguard_queue_writes_total",
        lambda labels: labels.get("result") in ("updated", "created"),
    )


def watch_events(text: str) -> dict[str, float]:
    """Watch events the controller has decoded so far, per resource."""
    return {
        labels["resource"]: value
        for labels, value in samples(text, "quotaguard_watch_events_total")
        if "resource" in labels
    }


def watch_version(text: str, resource: str = "pods") -> float | None:
    """The last resourceVersion the controller's watch of `resource` has seen."""
    found = [
        value
        for labels, value in samples(text, "quotaguard_watch_resource_version")
        if labels.get("resource") == resource
    ]
    return found[0] if found else None


CATCH_UP_BUDGET_S = 120.0


def caught_up(controller: ControllerProcess, version: int) -> float | None:
    """Seconds until the controller's pod watch has seen resourceVersion `version` (what the
    last create answered), polled every 0.1 s; None past CATCH_UP_BUDGET_S."""
    started = time.monotonic()
    while time.monotonic() - started < CATCH_UP_BUDGET_S:
        try:
            seen = watch_version(controller_metrics(controller))
        except OSError:
            seen = None
        if seen is not None and seen >= version:
            return round(time.monotonic() - started, 2)
        time.sleep(0.1)
    return None


def plan_cpu(text: str) -> float:
    """CPU seconds the controller's planning thread has spent planning so far."""
    return counter(text, "quotaguard_controller_plan_cpu_seconds_total")


class IntervalSampler:
    """The leading controller's intervals as they happen: for each planned interval, the queue
    writes it made, its planning CPU seconds (the planning thread's own) and the controller's
    CPU seconds and wall seconds since the interval before
    (its metrics and /proc polled every `period` s; CPU includes handling watch events between
    plans, which is part of what an interval costs)."""

    def __init__(self, controller: ControllerProcess, period: float = 0.5) -> None:
        self.controller, self.period = controller, period
        self.pid = controller.process.popen.pid if controller.process.popen else None
        self.rows: list[dict[str, float]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> IntervalSampler:
        self.thread.start()
        return self

    def _poll(self) -> tuple[float, float, float, float, float] | None:
        try:
            text = controller_metrics(self.controller)
            cpu = cpu_seconds_of(self.pid) if self.pid is not None else 0.0
        except (OSError, ValueError):
            return None  # stopped or killed: the rows so far stand
        return intervals(text), writes(text), cpu, time.monotonic(), plan_cpu(text)

    def _run(self) -> None:
        last = self._poll()
        while last is not None and not self.stopping.wait(self.period):
            now = self._poll()
            if now is None:
                return
            if now[0] > last[0]:
                self.rows.append(
                    {
                        "intervals": now[0] - last[0],
                        "writes": now[1] - last[1],
                        "cpu_s": round(now[2] - last[2], 3),
                        "seconds": round(now[3] - last[3], 2),
                        "plan_cpu_s": round(now[4] - last[4], 3),
                    }
                )
                last = now

    def stop(self) -> dict[str, Any]:
        self.stopping.set()
        self.thread.join(10)
        return per_interval(self.rows)


def per_interval(rows: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """Writes, CPU and wall seconds per interval: median and most, and every row (a row that
    spans two plans, when a poll missed one, is counted as two intervals of half each)."""

    def spread(key: str) -> dict[str, float | None]:
        values = sorted(
            row[key] / row["intervals"] for row in rows for _ in range(int(row["intervals"]))
        )
        if not values:
            return {"median": None, "max": None}
        return {"median": round(values[len(values) // 2], 3), "max": round(values[-1], 3)}

    return {
        "intervals": sum(row["intervals"] for row in rows),
        "writes": spread("writes"),
        "cpu_s": spread("cpu_s"),
        "plan_cpu_s": spread("plan_cpu_s"),
        "seconds": spread("seconds"),
        "rows": list(rows),
    }


def webhook_latencies(
    before: str, after: str, created: int, owner: str = "quotaguard"
) -> tuple[dict[str, dict[str, Any]], float | None]:
    """Per webhook whose name holds `owner` (the histogram's `name` label: quotaguard's, or
    ".kb.io" for Kueue's), from the API server's own
    `apiserver_admission_webhook_admission_duration_seconds` over a phase: calls, p50 and p99;
    and the added p99 per Pod that implies: the sum over the webhooks of p99 x calls per Pod
    (a Pod create calls each in turn; a sum of p99s is an upper bound of the p99 of the sum)."""
    metric = "apiserver_admission_webhook_admission_duration_seconds"
    names = sorted(
        {
            labels["name"]
            for labels, _ in samples(after, f"{metric}_bucket")
            if owner in labels.get("name", "") and labels.get("operation") == "CREATE"
        }
    )
    found: dict[str, dict[str, Any]] = {}
    added = 0.0
    for name in names:

        def this(labels: Mapping[str, str], name: str = name) -> bool:
            return labels.get("name") == name and labels.get("operation") == "CREATE"

        buckets = minus(histogram(after, metric, this), histogram(before, metric, this))
        calls = max(buckets.values(), default=0.0)
        if calls <= 0:
            continue
        p50, p99 = quantile(buckets, 0.5), quantile(buckets, 0.99)
        found[name] = {
            "calls": round(calls),
            "p50_ms": None if p50 is None else round(p50 * 1000, 2),
            "p99_ms": None if p99 is None else round(p99 * 1000, 2),
            # the histogram's first bucket is 5 ms: the share of calls the target holds for
            "within_5ms": round(buckets.get(0.005, 0.0) / calls, 3),
        }
        if p99 is not None and created:
            added += p99 * 1000 * calls / created
    return found, (round(added, 2) if found and created else None)


def own_time(before: Sequence[str], after: Sequence[str]) -> list[float | None]:
    """p50 and p99 of the replicas' own answer time (their `quotaguard_admission_duration_seconds`,
    from the end of reading a body to the encoded answer), summed over replicas: what the
    webhook's code costs, against what the API server waits for in all."""
    metric = "quotaguard_admission_duration_seconds"
    buckets: dict[float, float] = {}
    for old, new in zip(before, after, strict=True):
        for le, count in minus(histogram(new, metric, bool), histogram(old, metric, bool)).items():
            buckets[le] = buckets.get(le, 0.0) + count
    found = (quantile(buckets, 0.5), quantile(buckets, 0.99))
    return [None if q is None else round(q * 1000, 3) for q in found]


def churn_phase(
    cluster: Cluster,
    api: Api,
    churn: Churn,
    controllers: list[ControllerProcess],
    args: Any,
    *,
    webhooks: Sequence[QuotaguardServer] = (),
    profile: bool = False,
) -> dict[str, Any]:
    """One churn window: creations at the rate, deletions 20 s after each; the API server's
    histograms, the controllers' counters and each webhook replica's answers before and after;
    with `profile`, py-spy profiles of the leader and the webhooks over the window."""
    before = apiserver_metrics(api)
    leader = leader_of(controllers)
    watched = Watched(leader.process.popen.pid) if leader and leader.process.popen else None
    leader_before = controller_metrics(leader) if leader else ""
    sampler = IntervalSampler(leader).start() if leader else None
    answered_before = [answered(w) for w in webhooks]
    own_before = [scrape(f"{w.http_url}/metrics") for w in webhooks]
    profiles: dict[str, Profile] = {}
    if profile:
        profiled = {f"webhook-{n}": w.process.popen for n, w in enumerate(webhooks)}
        if leader is not None:
            profiled["controller"] = leader.process.popen
        profiles = {
            name: Profile(popen.pid, args.churn_seconds, PROFILES / name).start()
            for name, popen in profiled.items()
            if popen is not None
        }
    churn.statuses.clear()
    churn.latencies.clear()
    deleter_until = time.monotonic() + args.churn_seconds + 25
    deleted: list[int] = []
    deleters = [
        threading.Thread(
            target=lambda: deleted.append(churn.delete_due(deleter_until)), daemon=True
        )
        for _ in range(4)
    ]
    for deleter in deleters:
        deleter.start()
    started = time.monotonic()
    created = churn.create(
        rate=args.rate, seconds=args.churn_seconds, limit=int(args.rate * args.churn_seconds),
        lifetime=20.0,
    )  # fmt: skip
    seconds = time.monotonic() - started
    catch_up = caught_up(leader, churn.newest_version) if leader else None
    for deleter in deleters:
        deleter.join()
    after = apiserver_metrics(api)
    leader_after = controller_metrics(leader) if leader else ""
    window = time.monotonic() - started
    answered_after = [answered(w) for w in webhooks]
    own_after = [scrape(f"{w.http_url}/metrics") for w in webhooks]
    sampled = sampler.stop() if sampler else None
    by_webhook, added_by_webhooks = webhook_latencies(before, after, created)
    # the yardstick: Kueue's own webhooks (Go, controller-runtime), timed by the same API
    # server in the same window
    kueue_hooks, _ = webhook_latencies(before, after, created, owner=".kb.io")

    def quotaguard_hook(labels: Mapping[str, str]) -> bool:
        return "quotaguard" in labels.get("name", "") and labels.get("operation") == "CREATE"

    def pod_create(labels: Mapping[str, str]) -> bool:
        return labels.get("verb") == "POST" and labels.get("resource") == "pods"

    hook = minus(
        histogram(after, "apiserver_admission_webhook_admission_duration_seconds", quotaguard_hook),
        histogram(
            before, "apiserver_admission_webhook_admission_duration_seconds", quotaguard_hook
        ),
    )
    request = minus(
        histogram(after, "apiserver_request_duration_seconds", pod_create),
        histogram(before, "apiserver_request_duration_seconds", pod_create),
    )
    rejections = counter(after, "apiserver_admission_webhook_rejection_count", quotaguard_hook) - (
        counter(before, "apiserver_admission_webhook_rejection_count", quotaguard_hook)
    )
    fail_open = counter(after, "apiserver_admission_webhook_fail_open_count", quotaguard_hook) - (
        counter(before, "apiserver_admission_webhook_fail_open_count", quotaguard_hook)
    )

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 2)

    result: dict[str, Any] = {
        "created": created,
        "deleted": sum(deleted),
        "seconds": round(seconds, 1),
        "creations_per_s": round(created / seconds, 1),
        "statuses": {str(k): v for k, v in sorted(churn.statuses.items())},
        "pod_create_p50_ms": ms(quantile(request, 0.5)),
        "pod_create_p99_ms": ms(quantile(request, 0.99)),
        "quotaguard_webhook_calls": round(max(hook.values(), default=0)),
        "quotaguard_webhook_p50_ms": ms(quantile(hook, 0.5)),
        "quotaguard_webhook_p99_ms": ms(quantile(hook, 0.99)),
        "quotaguard_webhooks": by_webhook,
        "quotaguard_added_p99_ms": added_by_webhooks,
        "kueue_webhooks": kueue_hooks,
        "quotaguard_webhook_rejections": rejections,
        "quotaguard_webhook_fail_open": fail_open,
        "load_average": round(load_average()[0], 2),
    }
    if webhooks:
        result["answers_per_replica"] = [
            round(a - b) for a, b in zip(answered_after, answered_before, strict=True)
        ]
        result["webhook_own_p50_p99_ms"] = own_time(own_before, own_after)
    if profiles:
        result["profiles"] = {name: p.summary() for name, p in profiles.items()}
    if watched is not None:
        planned = intervals(leader_after) - intervals(leader_before)
        events_before = watch_events(leader_before)
        cost = watched.since()
        result["controller"] = {
            **cost,
            "intervals": planned,
            "cpu_s_per_interval": round(cost["cpu_s"] / planned, 3) if planned else None,
            "queue_writes": writes(leader_after) - writes(leader_before),
            "per_interval": sampled,
            # what the watches decoded over the window (creations, deletions, every status
            # change), and how long after the last create its pod was in the cache
            "watch_events_per_s": {
                resource: round((count - events_before.get(resource, 0)) / window, 1)
                for resource, count in sorted(watch_events(leader_after).items())
            },
            "watch_caught_up_s": catch_up,
        }
    print(f"  {json.dumps(result)[:3000]}", flush=True)
    return result


def prioritize(pids: Sequence[int], nice: int) -> None:
    """Every thread of each process at CPU priority `nice` (Linux nice is per thread)."""
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, int(task.name), nice)


def cordon(api: Api, names: list[str], on: bool) -> None:
    for name in names:
        status, body = api.request(
            "PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": on}}
        )
        assert status == 200, body


CONVERGENCE_PHASES = ("after_cordon", "after_uncordon", "after_demand_doubled")
MARGIN_INTERVALS = 2  # past what the step limit implies, before a phase is called not converged
# Wall-clock budget of each convergence direction (cordon, uncordon): past it the phase stops
# and says so (`timed_out`), so a full-size run ends within its ~25 minutes whatever happens.
CONVERGENCE_BUDGET_S = 240.0
# The wall-clock guard per interval: its pause and its work (planning, then up to 300 queue
# writes one after another), which at load 10 on two cores took ~13 s of a ~18 s interval.
SLOW_INTERVAL_S = 12 * INTERVAL_S


def steps_to(start: int, target: int, rebalance: Mapping[str, Any]) -> int:
    """Writes the step limit needs to move one nominal quota from `start` to `target`."""
    now, steps = start, 0
    while now != target:
        step = step_allowed(now, rebalance)
        now = min(now + step, target) if target > now else max(now - step, target)
        steps += 1
    return steps


def implied_by(report: Mapping[str, Any], rebalance: Mapping[str, Any]) -> int:
    """Intervals the step limit implies from what the queues held when this plan was made to
    its targets: the slowest queue's steps (the plan's own write is the first of them)."""
    most = 0
    for row in report_rows(report).values():
        held = (row.get("current") or {}).get("nominal")
        if held is not None:
            most = max(most, steps_to(int(held), int(row["target"]), rebalance))
    return most


def off_target(report: Mapping[str, Any]) -> list[str]:
    """Rows whose planned nominal is not yet their target (held back by the step limit or by
    capacity): the plan is not done moving them."""
    return [
        f"{queue}/{name}: {row['nominal']} -> {row['target']}"
        for (queue, name), row in report_rows(report).items()
        if row["nominal"] != row["target"]
    ]


def not_landed(report: Mapping[str, Any], written: Mapping[str, Any]) -> list[str]:
    """Rows where this plan's view of a queue is not what the plan before it wrote."""
    before = report_rows(written)
    return [
        f"{queue}/{name}: holds {(row.get('current') or {}).get('nominal')}, "
        f"written {before[(queue, name)]['nominal']}"
        for (queue, name), row in report_rows(report).items()
        if (queue, name) in before
        and (row.get("current") or {}).get("nominal") != before[(queue, name)]["nominal"]
    ]


def next_plan(
    controller: ControllerProcess, after: str | None, timeout: float
) -> dict[str, Any] | None:
    """The first report planned after the one generated at `after` (None past `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        report = controller.report()
        if report is not None and report.get("generatedAt") != after:
            return report
        time.sleep(1)
    return None


def follow_change(
    controller: ControllerProcess,
    observe: Callable[[Mapping[str, Any]], dict[str, int]],
    arrived: Callable[[dict[str, int]], bool],
    rebalance: Mapping[str, Any],
    budget: float = CONVERGENCE_BUDGET_S,
) -> dict[str, Any]:
    """After a change of capacity or demand: plans until one is made on the change (what
    `observe` reads of its report passes `arrived`); from there the step limit implies N
    intervals; then plans until one plans every queue at its target (N at most is the target,
    N + MARGIN_INTERVALS is where it stops looking), and whether the plan after it found
    those nominals written. Intervals are counted in plans, so a slow machine stretches the
    wall time but not the count; the wall-clock guards only catch a controller that stopped
    (SLOW_INTERVAL_S for one plan) or a phase that would not end (`budget` for all of it:
    then `timed_out`). The leader's writes, CPU and wall seconds per interval are sampled."""
    started = time.monotonic()
    deadline = started + budget
    sampler = IntervalSampler(controller).start()

    def wait(after: str | None) -> dict[str, Any] | None:
        left = deadline - time.monotonic()
        return next_plan(controller, after, min(SLOW_INTERVAL_S, left)) if left > 0 else None

    def done(found: dict[str, Any]) -> dict[str, Any]:
        found["seconds"] = round(time.monotonic() - started, 1)
        found["timed_out"] = time.monotonic() >= deadline
        found["per_interval"] = sampler.stop()
        return found

    seen = (controller.report() or {}).get("generatedAt")
    first = None
    observed: list[dict[str, int]] = []
    for _ in range(MARGIN_INTERVALS + 3):  # the watches may take a plan or two to see it all
        report = wait(seen)
        if report is None:
            break
        seen = report["generatedAt"]
        observed.append(observe(report))
        if arrived(observed[-1]):
            first = report
            break
    if first is None:
        return done({"converged": False, "why": "no plan saw the change", "planned_on": observed})
    implied = max(implied_by(first, rebalance), 1)
    report, plans = first, 1
    while off_target(report) and plans < implied + MARGIN_INTERVALS:
        following = wait(report["generatedAt"])
        if following is None:
            break
        report, plans = following, plans + 1
    left = off_target(report)
    after = wait(report["generatedAt"])
    missing = not_landed(after, report) if after is not None else ["no plan after it"]
    return done(
        {
            "converged": not left,
            "planned_on": observed[-1],
            "intervals": plans if not left else None,
            "implied_intervals": implied,
            "within_implied": not left and plans <= implied,
            "rows_off_target": len(left),
            "off_target": left[:10],
            "rows_not_landed": len(missing),
            "not_landed": missing[:10],
        }
    )


def capacity_of(report: Mapping[str, Any]) -> dict[str, int]:
    """The healthy capacity per class a plan was made on."""
    return {name: found[0] for name, found in report_capacity(report).items()}


def on_capacity(expected: Mapping[str, int]) -> Callable[[dict[str, int]], bool]:
    return lambda planned: all(planned.get(name) == count for name, count in expected.items())


def burst_demand(report: Mapping[str, Any]) -> dict[str, int]:
    """The burst tenant's demand in a plan: admitted and pending GPUs of its class."""
    row = report_rows(report).get((tenant_name(BURST_TENANT), tenant_class(BURST_TENANT))) or {}
    return {
        "demand": int(row.get("usage") or 0) + int(row.get("pending") or 0),
        "target": int(row.get("target") or 0),
    }


def burst(churn: Churn, pods: int) -> int:
    """`pods` pods of BURST_POD_GPUS GPUs for the burst tenant, through quotaguard's webhook;
    returns how many were created."""
    for _ in range(pods):
        manifest = gpu_pod(
            churn.next_serial(), churn.tenants, tenant=BURST_TENANT, gpus=BURST_POD_GPUS
        )
        status = churn.post(manifest)
        assert status == 201, f"the burst tenant's pod {manifest['metadata']['name']}: {status}"
    return pods


def nominal_sums(
    versions: list[Version], policy_document: Mapping[str, Any]
) -> list[tuple[Version, dict[str, int]]]:
    """After each version (in etcd order), the sum of nominal quotas per GPU class over the
    tenants' ClusterQueues (flavor = class name, as in config/samples/kueue)."""
    classes = {c["name"]: c["resource"] for c in policy_document["spec"]["gpuClasses"]}
    tenants = {t["queue"] for t in policy_document["spec"]["tenants"]}
    latest: dict[str, dict[str, int]] = {}
    found = []
    # the state at the start first (all LISTED versions), then every change in etcd order
    ordered = sorted(versions, key=lambda v: (v.event != "LISTED", v.resource_version))
    listed = sum(v.event == "LISTED" for v in versions)
    for index, version in enumerate(ordered):
        if version.name not in tenants:
            continue
        if version.event == "DELETE":
            latest.pop(version.name, None)
        else:
            quotas = gpu_quotas(version.obj)
            latest[version.name] = {
                name: int(quotas.get((name, resource), {}).get("nominalQuota") or 0)
                for name, resource in classes.items()
            }
        if index >= listed - 1:
            sum_of = {name: sum(q[name] for q in latest.values()) for name in classes}
            found.append((version, sum_of))
    return found


def over_after_fitting(
    sums: list[tuple[Version, dict[str, int]]], capacity: Mapping[str, int]
) -> tuple[int, list[str]]:
    """How many versions the cut took to fit `capacity` (the sum may exceed it only until the
    controller's cuts have landed), and every version that exceeds it again after that."""
    fitted: int | None = None
    again: list[str] = []
    for index, (version, sum_of) in enumerate(sums):
        over = {k: v for k, v in sum_of.items() if v > capacity.get(k, v)}
        if fitted is None:
            if not over:
                fitted = index
        elif over:
            again.append(f"{version.name}@{version.resource_version}: {over} > {dict(capacity)}")
    return (len(sums) if fitted is None else fitted), again


def implied_intervals(versions: list[Version], rebalance: Mapping[str, Any]) -> int:
    """Intervals the step limit needs to move every queue from its first to its last nominal
    quota in `versions` (one step per interval; a raise moves by step_allowed at most)."""
    first: dict[tuple[str, str], int] = {}
    last: dict[tuple[str, str], int] = {}
    for version in sorted(versions, key=lambda v: v.resource_version):
        if version.event == "DELETE":
            continue
        for key, quota in gpu_quotas(version.obj).items():
            nominal = int(quota["nominalQuota"] or 0)
            first.setdefault((version.name, key[1]), nominal)
            last[(version.name, key[1])] = nominal
    most = 0
    for key, start in first.items():
        now, steps = start, 0
        while now < last[key]:
            now, steps = now + step_allowed(now, rebalance), steps + 1
        most = max(most, steps + (1 if last[key] < start else 0))
    return most


def capacity(
    node_list: list[dict[str, Any]], policy_document: Mapping[str, Any], *, usable: bool = True
) -> dict[str, int]:
    """Healthy capacity x usableCapacityPercent per class: what no sum of nominal quotas may
    exceed (the planner's distributable is this less what pods of no tenant hold); without
    `usable`, the healthy capacity itself (the report's `capacity`)."""
    rebalance = policy_document["spec"]["rebalance"]
    percent = float(rebalance.get("usableCapacityPercent", 100)) if usable else 100.0
    classes = {c["name"]: c["resource"] for c in policy_document["spec"]["gpuClasses"]}
    return {
        name: math.floor(
            sum(int(n["status"]["allocatable"].get(resource, 0)) for n in node_list) * percent / 100
        )
        for name, resource in classes.items()
    }


def distributable(controller: ControllerProcess) -> dict[str, int]:
    report = controller.report() or {}
    return {c["name"]: int(c["distributable"]) for c in report.get("classes", [])}


# --------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--tenants", type=int, default=300)
    parser.add_argument("--pods", type=int, default=50_000, help="steady-state pods, at most")
    parser.add_argument("--create-minutes", type=float, default=16.0)
    parser.add_argument("--rate", type=float, default=100.0, help="churn creations per second")
    parser.add_argument("--churn-seconds", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument(
        "--webhooks", type=int, default=2, help="webhook replicas, all behind one port"
    )
    parser.add_argument(
        "--front",
        choices=("reuse-port", "round-robin"),
        default="reuse-port",
        help="how the replicas share the API server's connections: one port with SO_REUSEPORT "
        "(the kernel spreads connections, as kube-proxy's NAT does) or bench/round_robin.py, "
        "a user-space proxy that costs a hop and CPU",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy profiles of the leading controller and each webhook during the churn "
        "with quotaguard's webhooks (needs `pip install py-spy`)",
    )
    parser.add_argument(
        "--webhook-nice",
        type=int,
        default=0,
        help="a second churn with quotaguard's webhooks, its replicas (and the round-robin) at "
        "this CPU priority, as a webhook pod with CPU of its own would run; 0: no such churn",
    )
    parser.add_argument(
        "--burst-pods",
        type=int,
        default=10,
        help=f"at least this many pods of {BURST_POD_GPUS} GPUs for the burst tenant before its "
        "demand doubles (more when it holds more)",
    )
    parser.add_argument(
        "--low-rate",
        type=float,
        default=10.0,
        help="one more churn with quotaguard's webhooks at this rate, where the API server is "
        "not short of CPU; 0: none",
    )
    args = parser.parse_args()
    toolchain = build.toolchain()
    kueue_binary = build.kueue_binary()
    if toolchain.missing() or kueue_binary is None:
        print(f"e2e toolchain missing; run `python -m e2e.build --optional`: {toolchain.missing()}")
        return 2
    results: dict[str, Any] = {"parameters": vars(args)}
    cluster = Cluster(toolchain, controllers=True, kwok=True)
    cluster.start()
    try:
        api = Api(cluster)
        t0 = time.monotonic()
        for node in nodes(args.nodes):
            status, body = api.request("POST", "/api/v1/nodes", node)
            assert status in (201, 409), body
        wait_until(
            lambda: sum(cluster.node_ready(n) for n in ("h100-0000", "mig-0000")) == 2,
            timeout=120,
            what="kwok nodes ready",
        )
        results["nodes_seconds"] = round(time.monotonic() - t0, 1)
        print(f"{args.nodes} nodes in {results['nodes_seconds']} s", flush=True)
        for i in range(args.tenants):
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenant_name(i)}}
            status, answer = api.request("POST", "/api/v1/namespaces", body)
            assert status in (201, 409), answer
        cluster.apply(sample_documents(KUEUE_SAMPLES, "resourceflavors.yaml"))
        for i in range(args.tenants):
            for path, body in (
                ("/apis/kueue.x-k8s.io/v1beta2/clusterqueues", cluster_queue(i)),
                (
                    f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{tenant_name(i)}/localqueues",
                    local_queue(i),
                ),
            ):
                status, answer = api.request("POST", path, body)
                assert status in (201, 409), answer
        print(f"{args.tenants} tenants' namespaces and queues", flush=True)
        kueue = start_kueue(cluster, kueue_binary, frameworks=["pod"])
        policy_document = policy(args.tenants)
        policy_file = write_document(cluster.workdir / "policy.yaml", policy_document)
        shared = free_port() if args.front == "reuse-port" and args.webhooks > 1 else None
        webhooks = [
            cluster.serve_quotaguard(
                policy_file,
                components="webhook",
                register=False,
                name=f"quotaguard-{n}",
                webhook_port=shared,
                args=["--webhook-reuse-port"] if shared else (),
            )
            for n in range(args.webhooks)
        ]
        front = shared or front_port(cluster, webhooks)
        webhook_configs = cluster.register_webhooks(front, cert=webhooks[0].cert)
        controllers = [
            serve_controller(
                cluster, policy_file, pod_name=f"controller-{n}", lease_namespace=LEASE_NAMESPACE
            )
            for n in range(2)
        ]
        wait_until(lambda: leader_of(controllers) is not None, timeout=120, what="a leader")
        watched = {
            "kube-apiserver": Watched(cluster.processes["kube-apiserver"].popen.pid),  # type: ignore[union-attr]
            "kueue": Watched(kueue.process.popen.pid),  # type: ignore[union-attr]
            **{
                f"webhook-{n}": Watched(w.process.popen.pid)  # type: ignore[union-attr]
                for n, w in enumerate(webhooks)
            },
        }
        if "round-robin" in cluster.processes:
            watched["round-robin"] = Watched(cluster.processes["round-robin"].popen.pid)  # type: ignore[union-attr]

        print(f"steady state: up to {args.pods:,} pods for {args.create_minutes} min", flush=True)
        churn = Churn(api, args.tenants, workers=args.workers, first_serial=0)
        started = time.monotonic()
        steady = churn.create(
            rate=None, seconds=args.create_minutes * 60, limit=args.pods, lifetime=None
        )
        seconds = time.monotonic() - started
        results["steady"] = {
            "created": steady,
            "seconds": round(seconds, 1),
            "per_second": round(steady / seconds, 1),
            "statuses": {str(k): v for k, v in sorted(churn.statuses.items())},
        }
        print(f"  {json.dumps(results['steady'])}", flush=True)
        write_result("scale_e2e", {**results, "complete": False})
        time.sleep(INTERVAL_S * 2)

        print(f"churn with quotaguard's webhooks, {args.rate}/s", flush=True)
        results["churn_with"] = churn_phase(
            cluster, api, churn, controllers, args, webhooks=webhooks, profile=args.profile
        )
        if args.webhook_nice:
            front_pids = [w.process.popen.pid for w in webhooks if w.process.popen]
            if "round-robin" in cluster.processes and cluster.processes["round-robin"].popen:
                front_pids.append(cluster.processes["round-robin"].popen.pid)
            print(f"churn with quotaguard's webhooks at nice {args.webhook_nice}", flush=True)
            prioritize(front_pids, args.webhook_nice)
            results["churn_with_priority"] = {
                "nice": args.webhook_nice,
                **churn_phase(cluster, api, churn, controllers, args, webhooks=webhooks),
            }
            prioritize(front_pids, 0)
        if args.low_rate:
            print(f"churn with quotaguard's webhooks, {args.low_rate}/s", flush=True)
            slow = argparse.Namespace(**{**vars(args), "rate": args.low_rate})
            results["churn_with_low_rate"] = churn_phase(
                cluster, api, churn, controllers, slow, webhooks=webhooks
            )
        cluster.unregister_webhooks(webhook_configs)
        time.sleep(3)
        print("churn without quotaguard's webhooks (same run, pods sent as it rewrites them)")
        churn.rewritten = True
        results["churn_without"] = churn_phase(cluster, api, churn, controllers, args)
        write_result("scale_e2e", {**results, "complete": False})
        churn.rewritten = False
        webhook_configs = cluster.register_webhooks(front, cert=webhooks[0].cert)
        time.sleep(3)

        leader = leader_of(controllers)
        assert leader is not None
        print("convergence: cordon 10% of the nodes, then uncordon", flush=True)
        cordoned = [n["metadata"]["name"] for n in nodes(args.nodes)][::10]
        full = distributable(leader)
        rebalance = policy_document["spec"]["rebalance"]
        history = EtcdHistory(cluster).begin()
        all_nodes = nodes(args.nodes)
        kept_nodes = [n for n in all_nodes if n["metadata"]["name"] not in set(cordoned)]
        cordon(api, cordoned, True)
        down = follow_change(
            leader,
            capacity_of,
            on_capacity(capacity(kept_nodes, policy_document, usable=False)),
            rebalance,
        )
        reduced = distributable(leader)
        cut = history.versions()
        history = EtcdHistory(cluster).begin()
        cordon(api, cordoned, False)
        up = follow_change(
            leader,
            capacity_of,
            on_capacity(capacity(all_nodes, policy_document, usable=False)),
            rebalance,
        )
        raised = history.versions()
        whole = capacity(all_nodes, policy_document)
        kept = capacity(kept_nodes, policy_document)
        print("demand: the burst tenant asks what it holds, then twice that", flush=True)
        # Its demand first reaches what it holds now (its nominal is its weighted share,
        # lendable, whatever it asks below that), then doubles: above what it holds, so the
        # plan must raise it and cut others. One history per direction: the API server compacts
        # etcd every 5 minutes.
        before_burst = burst_demand(leader.report() or {"tenants": []})
        first_pods = max(args.burst_pods, math.ceil(before_burst["target"] / BURST_POD_GPUS))
        history = EtcdHistory(cluster).begin()
        asked = burst(churn, first_pods) * BURST_POD_GPUS
        settled = follow_change(
            leader, burst_demand, lambda seen: seen["demand"] >= asked, rebalance
        )
        burst_versions = history.versions()
        history = EtcdHistory(cluster).begin()
        asked += burst(churn, first_pods) * BURST_POD_GPUS
        doubled = follow_change(
            leader, burst_demand, lambda seen: seen["demand"] >= asked, rebalance
        )
        burst_versions += history.versions()
        cut_versions, over_again = over_after_fitting(nominal_sums(cut, policy_document), kept)
        problems = [
            *history_problems(cut, policy_document, whole, check_steps=False),
            *over_again,
            *history_problems(raised, policy_document, whole, check_steps=True),
            *history_problems(burst_versions, policy_document, whole, check_steps=True),
        ]
        results["convergence"] = {
            "cordoned_nodes": len(cordoned),
            "distributable_full": full,
            "distributable_cordoned": reduced,
            "capacity_full": whole,
            "capacity_cordoned": kept,
            "after_cordon": down,
            "queue_versions_until_within_capacity": cut_versions,
            "after_uncordon": up,
            "history_steps_the_step_limit_implies": implied_intervals(raised, rebalance),
            "burst_tenant": tenant_name(BURST_TENANT),
            "burst_before": before_burst,
            "burst_pods_per_step": first_pods,
            "after_burst": settled,
            "after_demand_doubled": doubled,
            "queue_versions": len(cut) + len(raised) + len(burst_versions),
            "problems": problems[:20],
            "problem_count": len(problems),
        }
        print(f"  {json.dumps(results['convergence'])[:2000]}", flush=True)
        write_result("scale_e2e", {**results, "complete": False})

        print("leadership: the leader killed mid-churn", flush=True)
        history = EtcdHistory(cluster).begin()
        leader = leader_of(controllers)
        assert leader is not None and leader.process.popen is not None
        other = next(c for c in controllers if c is not leader)
        leader_process = leader.process.popen
        killed_at: list[float] = []

        last_renewal: list[float] = []

        def kill() -> None:
            last_renewal.append(lease_seconds(cluster, "renewTime"))
            killed_at.append(time.monotonic())
            leader_process.send_signal(signal.SIGKILL)

        threading.Timer(10.0, kill).start()
        standby_sampler = IntervalSampler(other).start()
        churn.statuses.clear()
        churn.create(rate=args.rate / 2, seconds=30, limit=int(args.rate * 15), lifetime=None)
        wait_until(
            lambda: (lease_holder(cluster, LEASE_NAMESPACE) or "").startswith(f"{other.pod_name}-"),
            timeout=120,
            interval=0.2,
            what="the standby holding the Lease",
        )
        took_over = time.monotonic() - killed_at[0]
        after_renewal = lease_seconds(cluster, "acquireTime") - last_renewal[0]
        time.sleep(INTERVAL_S * 3)
        standby_intervals = standby_sampler.stop()
        versions = history.versions()
        problems = history_problems(
            versions,
            policy_document,
            capacity(nodes(args.nodes), policy_document),
            check_steps=True,
        )
        results["leadership"] = {
            "takeover_s": round(took_over, 1),
            "takeover_after_last_renewal_s": round(after_renewal, 1),
            "lease_duration_s": 15,
            "standby_poll_s": 2,
            "standby_per_interval": standby_intervals,
            "queue_versions": len(versions),
            "problems": problems[:20],
            "problem_count": len(problems),
        }
        print(f"  {json.dumps(results['leadership'])}", flush=True)
        write_result("scale_e2e", {**results, "complete": False})
        results["processes"] = {name: w.since() for name, w in watched.items()}
    finally:
        cluster.stop()
        cluster.cleanup()

    with_, without = results["churn_with"], results["churn_without"]
    added = (
        None
        if with_["pod_create_p99_ms"] is None or without["pod_create_p99_ms"] is None
        else round(with_["pod_create_p99_ms"] - without["pod_create_p99_ms"], 2)
    )
    controller = with_.get("controller") or {}
    sampled = controller.get("per_interval") or {}
    by_webhooks = with_.get("quotaguard_added_p99_ms")
    verdicts = {
        # the API server's admission histogram of quotaguard's webhooks (the figure)
        "added_p99_ms": by_webhooks,
        "added_p99_ok": by_webhooks is not None and by_webhooks <= ADDED_P99_TARGET_MS,
        # pod create p99 with quotaguard's webhooks against without (same run)
        "pod_create_p99_difference_ms": added,
        "webhook_errors": with_["quotaguard_webhook_fail_open"],
        "controller_rss_ok": (controller.get("peak_rss_mb") or 1e9) < RSS_TARGET_MB,
        "interval_cpu_ok": (controller.get("cpu_s_per_interval") or 1e9) < INTERVAL_CPU_TARGET_S,
        "interval_cpu_s_median_max": [sampled.get("cpu_s", {}).get(k) for k in ("median", "max")],
        "plan_cpu_s_median_max": [sampled.get("plan_cpu_s", {}).get(k) for k in ("median", "max")],
        "writes_per_interval_median_max": [
            sampled.get("writes", {}).get(k) for k in ("median", "max")
        ],
        "convergence_ok": results["convergence"]["problem_count"] == 0
        and all(
            results["convergence"][phase].get("within_implied") for phase in CONVERGENCE_PHASES
        ),
        "convergence_timed_out": any(
            results["convergence"][phase].get("timed_out") for phase in CONVERGENCE_PHASES
        ),
        "leadership_ok": results["leadership"]["problem_count"] == 0,
        # the same churn with the webhook replicas on CPU of their own (as far as nice goes)
        "added_p99_ms_webhooks_prioritized": (results.get("churn_with_priority") or {}).get(
            "quotaguard_added_p99_ms"
        ),
        "added_p99_ms_at_low_rate": (results.get("churn_with_low_rate") or {}).get(
            "quotaguard_added_p99_ms"
        ),
        "kueue_webhooks_same_window": with_.get("kueue_webhooks"),
        "watch_events_per_s": controller.get("watch_events_per_s"),
        "watch_caught_up_s": controller.get("watch_caught_up_s"),
    }
    results["verdicts"] = verdicts
    written = write_result("scale_e2e", {**results, "complete": True})
    print(json.dumps(verdicts, indent=2))
    print(f"wrote {written.relative_to(ROOT)}; machine {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
