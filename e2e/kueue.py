"""Helpers for the quota-controller e2e tests: tmp policies, Kueue/Volcano objects, a recorder
of every version of the queues the API server hands out, and readers of quotas and reports."""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e import conftest
from e2e.build import Toolchain
from e2e.cluster import (
    REPO_ROOT,
    Cluster,
    Process,
    free_port,
    http_ok,
    mig_node,
    rewrite_webhook_configurations,
    shared_gpu_node,
    wait_until,
    whole_gpu_node,
)

POLICY = REPO_ROOT / "config/policy.yaml"
KUEUE_SAMPLES = REPO_ROOT / "config/samples/kueue"
VOLCANO_SAMPLES = REPO_ROOT / "config/samples/volcano"
KUEUE = "kueue.x-k8s.io/v1beta2"
VOLCANO = "scheduling.volcano.sh/v1beta1"
H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"
TENANT_QUEUES = ("inference", "notebooks", "training")
GPU_RESOURCES = frozenset(
    {"nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/gpu.shared"}
)

# (flavor, resource) -> {"nominalQuota": int, "borrowingLimit": int | None, ...}
Quotas = dict[tuple[str, str], dict[str, int | None]]


# --------------------------------------------------------------------------------------------
# GPU nodes

# Capacity add_gpu_nodes gives, per class, and with usableCapacityPercent 95.
CAPACITY = {"h100": 24, "h100-1g.10gb": 28, "h100-3g.40gb": 8, "shared": 16}
DISTRIBUTABLE = {name: math.floor(n * 95 / 100) for name, n in CAPACITY.items()}


@contextlib.contextmanager
def own_gpu_cluster(toolchain: Toolchain, *, kueue_samples: bool = True) -> Iterator[Cluster]:
    """A control plane of a test module's own, without controller-manager (nothing but kwok and
    quotaguard touches nodes and queues), with the GPU nodes of `add_gpu_nodes` and, unless
    `kueue_samples` is false, Kueue's sample queues; stopped after (its files kept when a test
    failed)."""
    cluster = conftest._start(toolchain, controllers=False)
    try:
        add_gpu_nodes(cluster)
        if kueue_samples:
            apply_kueue_samples(cluster)
        yield cluster
    finally:
        conftest._finish(cluster)


