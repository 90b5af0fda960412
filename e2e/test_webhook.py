"""The admission webhook as users meet it: `kubectl create` through a real kube-apiserver that
calls `quotaguard serve --components webhook`, registered with the shipped webhook/ manifests
(matchConditions, namespaceSelector, failurePolicy Fail), serving config/policy.yaml.

Assertions are on what the API server stores and on what kubectl prints (warnings and denials
on stderr). Whether the API server sent an object at all is read from the server's own counter
`quotaguard_admission_requests_total` on its HTTP port.

One quotaguard server serves the whole module. It reads a copy of the policy laid out like a
mounted ConfigMap, so the reload test can update it the way the kubelet does. Tests that stop
the webhook run on a private cluster.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from e2e.cluster import REPO_ROOT, Cluster, QuotaguardServer, wait_until

POLICY = REPO_ROOT / "config" / "policy.yaml"
SAMPLE_OBJECTS = REPO_ROOT / "config" / "tests" / "objects"
PILOT_OVERLAY = Path(__file__).resolve().parent / "manifests" / "pilot"

# Namespaces of config/policy.yaml's tenants, matched by their globs so that other e2e modules
# may use the literal names (inference, training, notebooks) without meeting these objects.
INFERENCE = "serving-webhook-e2e"  # tenant inference: "serving-*"
TRAINING = "research-webhook-e2e"  # tenant training: "research-*"
NOTEBOOKS = "nb-webhook-e2e"  # tenant notebooks: "nb-*"
NO_TENANT = "no-tenant-webhook-e2e"  # no tenant; unmatchedNamespaces: deny
IGNORED = "ignored-webhook-e2e"  # no tenant either, but labelled quotaguard.dev/ignore=true

REQUESTS_METRIC = "quotaguard_admission_requests_total"
GENERATION_METRIC = "quotaguard_policy_generation"
RELOAD_FAILURES_METRIC = "quotaguard_policy_reload_failures_total"
MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"
SHARED = "nvidia.com/gpu.shared"
GPU = "nvidia.com/gpu"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
H100_SELECTOR = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


# --------------------------------------------------------------------------------------------
# Objects


def pod(
    name: str,
    namespace: str,
    resources: Mapping[str, Any] | None = None,
    *,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A one-container Pod; `resources` is the container's `resources` (limits/requests)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if labels:
        metadata["labels"] = dict(labels)
    container: dict[str, Any] = {"name": "main", "image": "registry.example/app:1"}
    if resources is not None:
        container["resources"] = json.loads(json.dumps(resources))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [container]},
    }


def gpus(count: int, resource: str = GPU) -> dict[str, Any]:
    return {"limits": {resource: str(count)}}


def limits_of(stored: Mapping[str, Any], container: int = 0) -> dict[str, str]:
    found: dict[str, str] = stored["spec"]["containers"][container]["resources"]["limits"]
    return found


def requests_of(stored: Mapping[str, Any], container: int = 0) -> dict[str, str]:
    found: dict[str, str] = stored["spec"]["containers"][container]["resources"]["requests"]
    return found


def annotations_of(stored: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, str] = stored["metadata"].get("annotations") or {}
    return found


def labels_of(stored: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, str] = stored["metadata"].get("labels") or {}
    return found


def kubectl_warnings(stderr: str) -> list[str]:
    return [
        line.removeprefix("Warning: ")
        for line in stderr.splitlines()
        if line.startswith("Warning: ")
    ]


# --------------------------------------------------------------------------------------------
# The shared server


@dataclass
class Webhook:
    """The module's quotaguard server, its cluster, and the policy file it reads."""

    cluster: Cluster
    server: QuotaguardServer
    policy: Path

    def metrics(self) -> list[tuple[str, dict[str, str], float]]:
        with urllib.request.urlopen(f"{self.server.http_url}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return [
            (sample.name, dict(sample.labels), float(sample.value))
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]

    def metric(self, name: str, **selector: str) -> float:
        """The sum of the samples of `name` whose labels include `selector`."""
        return sum(
            value
            for sample, sample_labels, value in self.metrics()
            if sample == name and all(sample_labels.get(k) == v for k, v in selector.items())
        )

    def sent(self, **selector: str) -> float:
        """Admission requests the server has answered (optionally: operation, kind, result)."""
        return self.metric(REQUESTS_METRIC, **selector)

    def create(
        self, obj: Mapping[str, Any]
    ) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
        """`kubectl create`; the object as stored (read back) and kubectl's result."""
        result = self.cluster.create(obj)
        meta = obj["metadata"]
        stored = self.cluster.get(resource_of(obj), meta["name"], namespace=meta["namespace"])
        return stored, result

    def refused(self, obj: Mapping[str, Any], *extra: str) -> str:
        """`kubectl create` that must fail and store nothing; kubectl's stderr."""
        result = self.cluster.kubectl(
            "create", *extra, "-o", "json", "-f", "-", input=json.dumps(obj), check=False
        )
        assert result.returncode != 0, f"admitted: {result.stdout[:2000]}"
        assert not self.exists(obj), "a refused object was stored"
        return result.stderr

    def exists(self, obj: Mapping[str, Any]) -> bool:
        meta = obj["metadata"]
        found = self.cluster.kubectl(
            "get",
            resource_of(obj),
            meta["name"],
            "-n",
            meta["namespace"],
            "--ignore-not-found",
            "-o",
            "name",
        )
        return bool(found.stdout.strip())


