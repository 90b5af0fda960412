"""quotaguard in front of Kueue's own webhooks: Kueue v0.17.0's controller runs with its webhooks
registered as its release registers them (`kueue-mutating-webhook-configuration`, every
integration whose kind this cluster serves), next to quotaguard's shipped webhook/ manifests.

What a user would see: a GPU Pod or Job submitted without a queue label in a tenant namespace is
rewritten to the tenant's class, stamped with the tenant's queue, and *then* met by Kueue's
webhooks, so Kueue gates the Pod (`kueue.x-k8s.io/admission`) or creates the Job suspended and
admits it only within the ClusterQueue's quota. Every other kind Kueue integrates gets a
Workload whose podSets ask for the class resource, not `nvidia.com/gpu`.

The order is the API server's: mutating configurations are called in name order, and
`00-quotaguard-mutating` sorts before `kueue-mutating-webhook-configuration`. Two tests take that
order away to show it is what matters (the Pod escapes the gate), and that Kueue's webhooks with
`reinvocationPolicy: IfNeeded` would close it too.

One private cluster for the module (controller-manager, scheduler, kwok, every workload CRD
e2e.build copied), because Kueue's pod webhook gates every labelled Pod of the cluster.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e import build
from e2e.cluster import (
    Cluster,
    QuotaguardServer,
    load_webhook_configurations,
    mig_node,
    shared_gpu_node,
    wait_until,
    whole_gpu_node,
)
from e2e.kueue import (
    KUEUE_FRAMEWORKS,
    KUEUE_SAMPLES,
    POLICY,
    KueueProcess,
    installed_crds,
    kueue_webhook_configurations,
    sample_documents,
    start_kueue,
    training_job,
)
from e2e.workload_kinds import KINDS, Kind, gpu_resources

GPU = "nvidia.com/gpu"
MIG_1G = "nvidia.com/mig-1g.10gb"
SHARED = "nvidia.com/gpu.shared"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
MEMORY_HINT = "quotaguard.dev/gpu-memory"
QUOTAGUARD_MUTATING = "00-quotaguard-mutating"
KUEUE_MUTATING = "kueue-mutating-webhook-configuration"
# The name the configuration had before: it sorts after Kueue's.
BEHIND_KUEUE = "quotaguard-mutating"

# The framework each kind's Workload comes from (CronJob: the Jobs it creates).
FRAMEWORK_OF = {
    "cronjob": "batch/job",
    "deployment": "deployment",
    "statefulset": "statefulset",
    "jobset": "jobset.x-k8s.io/jobset",
    "leaderworkerset": "leaderworkerset.x-k8s.io/leaderworkerset",
    "rayjob": "ray.io/rayjob",
    "raycluster": "ray.io/raycluster",
    "rayservice": "ray.io/rayservice",
    "pytorchjob": "kubeflow.org/pytorchjob",
    "tfjob": "kubeflow.org/tfjob",
    "xgboostjob": "kubeflow.org/xgboostjob",
    "paddlejob": "kubeflow.org/paddlejob",
    "jaxjob": "kubeflow.org/jaxjob",
    "mpijob": "kubeflow.org/mpijob",
    "appwrapper": "workload.codeflare.dev/appwrapper",
    "trainjob": "trainer.kubeflow.org/trainjob",
}
assert set(FRAMEWORK_OF.values()) <= set(KUEUE_FRAMEWORKS)


# --------------------------------------------------------------------------------------------
# The chain: one cluster with Kueue's webhooks and quotaguard's


@dataclass
class Chain:
    cluster: Cluster
    kueue: KueueProcess
    quotaguard: QuotaguardServer
    crds: set[str]

    def answers(self) -> dict[str, float]:
        """quotaguard's admission answers so far, by `operation/result`."""
        url = f"{self.quotaguard.http_url}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        found: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "quotaguard_admission_requests_total":
                    key = f"{sample.labels['operation']}/{sample.labels['result']}"
                    found[key] = found.get(key, 0) + sample.value
        return found

    def quotaguard_mutates(self, kind: Kind) -> bool:
        """Whether the shipped webhook/ sends this kind's CREATE to /mutate."""
        for config in load_webhook_configurations():
            if config["kind"] != "MutatingWebhookConfiguration":
                continue
            for hook in config.get("webhooks") or []:
                for rule in hook.get("rules") or []:
                    if (
                        kind.group in rule.get("apiGroups", [])
                        and kind.plural in rule.get("resources", [])
                        and "CREATE" in rule.get("operations", [])
                    ):
                        return True
        return False