def training_job(name: str, pods: int) -> dict[str, Any]:
    """A Job as a user writes it: `pods` pods at once of 8 whole GPUs each, no model, no queue
    label, in namespace training."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "training"},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "registry.example/trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                }
            },
        },
    }


def add_gpu_nodes(cluster: Cluster) -> None:
    """Three H100 nodes, one A100 node (not the h100 class: its product label differs), four MIG
    nodes in mixed strategy and one time-sliced node: the capacity in CAPACITY."""
    cluster.add_nodes(
        *(whole_gpu_node(f"h100-{i}", 8) for i in range(3)),
        whole_gpu_node("a100-0", 8, product="NVIDIA-A100-SXM4-80GB"),
        *(mig_node(f"mig-{i}", {"1g.10gb": 7, "3g.40gb": 2}) for i in range(4)),
        shared_gpu_node("shared-0", gpus=4, replicas=4),
    )


# --------------------------------------------------------------------------------------------
# Policies


def policy_document(**rebalance: Any) -> dict[str, Any]:
    """config/policy.yaml with `spec.rebalance` fields replaced (camelCase keys)."""
    document: dict[str, Any] = yaml.safe_load(POLICY.read_text())
    document["spec"]["rebalance"].update(rebalance)
    return document


def write_policy(directory: Path, name: str = "policy.yaml", **rebalance: Any) -> Path:
    """A tmp copy of the sample policy with short intervals by default."""
    settings: dict[str, Any] = {"interval": "1s", "demandWindow": "6s", **rebalance}
    return write_document(directory / name, policy_document(**settings))


def write_document(path: Path, document: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(document), sort_keys=False))
    return path


def load_policy(path: Path) -> Any:
    from quotaguard.policy.loader import load_policy_file

    return load_policy_file(path)


def policy_quotas(document: Mapping[str, Any]) -> dict[str, dict[str, dict[str, int]]]:
    """tenant queue -> class -> {"guaranteed", "max"} as the policy states them."""
    return {
        tenant["queue"]: {
            name: {"guaranteed": int(q.get("guaranteed", 0)), "max": int(q["max"])}
            for name, q in (tenant.get("quota") or {}).items()
        }
        for tenant in document["spec"]["tenants"]
    }


# --------------------------------------------------------------------------------------------
# Kueue and Volcano objects


def sample_documents(directory: Path, *files: str) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for name in files:
        docs.extend(d for d in yaml.safe_load_all((directory / name).read_text()) if d)
    return docs


def apply_kueue_samples(cluster: Cluster) -> None:
    """Namespaces, ResourceFlavors, the sample ClusterQueues (at their guarantees) and
    LocalQueues; applying again resets the ClusterQueues to the samples."""
    cluster.apply(sample_documents(KUEUE_SAMPLES, "namespaces.yaml", "resourceflavors.yaml"))
    reset_cluster_queues(cluster)
    cluster.apply(sample_documents(KUEUE_SAMPLES, "localqueues.yaml"))


def reset_cluster_queues(cluster: Cluster) -> None:
    """Delete and create the sample ClusterQueues: every field as in the samples again."""
    cluster.kubectl("delete", "clusterqueues", *TENANT_QUEUES, "--ignore-not-found", "--wait")
    for doc in sample_documents(KUEUE_SAMPLES, "clusterqueues.yaml"):
        cluster.create(doc)


def apply_volcano_samples(cluster: Cluster) -> None:
    cluster.kubectl("delete", "queues.scheduling.volcano.sh", "--all", "--ignore-not-found")
    for doc in sample_documents(VOLCANO_SAMPLES, "queues.yaml"):
        cluster.create(doc)


def workload(
    name: str,
    namespace: str,
    local_queue: str,
    resources: Mapping[str, int],
    *,
    count: int = 1,
    node_selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Kueue Workload with one pod set of `count` pods, each asking `resources`."""
    limits = {resource: str(amount) for resource, amount in resources.items()}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": "registry.example/train:1",
                "resources": {"requests": dict(limits), "limits": dict(limits)},
            }
        ],
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "queueName": local_queue,
            "podSets": [{"name": "main", "count": count, "template": {"spec": pod_spec}}],
        },
    }


def admit(
    cluster: Cluster,
    name: str,
    namespace: str,
    cluster_queue: str,
    flavors: Mapping[str, str],
    usage: Mapping[str, int],
    *,
    count: int = 1,
) -> None:
    """Mark a Workload admitted through its status subresource, as Kueue would."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conditions = [
        {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": "admitted by the e2e test",
            "lastTransitionTime": now,
        }
        for kind, reason in (("QuotaReserved", "QuotaReserved"), ("Admitted", "Admitted"))
    ]
    status = {
        "admission": {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": dict(flavors),
                    "resourceUsage": {r: str(n) for r, n in usage.items()},
                    "count": count,
                }
            ],
        },
        "conditions": conditions,
    }
    cluster.kubectl(
        "patch",
        "workloads.kueue.x-k8s.io",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def pod_group(
    name: str, namespace: str, queue: str, resources: Mapping[str, int]
) -> dict[str, Any]:
    """A Volcano PodGroup asking `resources` in all (minResources), phase Pending."""
    return {
        "apiVersion": VOLCANO,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "minMember": 1,
            "queue": queue,
            "minResources": {resource: str(n) for resource, n in resources.items()},
        },
        "status": {"phase": "Pending"},
    }


# --------------------------------------------------------------------------------------------
# Reading queues


def gpu_quotas(cluster_queue: Mapping[str, Any]) -> Quotas:
    """The GPU resource group's quotas of a ClusterQueue, by (flavor, resource)."""
    found: Quotas = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        if not GPU_RESOURCES & set(group.get("coveredResources") or []):
            continue
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                found[(flavor["name"], resource["name"])] = {
                    key: None if resource.get(key) is None else int(resource[key])
                    for key in ("nominalQuota", "borrowingLimit", "lendingLimit")
                }
    return found