def resource_of(obj: Mapping[str, Any]) -> str:
    """The kubectl resource name of a manifest's kind (fully qualified where kinds clash)."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    group = api_version.rpartition("/")[0]
    plural = {"Pod": "pods", "Job": "jobs", "JobSet": "jobsets", "ReplicaSet": "replicasets"}[kind]
    return f"{plural}.{group}" if group else plural


def write_configmap_file(path: Path, text: str) -> None:
    """Write `path` the way the kubelet updates a mounted ConfigMap: the file is a symlink to
    `..data/<name>`, and `..data` is swapped atomically to a new timestamped directory."""
    volume = path.parent
    previous = (volume / "..data").resolve() if (volume / "..data").is_symlink() else None
    version = volume / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    version.mkdir()
    (version / path.name).write_text(text)
    staged = volume / "..data_tmp"
    staged.symlink_to(version.name)
    os.replace(staged, volume / "..data")
    if not path.is_symlink():
        path.symlink_to(f"..data/{path.name}")
    if previous is not None:
        shutil.rmtree(previous)


@pytest.fixture(scope="module")
def webhook(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    policy = tmp_path_factory.mktemp("webhook-policy") / "policy.yaml"
    write_configmap_file(policy, POLICY.read_text())
    for name in (INFERENCE, TRAINING, NOTEBOOKS, NO_TENANT):
        cluster.create_namespace(name)
    cluster.create_namespace(IGNORED, labels={"quotaguard.dev/ignore": "true"})
    server = cluster.serve_quotaguard(
        policy, components="webhook", args=["--policy-poll-interval", "0.3"], name="qg-webhook-e2e"
    )
    try:
        yield Webhook(cluster, server, policy)
    finally:
        cluster.stop_quotaguard(server)
        cluster.kubectl(
            "delete",
            "namespace",
            INFERENCE,
            TRAINING,
            NOTEBOOKS,
            NO_TENANT,
            IGNORED,
            "--wait=false",
            "--ignore-not-found",
        )


# --------------------------------------------------------------------------------------------
# Rewrites


def test_inference_pod_is_rewritten_to_the_mig_slice_its_memory_hint_fits(webhook: Webhook) -> None:
    stored, result = webhook.create(
        pod("embedder", INFERENCE, gpus(1), annotations={"quotaguard.dev/gpu-memory": "8Gi"})
    )
    assert limits_of(stored) == {MIG_1G: "1"}
    assert requests_of(stored) == {MIG_1G: "1"}
    assert labels_of(stored)[QUEUE_LABEL] == "inference"
    assert annotations_of(stored)["quotaguard.dev/tenant"] == "inference"
    assert (
        annotations_of(stored)["quotaguard.dev/rewritten"]
        == "main: nvidia.com/gpu=1 -> nvidia.com/mig-1g.10gb=1"
    )
    assert kubectl_warnings(result.stderr) == [
        "main: nvidia.com/gpu=1 -> nvidia.com/mig-1g.10gb=1 (tenant inference, rule 1: best-fit "
        "for 8Gi)"
    ]


def test_notebook_pod_gets_a_time_sliced_gpu(webhook: Webhook) -> None:
    stored, _ = webhook.create(pod("lab", NOTEBOOKS, gpus(1)))
    assert limits_of(stored) == {SHARED: "1"}
    assert requests_of(stored) == {SHARED: "1"}
    assert labels_of(stored)[QUEUE_LABEL] == "notebooks"
    assert annotations_of(stored)["quotaguard.dev/tenant"] == "notebooks"


def test_training_job_template_is_rewritten_and_its_pod_is_not_rewritten_again(
    webhook: Webhook,
) -> None:
    cluster = webhook.cluster
    if "kube-controller-manager" not in cluster.processes:
        pytest.skip("QUOTAGUARD_E2E_NO_CONTROLLERS: no Job controller creates the pod")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "finetune", "namespace": TRAINING},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"quotaguard.dev/gpu-memory": "30Gi"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "registry.example/trainer:1",
                            "resources": gpus(1),
                        }
                    ],
                },
            },
        },
    }
    mutated_before = webhook.sent(operation="mutate", kind="Pod")
    validated_before = webhook.sent(operation="validate", kind="Pod")
    stored, result = webhook.create(job)
    template = stored["spec"]["template"]
    assert limits_of(template) == {MIG_3G: "1"}
    assert requests_of(template) == {MIG_3G: "1"}
    assert labels_of(stored)[QUEUE_LABEL] == "training"
    assert annotations_of(stored)["quotaguard.dev/tenant"] == "training"
    assert "trainer: nvidia.com/gpu=1 -> nvidia.com/mig-3g.40gb=1" in result.stderr

    def job_pod() -> dict[str, Any] | None:
        found = cluster.get(
            "pods", "-l", "batch.kubernetes.io/job-name=finetune", namespace=TRAINING
        )
        return found["items"][0] if found["items"] else None

    made = wait_until(job_pod, timeout=60, what="the Job's pod")
    assert limits_of(made) == {MIG_3G: "1"}
    # The pod carries no queue label of its own: Kueue accounts for the Job, not for its pods
    # again. Made by the job controller with the tenant stamp, it is not sent to /mutate
    # (matchCondition not-yet-decided-by-quotaguard), only to /validate.
    assert QUEUE_LABEL not in labels_of(made)
    wait_until(
        lambda: webhook.sent(operation="validate", kind="Pod") > validated_before,
        timeout=10,
        what="the pod's validate request",
    )
    assert webhook.sent(operation="mutate", kind="Pod") == mutated_before


def test_a_pod_that_names_a_job_it_was_not_made_by_is_rewritten_and_queued(
    webhook: Webhook,
) -> None:
    """A tenant writes an owner reference to a real CPU-only Job and the stamp quotaguard puts
    on a Job's pods into a bare Pod asking for 8 GPUs: it is not believed (the request does not
    come from the job controller), so the Pod gets the tenant's queue and the class's nodes."""
    cpu_job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "cpu-only-etl", "namespace": TRAINING},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "etl", "image": "registry.example/etl:1"}],
                }
            },
        },
    }
    stored_job, _ = webhook.create(cpu_job)
    forged = pod(
        "forged-owner",
        TRAINING,
        gpus(8),
        annotations={"quotaguard.dev/tenant": "training"},
    )
    forged["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "cpu-only-etl",
            "uid": stored_job["metadata"]["uid"],
        }
    ]
    stored, _ = webhook.create(forged)
    assert labels_of(stored)[QUEUE_LABEL] == "training"
    assert stored["spec"]["nodeSelector"] == H100_SELECTOR


def test_jobset_replicated_job_template_is_rewritten(webhook: Webhook) -> None:
    jobset = yaml.safe_load((SAMPLE_OBJECTS / "jobset.yaml").read_text())
    jobset["metadata"]["namespace"] = INFERENCE
    workers = jobset["spec"]["replicatedJobs"][0]
    workers["template"]["spec"]["template"]["metadata"] = {
        "annotations": {"quotaguard.dev/gpu-memory": "20Gi"}
    }
    workers["template"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][GPU] = 1
    stored, _ = webhook.create(jobset)
    jobs = stored["spec"]["replicatedJobs"]
    rewritten = jobs[0]["template"]["spec"]["template"]
    assert {k: v for k, v in limits_of(rewritten).items() if k.startswith("nvidia.com/")} == {
        MIG_3G: "1"
    }
    assert annotations_of(rewritten)["quotaguard.dev/rewritten"] == (
        "workers/trainer: nvidia.com/gpu=1 -> nvidia.com/mig-3g.40gb=1"
    )
    coordinator = jobs[1]["template"]["spec"]["template"]
    assert limits_of(coordinator) == {"cpu": "2", "memory": "8Gi"}
    assert labels_of(stored)[QUEUE_LABEL] == "inference"


def test_volcano_job_task_template_is_rewritten(webhook: Webhook) -> None:
    vcjob = yaml.safe_load((SAMPLE_OBJECTS / "volcano-job.yaml").read_text())
    vcjob["metadata"]["namespace"] = TRAINING
    stored, _ = webhook.create(vcjob)
    ps, worker = (task["template"] for task in stored["spec"]["tasks"])
    assert limits_of(worker) == {MIG_3G: "1"}
    assert requests_of(worker) == {MIG_3G: "1"}
    assert annotations_of(worker)["quotaguard.dev/tenant"] == "training"
    assert limits_of(ps) == {"cpu": "4"}
    assert annotations_of(stored)["quotaguard.dev/tenant"] == "training"


def test_a_replicaset_template_is_rewritten_and_queued(webhook: Webhook) -> None:
    """A kind Kueue does not integrate but the kind table does: its pods would otherwise take
    whole GPUs; the template is rewritten and the queue label is put on the template."""
    replicaset = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "bare-rs", "namespace": TRAINING},
        "spec": {
            "replicas": 0,  # no pods: only the ReplicaSet object matters here
            "selector": {"matchLabels": {"app": "bare-rs"}},
            "template": {
                "metadata": {
                    "labels": {"app": "bare-rs"},
                    "annotations": {"quotaguard.dev/gpu-memory": "30Gi"},
                },
                "spec": {"containers": [{"name": "server", "image": "x", "resources": gpus(1)}]},
            },
        },
    }
    stored, _ = webhook.create(replicaset)
    template = stored["spec"]["template"]
    assert limits_of(template) == {MIG_3G: "1"}
    assert labels_of(template)[QUEUE_LABEL] == "training"


def training_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": TRAINING},
        "spec": {
            "suspend": True,  # no pods: only the Job object matters here
            "template": {
                "metadata": {"annotations": {"quotaguard.dev/gpu-memory": "30Gi"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "trainer", "image": "x", "resources": gpus(1)}],
                },
            },
        },
    }


@pytest.mark.parametrize("server_side", [False, True], ids=["client-side", "server-side"])
def test_kubectl_apply_creates_a_rewritten_job(webhook: Webhook, server_side: bool) -> None:
    job = training_job(f"applied-{'ssa' if server_side else 'csa'}")
    mode = ["--server-side", "--field-manager=e2e"] if server_side else []
    result = webhook.cluster.kubectl("apply", *mode, "-f", "-", input=json.dumps(job))
    assert "trainer: nvidia.com/gpu=1 -> nvidia.com/mig-3g.40gb=1" in result.stderr
    stored = webhook.cluster.get("jobs.batch", job["metadata"]["name"], namespace=TRAINING)
    assert limits_of(stored["spec"]["template"]) == {MIG_3G: "1"}
    assert labels_of(stored)[QUEUE_LABEL] == "training"


# Re-applying a manifest: `kubectl apply` merges the manifest's `nvidia.com/gpu` back into the
# stored object (next to the class for Pods and Jobs; custom resources get the manifest's
# templates back whole). The UPDATE webhooks put back what CREATE decided.

KEPT = "(tenant training: the class it was created with)"


def apply(webhook: Webhook, obj: Mapping[str, Any], *mode: str) -> tuple[dict[str, Any], list[str]]:
    """`kubectl apply` that must succeed; the object as stored and kubectl's warnings."""
    result = webhook.cluster.kubectl("apply", *mode, "-f", "-", input=json.dumps(obj), check=False)
    assert result.returncode == 0, result.stderr
    meta = obj["metadata"]
    stored = webhook.cluster.get(resource_of(obj), meta["name"], namespace=meta["namespace"])
    return stored, kubectl_warnings(result.stderr)