def cluster_queue_documents() -> list[dict[str, Any]]:
    """The sample ClusterQueues with two quotas made small for the tests: inference gets one
    1g.10gb slice and cannot borrow (the second Pod is over quota); notebooks gets no shared
    GPU (the Workloads of the per-kind tests stay pending and disturb nothing)."""
    docs = sample_documents(KUEUE_SAMPLES, "clusterqueues.yaml")
    for doc in docs:
        set_to = {"inference": (MIG_1G, 1), "notebooks": (SHARED, 0)}.get(doc["metadata"]["name"])
        if set_to is None:
            continue
        resource, nominal = set_to
        for group in doc["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                for quota in flavor["resources"]:
                    if quota["name"] == resource:
                        quota["nominalQuota"] = min(int(quota["nominalQuota"]), nominal)
                        quota["borrowingLimit"] = 0
                        quota.pop("lendingLimit", None)
    return docs


@pytest.fixture(scope="module")
def chain(
    make_module_cluster: Callable[..., Cluster], toolchain: build.Toolchain
) -> Iterator[Chain]:
    binary = build.kueue_binary()
    if binary is None:
        pytest.skip("Kueue controller not built (optional e2e.build step)")
    if toolchain.kueue_webhook_dir is None or not toolchain.kueue_webhook_dir.exists():
        pytest.skip("Kueue's webhook manifests not copied (optional e2e.build step)")
    cluster = make_module_cluster(
        controllers=True,
        extra_crd_dirs=[d for d in toolchain.workload_crd_dirs if d.exists()],
    )
    cluster.add_nodes(
        whole_gpu_node("h100-0", 8),
        whole_gpu_node("h100-1", 8),
        mig_node("mig-0", {"1g.10gb": 7, "3g.40gb": 2}),
        shared_gpu_node("shared-0", gpus=2, replicas=4),
    )
    cluster.apply(sample_documents(KUEUE_SAMPLES, "namespaces.yaml", "resourceflavors.yaml"))
    for doc in cluster_queue_documents():
        cluster.create(doc)
    cluster.apply(sample_documents(KUEUE_SAMPLES, "localqueues.yaml"))
    kueue = start_kueue(cluster, binary)
    quotaguard = cluster.serve_quotaguard(POLICY, components="webhook", name="qg-chain")
    yield Chain(cluster, kueue, quotaguard, installed_crds(cluster))
    cluster.stop_quotaguard(quotaguard)
    cluster.unregister_webhooks(kueue.webhooks)


# --------------------------------------------------------------------------------------------
# Reading what Kueue made


def created(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any]:
    """`kubectl create`: the object exactly as the API server stored it at creation (after
    every mutating webhook, before any controller touched it)."""
    stored: dict[str, Any] = json.loads(cluster.create(obj).stdout)
    return stored


def workloads(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("workloads.kueue.x-k8s.io", namespace=namespace)[
        "items"
    ]
    return items


def workload_of(cluster: Cluster, namespace: str, uid: str) -> dict[str, Any] | None:
    for item in workloads(cluster, namespace):
        if any(o.get("uid") == uid for o in item["metadata"].get("ownerReferences") or []):
            return item
    return None


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def condition_true(obj: dict[str, Any], kind: str) -> bool:
    return conditions(obj).get(kind, {}).get("status") == "True"


def podset_resources(workload: dict[str, Any]) -> set[str]:
    return gpu_resources([ps["template"] for ps in workload["spec"]["podSets"]])


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def labels(obj: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = obj["metadata"].get("labels") or {}
    return found


def seconds(timestamp: str) -> float:
    return time.mktime(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ"))


def inference_pod(name: str) -> dict[str, Any]:
    """A bare GPU Pod as a user writes it: no queue label, one nvidia.com/gpu, a memory hint."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "inference", "annotations": {MEMORY_HINT: "8Gi"}},
        "spec": {
            "containers": [
                {
                    "name": "embedder",
                    "image": "registry.example/embedder:1",
                    "resources": {"limits": {GPU: "1"}},
                }
            ]
        },
    }


def job_pods(cluster: Cluster, name: str, namespace: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = cluster.get(
        "pods", "-l", f"batch.kubernetes.io/job-name={name}", namespace=namespace
    )["items"]
    return found


@contextlib.contextmanager
def quotaguard_named(chain: Chain, name: str) -> Iterator[None]:
    """quotaguard's mutating configuration registered under another name for the block."""
    cluster, server = chain.cluster, chain.quotaguard
    renamed = [json.loads(json.dumps(c)) for c in server.webhooks]
    for config in renamed:
        if config["kind"] == "MutatingWebhookConfiguration":
            config["metadata"]["name"] = name
    cluster.unregister_webhooks(server.webhooks)
    cluster.apply(renamed)
    try:
        yield
    finally:
        cluster.unregister_webhooks(renamed)
        cluster.apply(server.webhooks)


def stored_order(cluster: Cluster) -> list[str]:
    found = cluster.get("mutatingwebhookconfigurations")["items"]
    return sorted(item["metadata"]["name"] for item in found)


# --------------------------------------------------------------------------------------------
# Pods and Jobs


def test_quotaguard_is_called_before_kueue(chain: Chain) -> None:
    names = stored_order(chain.cluster)
    assert names.index(QUOTAGUARD_MUTATING) < names.index(KUEUE_MUTATING), names


def test_a_bare_gpu_pod_is_gated_by_kueue_and_admitted_only_within_quota(chain: Chain) -> None:
    cluster = chain.cluster
    first = created(cluster, inference_pod("embedder-0"))
    # Rewritten and stamped by quotaguard, then gated by Kueue's webhook, in the same request.
    assert first["spec"]["containers"][0]["resources"]["limits"] == {MIG_1G: "1"}
    assert labels(first)[QUEUE_LABEL] == "inference"
    assert labels(first)[MANAGED_LABEL] == "true"
    assert ADMISSION_GATE in gates(first)
    assert "nodeName" not in first["spec"]

    uid = first["metadata"]["uid"]
    workload = wait_until(
        lambda: workload_of(cluster, "inference", uid), timeout=30, what="the Pod's Workload"
    )
    assert podset_resources(workload) == {MIG_1G}
    wait_until(
        lambda: condition_true(workload_of(cluster, "inference", uid) or {}, "Admitted"),
        timeout=30,
        what="Kueue admitting the first Pod (1 of 1 slice)",
    )

    def running() -> dict[str, Any] | None:
        pod: dict[str, Any] = cluster.get("pod", "embedder-0", namespace="inference")
        return pod if pod["status"].get("phase") == "Running" else None

    pod = wait_until(running, timeout=60, what="the admitted Pod ungated, scheduled and Running")
    assert ADMISSION_GATE not in gates(pod)
    assert pod["spec"]["nodeName"] == "mig-0"

    # The tenant's quota is one slice: the second Pod is gated and stays so.
    second = created(cluster, inference_pod("embedder-1"))
    assert ADMISSION_GATE in gates(second)
    uid = second["metadata"]["uid"]

    def pending() -> dict[str, Any] | None:
        found = workload_of(cluster, "inference", uid)
        quota = conditions(found or {}).get("QuotaReserved", {})
        return found if quota.get("status") == "False" else None

    workload = wait_until(pending, timeout=30, what="Kueue leaving the second Pod pending")
    assert podset_resources(workload) == {MIG_1G}
    assert not condition_true(workload, "Admitted")
    pod = cluster.get("pod", "embedder-1", namespace="inference")
    assert ADMISSION_GATE in gates(pod)
    assert "nodeName" not in pod["spec"]
    assert pod["status"].get("phase") == "Pending"


def test_a_bare_gpu_job_is_created_suspended_and_no_pod_runs_before_admission(
    chain: Chain,
) -> None:
    cluster = chain.cluster
    fits = created(cluster, training_job("finetune-fits", 1))
    assert fits["spec"]["suspend"] is True
    assert labels(fits)[QUEUE_LABEL] == "training"
    template = fits["spec"]["template"]["spec"]
    assert template["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"

    uid = fits["metadata"]["uid"]
    wait_until(
        lambda: condition_true(workload_of(cluster, "training", uid) or {}, "Admitted"),
        timeout=30,
        what="Kueue admitting the Job within training's 16 H100s",
    )
    admitted = workload_of(cluster, "training", uid)
    assert admitted is not None and podset_resources(admitted) == {GPU}
    admitted_at = seconds(conditions(admitted)["Admitted"]["lastTransitionTime"])
    pods = wait_until(
        lambda: job_pods(cluster, "finetune-fits", "training"), timeout=60, what="the Job's pod"
    )
    # Its pod exists only since Kueue admitted the Job (timestamps have one-second resolution).
    assert all(seconds(p["metadata"]["creationTimestamp"]) >= admitted_at for p in pods)

    # 8 of 16 are used; two more pods of 8 do not fit: suspended, and no pod at all.
    beyond = created(cluster, training_job("finetune-beyond", 2))
    assert beyond["spec"]["suspend"] is True
    uid = beyond["metadata"]["uid"]

    def pending() -> dict[str, Any] | None:
        found = workload_of(cluster, "training", uid)
        quota = conditions(found or {}).get("QuotaReserved", {})
        return found if quota.get("status") == "False" else None

    wait_until(pending, timeout=30, what="Kueue leaving the second Job pending")
    assert cluster.get("job", "finetune-beyond", namespace="training")["spec"]["suspend"] is True
    assert job_pods(cluster, "finetune-beyond", "training") == []


# --------------------------------------------------------------------------------------------
# Every other kind Kueue integrates: its Workload asks for the class, not nvidia.com/gpu


def kind_id(kind: Kind) -> str:
    return kind.name


@pytest.mark.parametrize("kind", [k for k in KINDS if k.name != "job"], ids=kind_id)
def test_kueue_workload_of_each_kind_asks_for_the_rewritten_class(chain: Chain, kind: Kind) -> None:
    cluster = chain.cluster
    if kind.crd is not None and kind.crd not in chain.crds:
        pytest.skip(f"{kind.crd} is not installed (optional e2e.build step)")
    if not chain.quotaguard_mutates(kind):
        pytest.skip(f"webhook/ sends no CREATE of {kind.resource} to quotaguard")
    if FRAMEWORK_OF[kind.name] not in chain.kueue.frameworks:
        pytest.skip(f"Kueue's {FRAMEWORK_OF[kind.name]} integration is off")
    # Tenant notebooks (nb-*): a bare nvidia.com/gpu becomes one time-sliced GPU; its queue has
    # no shared quota in this module, so every Workload stays pending.
    namespace = f"nb-{kind.name}"
    cluster.create_namespace(namespace)
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "notebooks", "namespace": namespace},
            "spec": {"clusterQueue": "notebooks"},
        }
    )
    if kind.prerequisites:
        cluster.apply(list(kind.prerequisites))
    name = f"{kind.name}-gpu"
    before = chain.answers()
    stored = created(cluster, kind.build(name, namespace))
    # When it fails: were the API server's requests answered without a patch ("allowed") or
    # never sent (no new answer at all)?
    answered = {k: n - before.get(k, 0) for k, n in chain.answers().items() if n != before.get(k)}
    assert gpu_resources(kind.templates(stored)) == {SHARED}, f"quotaguard answered {answered}"
    assert kind.queue_labels(stored).get(QUEUE_LABEL) == "notebooks"
    if kind.name == "cronjob":
        # What the CronJob controller does at its schedule, done now.
        cluster.kubectl("create", "job", f"--from=cronjob/{name}", f"{name}-now", "-n", namespace)

    def made() -> list[dict[str, Any]] | None:
        found = [w for w in workloads(cluster, namespace) if w["spec"].get("podSets")]
        return found or None

    found = wait_until(made, timeout=60, what=f"Kueue's Workload for the {kind.kind}")
    for workload in found:
        assert podset_resources(workload) == {SHARED}, workload["spec"]["podSets"]
    # Pods the kind's controller made (Deployment, StatefulSet, CronJob's Job) carry the class
    # once: they were not rewritten again and passed validation.
    for pod in cluster.get("pods", namespace=namespace)["items"]:
        assert gpu_resources([pod]) == {SHARED}
        assert {c["resources"]["limits"].get(SHARED) for c in pod["spec"]["containers"]} == {"1"}


# --------------------------------------------------------------------------------------------
# The order is what matters


def test_behind_kueues_configuration_a_bare_pod_escapes_the_gate(chain: Chain) -> None:
    """What the shipped name prevents: quotaguard's configuration named to sort after Kueue's
    stamps the queue label too late, and Kueue's webhook (reinvocationPolicy Never) never
    sees it."""
    cluster = chain.cluster
    with quotaguard_named(chain, BEHIND_KUEUE):
        names = stored_order(cluster)
        assert names.index(KUEUE_MUTATING) < names.index(BEHIND_KUEUE)
        pod = created(cluster, inference_pod("behind-kueue"))
    try:
        assert labels(pod)[QUEUE_LABEL] == "inference"
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {MIG_1G: "1"}
        assert ADMISSION_GATE not in gates(pod)
        assert MANAGED_LABEL not in labels(pod)
    finally:
        cluster.kubectl("delete", "pod", "behind-kueue", "-n", "inference", "--wait=false")


def test_kueue_reinvoked_if_needed_gates_the_pod_even_behind(chain: Chain) -> None:
    """The other fix: Kueue's mutating webhooks with reinvocationPolicy IfNeeded are called
    again after quotaguard's change, even when quotaguard's configuration sorts after."""
    cluster = chain.cluster
    port = chain.kueue.webhook_port
    reinvoked = kueue_webhook_configurations(cluster, port, reinvocation_policy="IfNeeded")
    cluster.apply(reinvoked)
    try:
        with quotaguard_named(chain, BEHIND_KUEUE):
            pod = created(cluster, inference_pod("reinvoked"))
    finally:
        cluster.apply(chain.kueue.webhooks)
    try:
        assert labels(pod)[QUEUE_LABEL] == "inference"
        assert ADMISSION_GATE in gates(pod)
        assert labels(pod)[MANAGED_LABEL] == "true"
    finally:
        cluster.kubectl("delete", "pod", "reinvoked", "-n", "inference", "--wait=false")


def test_a_bare_gpu_pod_costs_quotaguard_one_mutate_and_one_validate_call(chain: Chain) -> None:
    """Kueue's webhook changes the Pod after quotaguard's (label, gate), so the API server would
    call quotaguard's mutating webhook again (reinvocationPolicy IfNeeded); the Pod already
    carries quotaguard's decision and Kueue's gate, so the `not-yet-decided-by-quotaguard`
    matchCondition keeps that call from being sent. Validation still judges the Pod."""
    cluster = chain.cluster
    before = chain.answers()
    pod = created(cluster, inference_pod("two-calls"))
    try:
        after = chain.answers()
        assert ADMISSION_GATE in gates(pod) and labels(pod)[QUEUE_LABEL] == "inference"
        calls = {
            operation: sum(
                after[key] - before.get(key, 0) for key in after if key.startswith(f"{operation}/")
            )
            for operation in ("mutate", "validate")
        }
        assert calls == {"mutate": 1, "validate": 1}
    finally:
        cluster.kubectl("delete", "pod", "two-calls", "-n", "inference", "--wait=false")


# --------------------------------------------------------------------------------------------
# A TrainJob whose GPUs come from its runtime


def _gpu_runtime(name: str, gpus: int) -> dict[str, Any]:
    """A ClusterTrainingRuntime shaped like Kubeflow Trainer's torchtune ones: the trainer
    node's container asks for the GPUs, the TrainJob names none."""
    node = {"name": "node", "image": "registry.example/torchtune:1"}
    node["resources"] = {"limits": {GPU: str(gpus)}}
    job = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": {"containers": [node]}}},
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [job]}},
        },
    }