def other_groups(cluster_queue: Mapping[str, Any]) -> list[Any]:
    """The resource groups that cover no GPU resource (cpu and memory)."""
    return [
        group
        for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []
        if not GPU_RESOURCES & set(group.get("coveredResources") or [])
    ]


def cluster_queues(cluster: Cluster) -> dict[str, dict[str, Any]]:
    items = cluster.get("clusterqueues.kueue.x-k8s.io")["items"]
    return {item["metadata"]["name"]: item for item in items}


def resource_versions(
    cluster: Cluster, plural: str = "clusterqueues.kueue.x-k8s.io"
) -> dict[str, str]:
    return {
        item["metadata"]["name"]: item["metadata"]["resourceVersion"]
        for item in cluster.get(plural)["items"]
    }


def quota_events(cluster: Cluster) -> list[dict[str, Any]]:
    events = cluster.get("events", namespace="default")["items"]
    return [e for e in events if e.get("reason") == "QuotaUpdated"]


@dataclass
class Version:
    """One version of an object as etcd stored it (resource_version = etcd's mod_revision)."""

    event: str  # LISTED (state at the start), PUT or DELETE
    name: str
    resource_version: int
    obj: dict[str, Any]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _etcd_post(cluster: Cluster, path: str, body: Mapping[str, Any]) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{cluster.etcd_port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def _current_revision(cluster: Cluster) -> int:
    """etcd's revision now (the header of any range answer carries it)."""
    return int(_etcd_post(cluster, "/v3/kv/range", {"key": _b64("/")})["header"]["revision"])


def _prefix_range(prefix: str) -> dict[str, str]:
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return {"key": _b64(prefix), "range_end": _b64(end)}


def _name(key_b64: str) -> str:
    return base64.b64decode(key_b64).decode().rsplit("/", 1)[-1]


@dataclass
class EtcdHistory:
    """Every version of the objects under an etcd key prefix from a start revision on, read
    from etcd itself (its gRPC gateway): no API server in between, so an API-server restart or
    a watch that expires leaves no gap. Kubernetes stores custom resources there as JSON.
    The API server compacts etcd every 5 minutes; read the history before then."""

    cluster: Cluster
    prefix: str = "/registry/kueue.x-k8s.io/clusterqueues/"
    start: int = 0

    def begin(self) -> EtcdHistory:
        """Remember the current revision: `versions()` starts from the state there."""
        self.start = _current_revision(self.cluster)
        return self

    def versions(self, quiet: float = 1.5) -> list[Version]:
        """The state at the start revision (LISTED), then every PUT and DELETE after it, up to
        the revision current when called: reading stops at the first event past it (Kueue
        writes ClusterQueue status all the time on a busy cluster, so the stream may never go
        quiet) or when nothing comes for `quiet` seconds."""
        found: list[Version] = []
        until = _current_revision(self.cluster)
        listed = _etcd_post(
            self.cluster,
            "/v3/kv/range",
            {**_prefix_range(self.prefix), "revision": str(self.start)},
        )
        for kv in listed.get("kvs") or []:
            obj = json.loads(base64.b64decode(kv["value"]))
            found.append(Version("LISTED", _name(kv["key"]), int(kv["mod_revision"]), obj))
        watch = {"create_request": {**_prefix_range(self.prefix), "start_revision": self.start + 1}}
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.cluster.etcd_port}/v3/watch",
            data=json.dumps(watch).encode(),
            headers={"Content-Type": "application/json"},
        )
        # etcd replays the history at once, then the stream stays open: read until it is quiet
        with urllib.request.urlopen(request, timeout=quiet) as response:
            while True:
                try:
                    line = response.readline()
                except TimeoutError:
                    break
                if not line:
                    break
                events = (json.loads(line).get("result") or {}).get("events") or []
                for event in events:
                    kv = event["kv"]
                    name, revision = _name(kv["key"]), int(kv["mod_revision"])
                    if revision > until:
                        return found
                    if event.get("type") == "DELETE":
                        found.append(Version("DELETE", name, revision, {}))
                    else:
                        obj = json.loads(base64.b64decode(kv["value"]))
                        found.append(Version("PUT", name, revision, obj))
        return found