def test_applying_a_gpu_pod_again_changes_nothing_and_its_label_updates_are_not_sent(
    webhook: Webhook,
) -> None:
    manifest = pod(
        "reapplied", TRAINING, gpus(1), annotations={"quotaguard.dev/gpu-memory": "30Gi"}
    )
    first, _ = apply(webhook, manifest)
    assert limits_of(first) == {MIG_3G: "1"}
    sent = webhook.sent(kind="Pod")
    # refused as "pod updates may not change fields other than ..." before
    again, warnings = apply(webhook, manifest)
    assert again["spec"] == first["spec"]
    assert warnings == [f"main: nvidia.com/gpu=1 -> nvidia.com/mig-3g.40gb=1 {KEPT}"]
    assert webhook.sent(kind="Pod") == sent + 1  # mutate; a Pod's update is not validated
    # A controller's label update of a GPU pod holds no plain GPU next to its class: not sent.
    webhook.cluster.kubectl("label", "pod", "reapplied", "-n", TRAINING, "team=vision")
    webhook.cluster.kubectl("annotate", "pod", "reapplied", "-n", TRAINING, "seen=yes")
    assert webhook.sent(kind="Pod") == sent + 1


@pytest.mark.parametrize("server_side", [False, True], ids=["client-side", "server-side"])
def test_applying_a_suspended_job_again_keeps_its_gpu_request_rewritten(
    webhook: Webhook, server_side: bool
) -> None:
    job = training_job(f"reapplied-{'ssa' if server_side else 'csa'}")
    mode = ["--server-side", "--field-manager=e2e"] if server_side else []
    first, _ = apply(webhook, job, *mode)
    again, warnings = apply(webhook, job, *mode)
    template = again["spec"]["template"]
    assert limits_of(template) == {MIG_3G: "1"}
    assert requests_of(template) == {MIG_3G: "1"}
    assert template == first["spec"]["template"]
    assert warnings == [f"trainer: nvidia.com/gpu=1 -> nvidia.com/mig-3g.40gb=1 {KEPT}"]
    # Kueue admitting it (only Kueue may resume a GPU Job it holds): the update goes through
    # the UPDATE webhooks untouched.
    webhook.cluster.kubectl(
        "--as=system:serviceaccount:kueue-system:kueue-controller-manager",
        "--as-group=system:masters",
        "patch",
        "job",
        job["metadata"]["name"],
        "-n",
        TRAINING,
        "--type=merge",
        "-p",
        '{"spec": {"suspend": false}}',
    )
    admitted = webhook.cluster.get("jobs.batch", job["metadata"]["name"], namespace=TRAINING)
    assert admitted["spec"]["suspend"] is False
    assert admitted["spec"]["template"] == template