def _trainjob_of(runtime: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "inference"},
        "spec": {"runtimeRef": {"name": runtime}},
    }


def test_a_trainjob_gets_the_tenants_queue_and_its_runtimes_gpus_judged(chain: Chain) -> None:
    """Seen failing before quotaguard read runtimes: the TrainJob was stored with no queue
    label and no GPU of its own, while its runtime gives each node a whole GPU."""
    cluster = chain.cluster
    if "trainjobs.trainer.kubeflow.org" not in chain.crds:
        pytest.skip("Kubeflow Trainer's CRDs not installed")
    cluster.apply([_gpu_runtime("torchtune-one-gpu", 1)])
    before = chain.answers()
    stored = created(cluster, _trainjob_of("torchtune-one-gpu", "tune-1"))
    answered = {k: n - before.get(k, 0) for k, n in chain.answers().items() if n != before.get(k)}
    assert stored["metadata"]["labels"][QUEUE_LABEL] == "inference", answered
    # inference runs on MIG slices: the runtime's whole GPU becomes the tenant's class.
    limits = stored["spec"]["trainer"]["resourcesPerNode"]["limits"]
    assert limits == {"nvidia.com/mig-3g.40gb": "1"}
    # More than the tenant's maxGPUsPerPod (1 GPU-equivalent) in the runtime: refused.
    cluster.apply([_gpu_runtime("torchtune-eight-gpus", 8)])
    result = cluster.create(_trainjob_of("torchtune-eight-gpus", "tune-8"), check=False)
    assert result.returncode != 0
    assert "maxGPUsPerPod" in result.stderr