# --------------------------------------------------------------------------------------------
# Reports


def http_json(url: str, timeout: float = 3) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def report_rows(report: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(tenant queue, class) -> the report's row."""
    return {
        (tenant["queue"], row["class"]): row
        for tenant in report["tenants"]
        for row in tenant["classes"]
    }


def report_capacity(report: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """class -> (capacity, distributable)."""
    return {c["name"]: (c["capacity"], c["distributable"]) for c in report["classes"]}


def converged(report: Mapping[str, Any] | None) -> bool:
    """Every queue holds what the plan finally wants (current nominal = target)."""
    if not report:
        return False
    rows = report_rows(report).values()
    return bool(rows) and all(
        row["current"] is not None and row["current"]["nominal"] == row["target"] for row in rows
    )


def wait_for_report(
    fetch: Callable[[], dict[str, Any] | None],
    check: Callable[[dict[str, Any]], bool],
    *,
    timeout: float,
    what: str,
) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        report = fetch()
        return report if report is not None and check(report) else None

    return wait_until(ready, timeout=timeout, interval=0.3, what=what)


# --------------------------------------------------------------------------------------------
# Running the controller


@contextlib.contextmanager
def running_controller(
    cluster: Cluster,
    policy: Path,
    *,
    identity: str,
    lease_namespace: str,
    mode: str | None = None,
    gpu_operator_namespace: str = "gpu-operator",
) -> Iterator[Any]:
    """A ControllerThread (interval from the policy) against `cluster`; stopped on exit.
    Yields the thread; `.controller` is the Controller."""
    from e2e.controller_thread import ControllerThread
    from quotaguard.controller.quota_controller import ControllerSettings

    cluster.create_namespace(lease_namespace)
    thread = ControllerThread(
        load_policy(policy),
        kubeconfig=str(cluster.kubeconfig),
        settings=ControllerSettings(
            mode=mode,  # type: ignore[arg-type]
            lease_namespace=lease_namespace,
            identity=identity,
            gpu_operator_namespace=gpu_operator_namespace,
        ),
    )
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()
    if thread.error is not None:
        raise AssertionError(f"controller thread died: {thread.error!r}")


@dataclass
class ControllerProcess:
    """`quotaguard serve --components controller,reports` as a real process."""

    process: Process
    http_port: int
    pod_name: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def report(self) -> dict[str, Any] | None:
        """GET /reports/quota; None while it answers 503 (no plan yet) or not at all."""
        try:
            found: dict[str, Any] = http_json(f"{self.url}/reports/quota")
            return found
        except OSError:
            return None

    def leader(self) -> bool | None:
        """Whether it says it may write now (`controller.leader` of its report, the same test
        its writes pass); None while it has no report or does not answer."""
        report = self.report()
        if report is None:
            return None
        return bool(report["controller"]["leader"])


def serve_controller(
    cluster: Cluster,
    policy: Path,
    *,
    pod_name: str,
    lease_namespace: str,
    mode: str | None = None,
    components: str = "controller,reports",
    args: Sequence[str] = (),
) -> ControllerProcess:
    """Start `python -m quotaguard serve` with POD_NAME/POD_NAMESPACE set as in a pod (they
    name its Lease identity and namespace); wait until /healthz answers."""
    cluster.create_namespace(lease_namespace)
    http_port = free_port()
    argv = [
        sys.executable,
        "-m",
        "quotaguard",
        "serve",
        "--policy",
        str(policy),
        "--components",
        components,
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--bind-address",
        "127.0.0.1",
        "--http-port",
        str(http_port),
        *(["--mode", mode] if mode else []),
        *([] if "--reports-auth" in args else ["--reports-auth", "none"]),  # a trusted network
        *args,
    ]
    env = {
        **cluster.env(),
        "POD_NAME": pod_name,
        "POD_NAMESPACE": lease_namespace,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    process = cluster.start_process(pod_name, argv, env=env, cwd=REPO_ROOT)

    def healthy() -> bool:
        process.check_alive()
        return http_ok(f"http://127.0.0.1:{http_port}/healthz")

    wait_until(healthy, timeout=30, what=f"{pod_name} /healthz")
    return ControllerProcess(process, http_port, pod_name)


def lease_holder(cluster: Cluster, namespace: str) -> str | None:
    found = cluster.kubectl(
        "get", "lease", "quotaguard-controller", "-n", namespace, "-o", "json", check=False
    )
    if found.returncode != 0:
        return None
    holder: str | None = json.loads(found.stdout)["spec"].get("holderIdentity")
    return holder


# --------------------------------------------------------------------------------------------
# Invariants over every version of the ClusterQueues


def step_allowed(before: int, rebalance: Mapping[str, Any]) -> int:
    """The largest move of one nominal quota in one write (maxStepPercent, at least one)."""
    percent = float(rebalance.get("maxStepPercent", 25))
    return max(int(rebalance.get("minChange", 1)), 1, math.floor(before * percent / 100 + 1e-9))


def history_problems(
    versions: list[Version],
    policy: Mapping[str, Any],
    distributable: Mapping[str, int],
    *,
    check_steps: bool = True,
) -> list[str]:
    """What is wrong in a sequence of ClusterQueue versions, replayed in order:
    nominal below the guarantee or above max, borrowing/lending limits not max - nominal and
    nominal - guaranteed, the sum of nominal quotas of a class over its distributable capacity,
    and (check_steps) a nominal quota moving by more than maxStepPercent in one write."""
    quotas = policy_quotas(policy)
    rebalance = policy["spec"]["rebalance"]
    classes = {c["name"]: c["resource"] for c in policy["spec"]["gpuClasses"]}
    latest: dict[str, Quotas] = {}
    problems: list[str] = []
    for version in sorted(versions, key=lambda v: v.resource_version):
        name = version.name
        if name not in quotas:
            continue
        if version.event == "DELETE":
            latest.pop(name, None)
            continue
        where = f"{name}@{version.resource_version}"
        now = gpu_quotas(version.obj)
        before = latest.get(name)
        for class_name, quota in quotas[name].items():
            key = (class_name, classes[class_name])
            entry = now.get(key)
            if entry is None:
                problems.append(f"{where}: no quota for {key}")
                continue
            nominal = int(entry["nominalQuota"] or 0)
            if nominal < quota["guaranteed"]:
                problems.append(f"{where}: {class_name} nominal {nominal} < guaranteed")
            if nominal > quota["max"]:
                problems.append(f"{where}: {class_name} nominal {nominal} > max")
            if entry["borrowingLimit"] != quota["max"] - nominal:
                problems.append(f"{where}: {class_name} borrowingLimit {entry['borrowingLimit']}")
            if (entry["lendingLimit"] or 0) != nominal - quota["guaranteed"]:
                problems.append(f"{where}: {class_name} lendingLimit {entry['lendingLimit']}")
            if check_steps and before is not None and key in before:
                old = int(before[key]["nominalQuota"] or 0)
                if abs(nominal - old) > step_allowed(old, rebalance) and nominal not in (
                    quota["guaranteed"],
                    quota["max"],
                ):
                    problems.append(f"{where}: {class_name} moved {old} -> {nominal} in one write")
        latest[name] = now
        for class_name, resource in classes.items():
            total = sum(
                int((q.get((class_name, resource)) or {}).get("nominalQuota") or 0)
                for q in latest.values()
            )
            if class_name in distributable and total > distributable[class_name]:
                problems.append(
                    f"{where}: {class_name} sum of nominal {total} > "
                    f"distributable {distributable[class_name]}"
                )
    return problems


# --------------------------------------------------------------------------------------------
# Kueue's own controller (optional: built by `python -m e2e.build` when the module proxy allows)

KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # fixed in Kueue's main without cert mgmt
_METRICS_CERTS_WRITE = threading.Lock()


# Kueue's integrations (frameworks) and the CRD each needs; None: a built-in kind.
KUEUE_FRAMEWORKS: dict[str, str | None] = {
    "batch/job": None,
    "pod": None,
    "deployment": None,
    "statefulset": None,
    "jobset.x-k8s.io/jobset": "jobsets.jobset.x-k8s.io",
    "leaderworkerset.x-k8s.io/leaderworkerset": "leaderworkersets.leaderworkerset.x-k8s.io",
    "ray.io/rayjob": "rayjobs.ray.io",
    "ray.io/raycluster": "rayclusters.ray.io",
    "ray.io/rayservice": "rayservices.ray.io",
    "kubeflow.org/pytorchjob": "pytorchjobs.kubeflow.org",
    "kubeflow.org/tfjob": "tfjobs.kubeflow.org",
    "kubeflow.org/xgboostjob": "xgboostjobs.kubeflow.org",
    "kubeflow.org/paddlejob": "paddlejobs.kubeflow.org",
    "kubeflow.org/jaxjob": "jaxjobs.kubeflow.org",
    "kubeflow.org/mpijob": "mpijobs.kubeflow.org",
    "trainer.kubeflow.org/trainjob": "trainjobs.trainer.kubeflow.org",
    "workload.codeflare.dev/appwrapper": "appwrappers.workload.codeflare.dev",
}
KUEUE_WEBHOOK_PREFIX = "kueue-"  # the namePrefix of Kueue's release manifests


def installed_crds(cluster: Cluster) -> set[str]:
    return {crd["metadata"]["name"] for crd in cluster.get("crds")["items"]}


def installed_frameworks(cluster: Cluster) -> list[str]:
    """Kueue's integrations whose kinds this cluster serves (built-in, or CRD installed)."""
    crds = installed_crds(cluster)
    return [name for name, crd in KUEUE_FRAMEWORKS.items() if crd is None or crd in crds]


def kueue_configuration(
    health_port: int, webhook_port: int, cert_dir: Path, frameworks: Sequence[str]
) -> dict[str, Any]:
    """Kueue's manager Configuration for a process outside the cluster: no leader election,
    no internal certificates, metrics off, the given integrations."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(frameworks)},
    }


def kueue_webhook_configurations(
    cluster: Cluster, port: int, *, reinvocation_policy: str | None = None
) -> list[dict[str, Any]]:
    """Kueue's own Mutating/ValidatingWebhookConfigurations as its release renders them
    (`kueue-mutating-webhook-configuration`, ...: every webhook of every integration, with
    their namespaceSelectors), pointed at https://127.0.0.1:<port>. Kueue serves every path
    (a no-op for an integration that is off). `reinvocation_policy` sets it on every mutating
    webhook (Kueue ships none, which is Never)."""
    directory = cluster.toolchain.kueue_webhook_dir
    if directory is None or not (directory / "manifests.yaml").exists():
        raise FileNotFoundError(f"Kueue's webhook manifests are missing ({directory}): e2e.build")
    rendered = [
        doc
        for doc in yaml.safe_load_all(cluster.kubectl("kustomize", str(directory)).stdout)
        if doc and doc["kind"].endswith("WebhookConfiguration")
    ]
    for doc in rendered:
        doc["metadata"]["name"] = KUEUE_WEBHOOK_PREFIX + doc["metadata"]["name"]
        if reinvocation_policy and doc["kind"] == "MutatingWebhookConfiguration":
            for hook in doc["webhooks"]:
                hook["reinvocationPolicy"] = reinvocation_policy
    ca_bundle = base64.b64encode(cluster.pki.ca_pem).decode()
    return rewrite_webhook_configurations(rendered, port=port, ca_bundle=ca_bundle)


@dataclass
class KueueProcess:
    """Kueue's controller started by `start_kueue`, and its registered webhooks (if any)."""

    process: Process
    webhook_port: int
    frameworks: list[str]
    webhooks: list[dict[str, Any]]


def start_kueue(
    cluster: Cluster,
    binary: Path,
    *,
    webhooks: bool = True,
    frameworks: Sequence[str] | None = None,
    reinvocation_policy: str | None = None,
    feature_gates: Mapping[str, bool] | None = None,
    resources: Mapping[str, Any] | None = None,
) -> KueueProcess:
    """Run Kueue's controller against `cluster` with the integrations of the kinds the cluster
    serves (or `frameworks`), `feature_gates` on its command line and `resources` (e.g.
    `deviceClassMappings`) in its Configuration; wait until it is ready; then (webhooks)
    register its webhook configurations with the API server, as Kueue's release does. The
    Configuration is also kept where the release keeps it (ConfigMap kueue-manager-config in
    kueue-system), where quotaguard's controller reads its deviceClassMappings."""
    cert_dir = cluster.workdir / "kueue-certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    serving = cluster.serving_cert("kueue-webhook")
    (cert_dir / "tls.crt").write_bytes(serving.cert_file.read_bytes())
    (cert_dir / "tls.key").write_bytes(serving.key_file.read_bytes())
    with _METRICS_CERTS_WRITE:  # one fixed path for every Kueue; fleets start several at once
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            if not (KUEUE_METRICS_CERTS / name).exists():
                (KUEUE_METRICS_CERTS / name).write_bytes((cert_dir / name).read_bytes())
    health_port, webhook_port = free_port(), free_port()
    chosen = list(frameworks) if frameworks is not None else installed_frameworks(cluster)
    configuration = kueue_configuration(health_port, webhook_port, cert_dir, chosen)
    if resources is not None:
        configuration["resources"] = dict(resources)
    config = write_document(cluster.workdir / "kueue-config.yaml", configuration)
    cluster.create_namespace("kueue-system")
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
            "data": {"controller_manager_config.yaml": yaml.safe_dump(configuration)},
        }
    )
    # Kueue refuses gates both on its command line and in its Configuration: all go here
    gates = {"VisibilityOnDemand": False, **(feature_gates or {})}
    gate_flag = ",".join(f"{name}={str(on).lower()}" for name, on in gates.items())
    process = cluster.start_process(
        "kueue",
        [
            str(binary),
            f"--config={config}",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--feature-gates={gate_flag}",
        ],
    )

    def ready() -> bool:
        process.check_alive()
        return http_ok(f"http://127.0.0.1:{health_port}/readyz")

    wait_until(ready, timeout=60, what="Kueue controller /readyz")
    registered: list[dict[str, Any]] = []
    if webhooks:
        registered = kueue_webhook_configurations(
            cluster, webhook_port, reinvocation_policy=reinvocation_policy
        )
        cluster.apply(registered)
    return KueueProcess(process, webhook_port, chosen, registered)


def workload_conditions(cluster: Cluster, name: str, namespace: str) -> dict[str, str]:
    found = cluster.get("workloads.kueue.x-k8s.io", name, namespace=namespace)
    return {c["type"]: c["status"] for c in (found.get("status") or {}).get("conditions") or []}