def test_applying_a_running_job_again_succeeds_and_changes_nothing(webhook: Webhook) -> None:
    job = training_job("reapplied-running")
    del job["spec"]["suspend"]  # running at once, as a Job Kueue has admitted
    first, _ = apply(webhook, job)
    assert first["spec"]["suspend"] is False
    # refused as "spec.template: Invalid value: ...: field is immutable" before
    again, _ = apply(webhook, job)
    assert again["spec"]["template"] == first["spec"]["template"]
    assert limits_of(again["spec"]["template"]) == {MIG_3G: "1"}


@pytest.mark.parametrize(
    ("sample", "changed"),
    [
        ("volcano-job.yaml", "worker/worker: nvidia.com/gpu=1 -> nvidia.com/mig-3g.40gb=1"),
        ("jobset.yaml", None),  # 8 GPUs stay whole H100s; their placement is what comes back
    ],
)
def test_applying_a_custom_resource_again_gets_its_rewritten_templates_back(
    webhook: Webhook, sample: str, changed: str | None
) -> None:
    obj = yaml.safe_load((SAMPLE_OBJECTS / sample).read_text())
    obj["metadata"].update(namespace=TRAINING, name="reapplied")
    first, _ = apply(webhook, obj)
    # A custom resource's lists are replaced whole: the templates come back as the manifest
    # wrote them (plain GPU, no nodeSelector, no quotaguard annotations), and are restored.
    again, warnings = apply(webhook, obj)
    assert again["spec"] == first["spec"]
    assert warnings == ([f"{changed} {KEPT}"] if changed else [])