def test_a_trainjob_naming_a_runtime_quotaguard_cannot_read_is_denied(chain: Chain) -> None:
    if "trainjobs.trainer.kubeflow.org" not in chain.crds:
        pytest.skip("Kubeflow Trainer's CRDs not installed")
    result = chain.cluster.create(_trainjob_of("no-such-runtime", "tune-x"), check=False)
    assert result.returncode != 0
    assert 'runtime ClusterTrainingRuntime "no-such-runtime" cannot be read' in result.stderr


# --------------------------------------------------------------------------------------------
# GPUs under names other than nvidia.com/gpu


def _pod_asking(name: str, resources: dict[str, str]) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.example/app:1"}
    container["resources"] = {"limits": dict(resources)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "inference"},
        "spec": {"containers": [container]},
    }


def test_gpus_under_other_names_reach_quotaguard_and_are_refused_by_name(chain: Chain) -> None:
    """Seen passing as "no GPU" before: the API server did not send amd.com/gpu, and a MIG
    profile with media extensions was not counted."""
    cases = {
        "amd": ({"amd.com/gpu": "1"}, 'amd.com/gpu: "1"'),
        "mig-me": ({"nvidia.com/mig-1g.10gb.me": "1"}, "nvidia.com/mig-1g.10gb.me"),
        "hami": (
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"},
            'nvidia.com/gpumem: "8k", HAMi\'s share',  # the API server's canonical form
        ),
    }
    for name, (resources, named) in cases.items():
        result = chain.cluster.create(_pod_asking(f"other-{name}", resources), check=False)
        assert result.returncode != 0, name
        assert "quotaguard" in result.stderr and named in result.stderr, result.stderr