def test_moving_a_suspended_job_to_another_tenants_queue_is_refused(webhook: Webhook) -> None:
    job = training_job("moved")
    webhook.create(job)
    moved = webhook.cluster.kubectl(
        "label",
        "job",
        "moved",
        "-n",
        TRAINING,
        f"{QUEUE_LABEL}=inference",
        "--overwrite",
        check=False,
    )
    assert moved.returncode != 0
    assert (
        denial(
            "jobs-update.validate.quotaguard.dev",
            'tenant "training": queue "inference" (label kueue.x-k8s.io/queue-name) belongs to '
            'tenant "inference"',
        )
        in moved.stderr
    ), moved.stderr
    # Nor may it move to a queue no tenant owns that the policy does not list in the tenant's
    # extraQueues (Kueue lets a suspended Job move, but not past the tenant's quota).
    elsewhere = webhook.cluster.kubectl(
        "label",
        "job",
        "moved",
        "-n",
        TRAINING,
        f"{QUEUE_LABEL}=training-low",
        "--overwrite",
        check=False,
    )
    assert elsewhere.returncode != 0
    assert 'queue "training-low" (label kueue.x-k8s.io/queue-name) is not a queue' in (
        elsewhere.stderr
    )
    stored = webhook.cluster.get("jobs.batch", "moved", namespace=TRAINING)
    assert labels_of(stored)[QUEUE_LABEL] == "training"


# --------------------------------------------------------------------------------------------
# Denials


def denial(webhook_name: str, message: str) -> str:
    return f'admission webhook "{webhook_name}" denied the request: {message}'


def test_class_hint_the_tenant_does_not_allow_is_refused(webhook: Webhook) -> None:
    stderr = webhook.refused(
        pod("greedy", INFERENCE, gpus(1), annotations={"quotaguard.dev/gpu-class": "shared"})
    )
    assert (
        denial(
            "pods.validate.quotaguard.dev",
            'tenant "inference": quotaguard.dev/gpu-class "shared" names a class the tenant '
            "does not allow (allowedClasses: h100-1g.10gb, h100-3g.40gb)",
        )
        in stderr
    )


def test_more_than_max_gpus_per_pod_is_refused(webhook: Webhook) -> None:
    stderr = webhook.refused(pod("wide", TRAINING, gpus(9)))
    assert (
        denial(
            "pods.validate.quotaguard.dev",
            'tenant "training": at most 8 GPU-equivalents per pod (maxGPUsPerPod); pod asks for 9 '
            "(main: nvidia.com/gpu: 9)",
        )
        in stderr
    )


def test_gpu_requests_other_than_limits_are_refused(webhook: Webhook) -> None:
    overcommitted = {"limits": {GPU: "2"}, "requests": {GPU: "1"}}
    # A Volcano Job's pods are not validated by the API server when the Job is created: the
    # webhook is what refuses it up front.
    vcjob = yaml.safe_load((SAMPLE_OBJECTS / "volcano-job.yaml").read_text())
    vcjob["metadata"]["namespace"] = TRAINING
    vcjob["metadata"]["name"] = "overcommit"
    vcjob["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["resources"] = overcommitted
    stderr = webhook.refused(vcjob)
    assert (
        denial(
            "volcanojobs.validate.quotaguard.dev",
            'tenant "training": container "worker/worker" requests nvidia.com/gpu=1 but limits it '
            "to 2; GPUs cannot be overcommitted",
        )
        in stderr
    ), stderr
    # A Pod is refused too, by the API server's own validation of extended resources, which
    # runs after mutation (left alone) and before the validating webhooks.
    stderr = webhook.refused(pod("overcommit", TRAINING, overcommitted))
    assert "must be equal to nvidia.com/gpu limit of 2" in stderr, stderr


def test_queue_of_another_tenant_is_refused(webhook: Webhook) -> None:
    stderr = webhook.refused(
        pod(
            "borrower",
            INFERENCE,
            gpus(1),
            annotations={"quotaguard.dev/gpu-memory": "8Gi"},
            labels={QUEUE_LABEL: "training"},
        )
    )
    assert (
        denial(
            "pods.validate.quotaguard.dev",
            'tenant "inference": queue "training" (label kueue.x-k8s.io/queue-name) belongs to '
            'tenant "training"',
        )
        in stderr
    )


def test_the_default_queue_and_another_scheduler_are_refused(webhook: Webhook) -> None:
    """Kueue's `default` LocalQueue is no tenant's: a GPU Pod naming it (or scheduled by another
    scheduler) would run past the tenant's quota."""
    escape = pod("escape", TRAINING, gpus(8), labels={QUEUE_LABEL: "default"})
    escape["spec"]["schedulerName"] = "my-scheduler"
    stderr = webhook.refused(escape)
    assert (
        denial(
            "pods.validate.quotaguard.dev",
            'tenant "training": (1) queue "default" (label kueue.x-k8s.io/queue-name) is not a '
            'queue of the tenant; GPU workloads in namespace "research-webhook-e2e" go to '
            '"training"',
        )
        in stderr
    )
    assert '(2) schedulerName "my-scheduler" is not a scheduler' in stderr


def test_node_selector_against_the_class_placement_is_refused(webhook: Webhook) -> None:
    elsewhere = pod("misplaced", TRAINING, gpus(2))
    elsewhere["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    stderr = webhook.refused(elsewhere)
    assert (
        denial(
            "pods.mutate.quotaguard.dev",
            'tenant "training": class "h100" runs on nodes with '
            "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3, but the nodeSelector sets "
            "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB",
        )
        in stderr
    ), stderr
    # Without a conflict the class's nodeSelector is merged in.
    stored, _ = webhook.create(pod("placed", TRAINING, gpus(2)))
    assert stored["spec"]["nodeSelector"] == H100_SELECTOR
    assert limits_of(stored) == {GPU: "2"}


def test_gpu_pod_in_a_namespace_no_tenant_owns_is_refused(webhook: Webhook) -> None:
    stderr = webhook.refused(pod("stray", NO_TENANT, gpus(1)))
    assert (
        denial(
            "pods.validate.quotaguard.dev",
            f'namespace "{NO_TENANT}" belongs to no tenant of policy "gpu-platform" and '
            "unmatchedNamespaces is deny",
        )
        in stderr
    )


# --------------------------------------------------------------------------------------------
# What is never sent


def test_exempt_namespaces_and_cpu_pods_are_not_sent(webhook: Webhook) -> None:
    cluster = webhook.cluster
    before = webhook.sent()
    system_pod = pod("gpu-probe-webhook-e2e", "kube-system", gpus(1))
    try:
        for obj in (
            system_pod,
            pod("probe", IGNORED, gpus(1)),  # would be denied (no tenant) if it were sent
            pod("cpu-only", INFERENCE, {"limits": {"cpu": "1"}}),
            pod("bare", NO_TENANT),  # likewise
        ):
            stored, result = webhook.create(obj)
            asked = obj["spec"]["containers"][0].get("resources", {})
            defaulted = {**asked, "requests": asked["limits"]} if asked else {}  # requests = limits
            assert stored["spec"]["containers"][0]["resources"] == defaulted
            assert not any(k.startswith("quotaguard.dev/") for k in annotations_of(stored))
            assert QUEUE_LABEL not in labels_of(stored)
            assert not kubectl_warnings(result.stderr)
        assert webhook.sent() == before, "the API server sent an object it should not have"
        # The counter does move for an object that is sent: mutate and validate.
        webhook.create(pod("counted", NOTEBOOKS, gpus(1)))
        assert webhook.sent() == before + 2
    finally:
        cluster.kubectl(
            "delete",
            "pod",
            system_pod["metadata"]["name"],
            "-n",
            "kube-system",
            "--wait=false",
            "--ignore-not-found",
        )


# --------------------------------------------------------------------------------------------
# Dry run


def test_server_dry_run_gets_the_same_answer_and_stores_nothing(webhook: Webhook) -> None:
    cluster = webhook.cluster
    hinted = pod("dry", INFERENCE, gpus(1), annotations={"quotaguard.dev/gpu-memory": "24Gi"})
    dry = cluster.kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(hinted)
    )
    answered = json.loads(dry.stdout)
    assert not webhook.exists(hinted)
    stored, real = webhook.create(hinted)
    for part in (limits_of, requests_of, labels_of, annotations_of):
        assert part(answered) == part(stored)
    assert limits_of(stored) == {MIG_3G: "1"}
    assert kubectl_warnings(dry.stderr) == kubectl_warnings(real.stderr) != []

    wide = pod("dry-wide", TRAINING, gpus(9))
    assert webhook.refused(wide, "--dry-run=server") == webhook.refused(wide)


# --------------------------------------------------------------------------------------------
# quotaguard review, offline, answers what the server answered


def run_review(policy: Path, manifest: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "quotaguard",
            "review",
            "--policy",
            str(policy),
            str(manifest),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
        check=False,
    )


def at_pointer(obj: Any, pointer: str) -> Any:
    for token in pointer.lstrip("/").split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        obj = obj[int(token)] if isinstance(obj, list) else obj[token]
    return obj


def test_review_cli_reproduces_the_servers_answer(webhook: Webhook, tmp_path: Path) -> None:
    manifest = pod(
        "reviewed",
        TRAINING,
        gpus(1),
        annotations={"quotaguard.dev/gpu-memory": "16Gi"},
    )
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(manifest))
    offline = run_review(POLICY, path)
    assert offline.returncode == 0, offline.stderr
    response = json.loads(offline.stdout)["response"]
    patch = json.loads(base64.b64decode(response["patch"]))

    stored, result = webhook.create(manifest)
    assert response["allowed"] is True
    assert kubectl_warnings(result.stderr) == response["warnings"]
    # Every operation of the offline patch is what the API server stored.
    for op in patch:
        if op["op"] == "remove":
            parent, _, leaf = op["path"].rpartition("/")
            assert leaf.replace("~1", "/") not in at_pointer(stored, parent), op
        else:
            assert at_pointer(stored, op["path"]) == op["value"], op

    # The running server, asked directly with the review the CLI built, answers the same.
    body = json.dumps(_review_body(manifest)).encode()
    served = _post(webhook.server, "/mutate", body)["response"]
    assert served["allowed"] is True
    assert json.loads(base64.b64decode(served["patch"])) == patch
    assert served["warnings"] == response["warnings"]

    refused = pod("reviewed-wide", INFERENCE, gpus(3))
    path.write_text(yaml.safe_dump(refused))
    offline = run_review(POLICY, path)
    assert offline.returncode == 1
    assert json.loads(offline.stdout)["response"]["allowed"] is False
    message = json.loads(offline.stdout)["response"]["status"]["message"]
    assert f"denied the request: {message}" in webhook.refused(refused)


def _review_body(obj: Mapping[str, Any]) -> dict[str, Any]:
    from quotaguard.admission import make_review

    return dict(make_review(obj, namespace=obj["metadata"]["namespace"], uid="e2e-review"))


def _post(server: QuotaguardServer, path: str, body: bytes) -> Any:
    context = ssl.create_default_context(cadata=server.cert.ca_pem.decode())
    request = urllib.request.Request(
        f"{server.webhook_url}{path}",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10, context=context) as resp:
        return json.load(resp)


# --------------------------------------------------------------------------------------------
# Policy hot reload


def test_policy_file_changes_take_effect_without_restart(webhook: Webhook) -> None:
    original = webhook.policy.read_text()
    namespace = "hotreload-webhook-e2e"
    webhook.cluster.create_namespace(namespace)
    try:
        assert "unmatchedNamespaces is deny" in webhook.refused(pod("before", namespace, gpus(1)))

        # The notebooks tenant takes the namespace over.
        grown = original.replace(
            'namespaces: ["nb-*", notebooks]', f'namespaces: ["nb-*", notebooks, {namespace}]'
        )
        assert grown != original
        replace_policy(webhook, grown)
        stored, _ = webhook.create(pod("after", namespace, gpus(1)))
        assert limits_of(stored) == {SHARED: "1"}
        assert annotations_of(stored)["quotaguard.dev/tenant"] == "notebooks"

        # An invalid edit is refused, logged and counted; the last good policy keeps answering.
        in_force = webhook.metric(GENERATION_METRIC)
        failures = webhook.metric(RELOAD_FAILURES_METRIC, reason="invalid")
        write_configmap_file(webhook.policy, grown.replace("maxGPUsPerPod: 1", "maxGPUsPerPod: -3"))
        wait_until(
            lambda: webhook.metric(RELOAD_FAILURES_METRIC, reason="invalid") > failures,
            timeout=20,
            what="the invalid policy refused",
        )
        assert webhook.metric(GENERATION_METRIC) == in_force
        stored, _ = webhook.create(pod("still", namespace, gpus(1)))
        assert limits_of(stored) == {SHARED: "1"}
        assert "policy refused" in webhook.server.process.log.read_text()

        replace_policy(webhook, original)
        assert "unmatchedNamespaces is deny" in webhook.refused(pod("again", namespace, gpus(1)))
    finally:
        if webhook.policy.read_text() != original:  # the module's other tests need it back
            replace_policy(webhook, original)
        webhook.cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def replace_policy(webhook: Webhook, text: str) -> None:
    """Write a valid policy and wait until the server has put it in force."""
    generation = webhook.metric(GENERATION_METRIC)
    write_configmap_file(webhook.policy, text)
    wait_until(
        lambda: webhook.metric(GENERATION_METRIC) > generation,
        timeout=20,
        what="the changed policy in force",
    )


# --------------------------------------------------------------------------------------------
# The webhook unreachable: failurePolicy Fail (shipped) and Ignore (the pilot component)


def pilot_webhook_configurations(cluster: Cluster) -> list[dict[str, Any]]:
    rendered = cluster.kubectl("kustomize", str(PILOT_OVERLAY)).stdout
    return [
        doc
        for doc in yaml.safe_load_all(rendered)
        if doc and doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    ]


def test_webhook_down_fail_refuses_gpu_pods_and_pilot_ignore_admits_them(
    make_cluster: Callable[..., Cluster],
) -> None:
    private = make_cluster(controllers=False, kwok=False, crds=False)
    private.create_namespace("research-pilot", labels={"quotaguard.dev/pilot": "true"})
    server = private.serve_quotaguard(POLICY, components="webhook")
    hinted = {"quotaguard.dev/gpu-memory": "20Gi"}
    try:
        up = json.loads(
            private.create(pod("up", "research-pilot", gpus(1), annotations=hinted)).stdout
        )
        assert limits_of(up) == {MIG_3G: "1"}

        server.process.stop()
        down = private.create(
            pod("down", "research-pilot", gpus(1), annotations=hinted), check=False
        )
        assert down.returncode != 0
        assert re.search(r'failed calling webhook "pods\.mutate\.quotaguard\.dev"', down.stderr), (
            down.stderr
        )
        cpu = json.loads(
            private.create(pod("cpu", "research-pilot", {"limits": {"cpu": "1"}})).stdout
        )
        assert limits_of(cpu) == {"cpu": "1"}

        # The pilot rollout (docs/deploy.md): failurePolicy Ignore on labelled namespaces.
        pilot = pilot_webhook_configurations(private)
        assert {h["failurePolicy"] for c in pilot for h in c["webhooks"]} == {"Ignore"}
        private.register_webhooks(server.webhook_port, cert=server.cert, configs=pilot)
        admitted = json.loads(
            private.create(pod("ignored", "research-pilot", gpus(1), annotations=hinted)).stdout
        )
        assert limits_of(admitted) == {GPU: "1"}, "admitted, and unrewritten"
        assert QUEUE_LABEL not in labels_of(admitted)
        assert "quotaguard.dev/tenant" not in annotations_of(admitted)
    finally:
        private.stop_quotaguard(server)
