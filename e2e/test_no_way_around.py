"""Two ways a tenant could get GPUs outside its queue, closed, through the real kube-apiserver,
kube-controller-manager (its controllers under their own service accounts) and Kueue v0.17.0
with its webhooks, next to quotaguard's shipped webhook/ manifests.

1. A Deployment created CPU-only (never sent to quotaguard), then edited to ask for GPUs with
   a hand-written `quotaguard.dev/tenant` stamp in its template. quotaguard decides the update
   like a CREATE: the Deployment gets the tenant's queue, so Kueue gates its Pods and accounts
   them in a Workload; the Deployment controller makes one ReplicaSet of it (quotaguard never
   rewrites the ReplicaSet, which would make it make one after another).
2. A tenant user creates a GPU Pod whose controller ownerReference names the tenant's own Job.
   Kueue would account it through the Job and never gate it; quotaguard refuses it, since only
   the job controller makes a Job's Pods, and the job controller's Pods still run.

And the GPU edit of (1) arriving undecided (quotaguard's mutating UPDATE webhooks fail open) is
refused by the validating webhook that fails closed for updates changing container resources.
Each test was seen failing against the admission before these changes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e import build
from e2e.cluster import Cluster, QuotaguardServer, wait_until, whole_gpu_node
from e2e.kueue import (
    KUEUE_SAMPLES,
    POLICY,
    KueueProcess,
    sample_documents,
    start_kueue,
    training_job,
)

GPU = "nvidia.com/gpu"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
TENANT = "quotaguard.dev/tenant"
USER = "alice@example.com"
NAMESPACE = "training"
MUTATING = "00-quotaguard-mutating"


@pytest.fixture(scope="module")
def cluster(
    make_module_cluster: Callable[..., Cluster], toolchain: build.Toolchain
) -> Iterator[Cluster]:
    binary = build.kueue_binary()
    if binary is None:
        pytest.skip("Kueue controller not built (optional e2e.build step)")
    if toolchain.kueue_webhook_dir is None or not toolchain.kueue_webhook_dir.exists():
        pytest.skip("Kueue's webhook manifests not copied (optional e2e.build step)")
    made = make_module_cluster(controllers=True)
    made.add_nodes(whole_gpu_node("h100-0", 8), whole_gpu_node("h100-1", 8))
    made.apply(sample_documents(KUEUE_SAMPLES, "namespaces.yaml", "resourceflavors.yaml"))
    for doc in sample_documents(KUEUE_SAMPLES, "clusterqueues.yaml"):
        made.create(doc)
    made.apply(sample_documents(KUEUE_SAMPLES, "localqueues.yaml"))
    # The tenant's user may do what a namespace editor may.
    made.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "alice-edits", "namespace": NAMESPACE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "edit",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        }
    )
    kueue: KueueProcess = start_kueue(made, binary)
    quotaguard: QuotaguardServer = made.serve_quotaguard(
        POLICY, components="webhook", name="qg-no-way-around"
    )
    yield made
    made.stop_quotaguard(quotaguard)
    made.unregister_webhooks(kueue.webhooks)


def as_user(cluster: Cluster, verb: str, manifest: dict[str, Any]) -> Any:
    """`kubectl VERB` of `manifest` as the tenant's user: the API server's userInfo is theirs."""
    return cluster.kubectl(f"--as={USER}", verb, "-f", "-", input=json.dumps(manifest), check=False)


def workload_owned_by(cluster: Cluster, uid: str) -> dict[str, Any] | None:
    for item in cluster.get("workloads.kueue.x-k8s.io", namespace=NAMESPACE)["items"]:
        if any(o.get("uid") == uid for o in item["metadata"].get("ownerReferences") or []):
            found: dict[str, Any] = item
            return found
    return None


def pods_with(cluster: Cluster, selector: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = cluster.get("pods", "-l", selector, namespace=NAMESPACE)["items"]
    return found


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def deployment(
    name: str, replicas: int, resources: dict[str, Any], **annotations: str
) -> dict[str, Any]:
    template: dict[str, Any] = {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "containers": [
                {"name": "server", "image": "registry.example/server:1", "resources": resources}
            ]
        },
    }
    if annotations:
        template["metadata"]["annotations"] = dict(annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        },
    }


@pytest.mark.parametrize("forged", [True, False], ids=["forged-stamp", "no-stamp"])
def test_a_cpu_deployment_edited_to_gain_gpus_is_queued_by_kueue(
    cluster: Cluster, forged: bool
) -> None:
    """With the hand-written stamp, the Pods once ran outside every queue; without it, each new
    ReplicaSet was rewritten and the Deployment controller made one after another."""
    name = "forged" if forged else "edited"
    created = as_user(cluster, "create", deployment(name, 0, {"limits": {"cpu": "1"}}))
    assert created.returncode == 0, created.stderr
    stamp = {TENANT: NAMESPACE} if forged else {}
    edited = as_user(cluster, "replace", deployment(name, 1, {"limits": {GPU: "4"}}, **stamp))
    assert edited.returncode == 0, edited.stderr

    pod = wait_until(
        lambda: next(iter(pods_with(cluster, f"app={name}")), None),
        timeout=60,
        what="the edited Deployment's Pod",
    )
    # Kueue gated it and accounts it in a Workload: it runs only within the tenant's quota
    workload = wait_until(
        lambda: workload_owned_by(cluster, pod["metadata"]["uid"]),
        timeout=30,
        what="Kueue's Workload for the Pod (a Pod outside every queue has none)",
    )
    podsets = workload["spec"]["podSets"]
    assert podsets[0]["template"]["spec"]["containers"][0]["resources"]["limits"][GPU] == "4"
    stored = cluster.get("deployment", name, namespace=NAMESPACE)
    # decided like a CREATE: the tenant's queue, the class's nodes, the decision recorded
    assert stored["metadata"]["labels"][QUEUE_LABEL] == "training"
    template = stored["spec"]["template"]
    assert template["metadata"]["labels"][QUEUE_LABEL] == "training"
    assert template["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert template["metadata"]["annotations"]["quotaguard.dev/decided-gpus"] == (
        "server=nvidia.com/gpu:4"
    )

    # One ReplicaSet of the GPU template, made once: never rewritten, so no rollout loop.
    time.sleep(5)
    replica_sets = cluster.get("replicasets", "-l", f"app={name}", namespace=NAMESPACE)["items"]
    assert len(replica_sets) <= 2, [r["metadata"]["name"] for r in replica_sets]
    assert not cluster.get("deployment", name, namespace=NAMESPACE)["status"].get("collisionCount")


def test_a_pod_a_tenant_makes_for_its_own_job_is_refused(cluster: Cluster) -> None:
    job = json.loads(cluster.create(training_job("owns-nothing", 1)).stdout)
    assert job["metadata"]["labels"][QUEUE_LABEL] == "training"
    uid = job["metadata"]["uid"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "rides-along",
            "namespace": NAMESPACE,
            "annotations": {TENANT: NAMESPACE},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "owns-nothing",
                    "uid": uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.example/trainer:1",
                    "resources": {"limits": {GPU: "8"}},
                }
            ],
        },
    }
    refused = as_user(cluster, "create", pod)
    assert refused.returncode != 0, "the Pod was created: Kueue would neither gate nor count it"
    assert 'names Job "owns-nothing" as its controller' in refused.stderr
    assert f"created by {USER}" in refused.stderr
    assert cluster.kubectl("get", "pod", "rides-along", "-n", NAMESPACE, check=False).returncode

    # The Job's own Pod, which the job controller makes once Kueue admits the Job, is made.
    made = wait_until(
        lambda: next(iter(pods_with(cluster, "batch.kubernetes.io/job-name=owns-nothing")), None),
        timeout=60,
        what="the job controller's Pod of the admitted Job",
    )
    assert made["spec"]["containers"][0]["resources"]["limits"] == {GPU: "8"}
    assert ADMISSION_GATE not in gates(made)


def test_a_gpu_edit_the_mutating_webhook_did_not_decide_is_refused(cluster: Cluster) -> None:
    """The mutating UPDATE webhooks fail open (Kueue's unsuspend must never wait for them), so
    the decision is enforced by validation, which fails closed for the updates that change a
    container's resources: with quotaguard's mutating configuration gone (as if its UPDATE call
    had timed out), the GPU edit is refused, and an update that changes no resources passes."""
    created = as_user(cluster, "create", deployment("undecided", 0, {"limits": {"cpu": "1"}}))
    assert created.returncode == 0, created.stderr
    registered = cluster.get("mutatingwebhookconfiguration", MUTATING)
    for field in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
        registered["metadata"].pop(field, None)
    cluster.kubectl("delete", "mutatingwebhookconfiguration", MUTATING)
    try:
        stamp = {TENANT: NAMESPACE, "quotaguard.dev/decided-gpus": "server=nvidia.com/gpu:4"}
        edited = as_user(
            cluster, "replace", deployment("undecided", 1, {"limits": {GPU: "4"}}, **stamp)
        )
        assert edited.returncode != 0, "an undecided GPU edit was stored"
        assert "deployments-resources.validate.quotaguard.dev" in edited.stderr
        assert "retry it" in edited.stderr
        labelled = cluster.kubectl(
            f"--as={USER}",
            "label",
            "deployment",
            "undecided",
            "-n",
            NAMESPACE,
            "team=a",
            check=False,
        )
        assert labelled.returncode == 0, labelled.stderr
    finally:
        cluster.create(registered)


def gpu_pod(name: str, gpus: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.example/trainer:1",
                    "resources": {"limits": {GPU: str(gpus)}},
                }
            ],
        },
    }


def patch_pod(
    cluster: Cluster, name: str, operations: list[dict[str, Any]], *extra: str, user: str | None
) -> Any:
    """`kubectl patch pod NAME --type=json`, as `user` (None: the admin; `extra`: e.g. a
    subresource)."""
    impersonation = [f"--as={user}"] if user is not None else []
    return cluster.kubectl(
        *impersonation,
        "patch",
        "pod",
        name,
        "-n",
        NAMESPACE,
        "--type=json",
        "-p",
        json.dumps(operations),
        *extra,
        check=False,
    )


def patch_training_queue(cluster: Cluster, operations: list[dict[str, Any]]) -> None:
    cluster.kubectl(
        "patch", "clusterqueue", "training", "--type=json", "-p", json.dumps(operations)
    )


TRAINING_GPU_QUOTA = "/spec/resourceGroups/1/flavors/0/resources/0"


def training_gpu_quota(cluster: Cluster) -> int:
    spec = cluster.get("clusterqueue", "training")["spec"]
    quota = spec["resourceGroups"][1]["flavors"][0]["resources"][0]
    assert quota["name"] == GPU
    return int(quota["nominalQuota"])


def set_training_gpu_quota(cluster: Cluster, gpus: int) -> None:
    """The training ClusterQueue's H100 nominal quota (room next to what the tests above hold)."""
    patch_training_queue(
        cluster, [{"op": "replace", "path": f"{TRAINING_GPU_QUOTA}/nominalQuota", "value": gpus}]
    )


def bound_or_gone(cluster: Cluster, name: str) -> str | None:
    """What became of an ungated Pod: bound to a node, or deleted (by Kueue, once it saw the
    Pod run without an admitted Workload); None while it waits."""
    got = cluster.kubectl("get", "pod", name, "-n", NAMESPACE, "-o", "json", check=False)
    if got.returncode != 0:
        return "it ran until Kueue deleted it (within the grace period the Pod chose)"
    node = json.loads(got.stdout)["spec"].get("nodeName")
    return f"bound to {node}" if node else None


def test_a_tenant_lifting_kueues_gate_off_its_gpu_pod_is_refused(cluster: Cluster) -> None:
    """Kueue gates a queued Pod and lifts the gate at admission; the API server lets the Pod's
    editor lift it too, and Kueue's webhook does not object. Lifted by the tenant while its
    queue admits nothing, the Pod was bound to a GPU node at once, outside the quota (Kueue
    deletes it only afterwards, within the grace period the tenant chose). quotaguard refuses
    the tenant's update; Kueue, under its own service account, still lifts it at admission."""
    gpus = training_gpu_quota(cluster)
    patch_training_queue(cluster, [{"op": "add", "path": "/spec/stopPolicy", "value": "Hold"}])
    try:
        created = as_user(cluster, "create", gpu_pod("jumps-the-queue"))
        assert created.returncode == 0, created.stderr
        pod = cluster.get("pod", "jumps-the-queue", namespace=NAMESPACE)
        assert ADMISSION_GATE in gates(pod)
        lifted = patch_pod(
            cluster,
            "jumps-the-queue",
            [{"op": "remove", "path": "/spec/schedulingGates"}],
            user=USER,
        )
        if lifted.returncode == 0:
            found = wait_until(
                lambda: bound_or_gone(cluster, "jumps-the-queue"), timeout=20, what="binding"
            )
            pytest.fail(f"the tenant lifted Kueue's gate while its queue admits nothing: {found}")
        assert "pods-gate.validate.quotaguard.dev" in lifted.stderr
        assert "only Kueue removes the scheduling gate kueue.x-k8s.io/admission" in lifted.stderr
        time.sleep(2)  # long enough for the scheduler to bind an ungated Pod
        pod = cluster.get("pod", "jumps-the-queue", namespace=NAMESPACE)
        assert ADMISSION_GATE in gates(pod) and not pod["spec"].get("nodeName")
    finally:
        # Admit again, with room for this Pod next to the GPUs the tests above hold.
        patch_training_queue(cluster, [{"op": "remove", "path": "/spec/stopPolicy"}])
        set_training_gpu_quota(cluster, gpus + 1)
    try:
        wait_until(
            lambda: not gates(cluster.get("pod", "jumps-the-queue", namespace=NAMESPACE)),
            timeout=60,
            what="Kueue lifting its own gate at admission",
        )
    finally:
        set_training_gpu_quota(cluster, gpus)
        cluster.kubectl("delete", "pod", "jumps-the-queue", "-n", NAMESPACE, "--wait=false")


def test_what_the_api_server_refuses_a_tenant_itself(cluster: Cluster) -> None:
    """GPUs a Pod cannot be given past quotaguard, because Kubernetes refuses them (quotaguard
    does not look): pod-level resources name only cpu, memory and hugepages; a Pod Kueue gates
    may not name its node; a namespace editor
    may neither resize a Pod in place nor add ephemeral containers (RBAC), and even a cluster
    admin's resize changes only cpu and memory, and an ephemeral container has no resources."""
    pod_level = gpu_pod("pod-level", 1)
    pod_level["spec"]["resources"] = {"limits": {GPU: "8", "cpu": "1"}}
    refused = as_user(cluster, "create", pod_level)
    assert refused.returncode != 0, "a pod-level GPU limit was stored"
    assert "spec.resources.limits[nvidia.com/gpu]: Unsupported value" in refused.stderr

    # nodeName skips the scheduler, but Kueue's webhook gates the Pod it queues, and a gated
    # Pod may not name a node.
    placed = gpu_pod("placed-by-hand", 1)
    placed["spec"]["nodeName"] = "h100-0"
    refused = as_user(cluster, "create", placed)
    assert refused.returncode != 0, "a GPU Pod naming its node skipped Kueue's queue"
    assert "cannot be set until all schedulingGates have been cleared" in refused.stderr

    created = as_user(cluster, "create", gpu_pod("resized", 1))
    assert created.returncode == 0, created.stderr
    resize = [
        {
            "op": "replace",
            "path": f"/spec/containers/0/resources/limits/{GPU.replace('/', '~1')}",
            "value": "8",
        }
    ]
    ephemeral = [
        {
            "op": "add",
            "path": "/spec/ephemeralContainers",
            "value": [
                {
                    "name": "debugger",
                    "image": "registry.example/debug:1",
                    "resources": {"limits": {GPU: "8"}},
                }
            ],
        }
    ]
    for operations, subresource in ((resize, "resize"), (ephemeral, "ephemeralcontainers")):
        by_tenant = patch_pod(
            cluster, "resized", operations, f"--subresource={subresource}", user=USER
        )
        assert by_tenant.returncode != 0, f"the tenant's {subresource} went through"
        assert f'cannot get resource "pods/{subresource}"' in by_tenant.stderr
        by_admin = patch_pod(
            cluster, "resized", operations, f"--subresource={subresource}", user=None
        )
        assert by_admin.returncode != 0, f"a {subresource} gave the Pod 8 GPUs"
        assert "is invalid" in by_admin.stderr, by_admin.stderr
    stored = cluster.get("pod", "resized", namespace=NAMESPACE)
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {GPU: "1"}
    assert not stored["spec"].get("ephemeralContainers")


def test_a_tenant_resuming_a_job_kueue_holds_is_refused(cluster: Cluster) -> None:
    """Kueue holds a queued Job by its spec.suspend. Resumed by the tenant while its queue
    admits nothing, the job controller made its Pod and it ran on a GPU node outside the quota
    until Kueue suspended the Job again. quotaguard refuses the tenant's update."""
    patch_training_queue(cluster, [{"op": "add", "path": "/spec/stopPolicy", "value": "Hold"}])
    try:
        job = training_job("resumed-by-hand", 1)
        job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][GPU] = "1"
        created = as_user(cluster, "create", job)
        assert created.returncode == 0, created.stderr
        assert cluster.get("job", "resumed-by-hand", namespace=NAMESPACE)["spec"]["suspend"]
        resumed = cluster.kubectl(
            f"--as={USER}",
            "patch",
            "job",
            "resumed-by-hand",
            "-n",
            NAMESPACE,
            "--type=merge",
            "-p",
            '{"spec":{"suspend":false}}',
            check=False,
        )
        if resumed.returncode == 0:
            ran = wait_until(
                lambda: [
                    (p["metadata"]["name"], p["spec"].get("nodeName"))
                    for p in pods_with(cluster, "batch.kubernetes.io/job-name=resumed-by-hand")
                    if p["spec"].get("nodeName")
                ],
                timeout=20,
                what="the resumed Job's Pod bound",
            )
            pytest.fail(f"the tenant resumed a Job its queue holds: {ran} bound")
        assert "jobs-update.validate.quotaguard.dev" in resumed.stderr
        assert "only Kueue removes spec.suspend: true from a GPU Job" in resumed.stderr
        time.sleep(2)
        assert cluster.get("job", "resumed-by-hand", namespace=NAMESPACE)["spec"]["suspend"]
        assert not pods_with(cluster, "batch.kubernetes.io/job-name=resumed-by-hand")
    finally:
        patch_training_queue(cluster, [{"op": "remove", "path": "/spec/stopPolicy"}])
        cluster.kubectl("delete", "job", "resumed-by-hand", "-n", NAMESPACE, "--wait=false")


def test_a_tenant_widening_a_running_job_is_refused(cluster: Cluster) -> None:
    """Raised on a running Job, parallelism made the job controller start the extra GPU Pods at
    once, before Kueue suspended the Job to admit it again; lowered, it is let through."""
    job = training_job("widened", 2)
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][GPU] = "1"
    job["spec"]["completions"] = 8
    gpus = training_gpu_quota(cluster)
    # Room in the queue and on the nodes next to what the tests above hold.
    cluster.add_nodes(whole_gpu_node("h100-2", 8))
    set_training_gpu_quota(cluster, gpus + 8)  # whatever the tests above still hold
    try:
        created = as_user(cluster, "create", job)
        assert created.returncode == 0, created.stderr
        widened_while_running(cluster)
    finally:
        set_training_gpu_quota(cluster, gpus)
        cluster.kubectl("delete", "job", "widened", "-n", NAMESPACE, "--wait=false")


def widened_while_running(cluster: Cluster) -> None:
    selector = "batch.kubernetes.io/job-name=widened"
    wait_until(
        lambda: (
            not cluster.get("job", "widened", namespace=NAMESPACE)["spec"].get("suspend")
            and len([p for p in pods_with(cluster, selector) if p["spec"].get("nodeName")]) == 2
        ),
        timeout=60,
        what="the admitted Job running",
    )

    def set_parallelism(pods: int) -> Any:
        return cluster.kubectl(
            f"--as={USER}",
            "patch",
            "job",
            "widened",
            "-n",
            NAMESPACE,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"parallelism": pods}}),
            check=False,
        )

    widened = set_parallelism(6)
    if widened.returncode == 0:
        seen: set[str] = set()
        for _ in range(20):
            seen.update(p["metadata"]["name"] for p in pods_with(cluster, selector))
            time.sleep(0.1)
        pytest.fail(f"the tenant widened a running Job: {len(seen)} Pods made for 2 admitted")
    assert "jobs-update.validate.quotaguard.dev" in widened.stderr
    assert "a running Job keeps the pods Kueue admitted (/spec/parallelism: 2 -> 6" in (
        widened.stderr
    )
    assert len(pods_with(cluster, selector)) == 2
    narrowed = set_parallelism(1)
    assert narrowed.returncode == 0, narrowed.stderr


RAW_POD = (
    '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s"},"spec":{"restartPolicy":"Never",'
    '"containers":[{"name":"server","image":"registry.example/server:1",'
    '"resources":{"limits":%s}}]}}'
)


@pytest.mark.parametrize(
    ("name", "limits", "allowed"),
    [
        ("first-of-two", '{"nvidia.com/gpu":"8","nvidia.com/gpu":"1"}', True),
        ("last-of-two", '{"nvidia.com/gpu":"1","nvidia.com/gpu":"8"}', False),
        ("escaped", '{"nvidia\\u002ecom/gpu":"8"}', False),
    ],
)
def test_odd_json_is_judged_as_the_api_server_decoded_it(
    cluster: Cluster, tmp_path: Any, name: str, limits: str, allowed: bool
) -> None:
    """A body with duplicate keys (Go keeps the last) or escaped keys reaches quotaguard as the
    API server decoded it: the inference tenant (maxGPUsPerPod 1) gets its one GPU, and the
    eight that the last duplicate or an escaped name asks for are refused."""
    body = tmp_path / "pod.json"
    body.write_text(RAW_POD % (name, limits))
    created = cluster.kubectl(
        "create", "--raw", "/api/v1/namespaces/inference/pods", "-f", str(body), check=False
    )
    assert (created.returncode == 0) is allowed, created.stdout + created.stderr
    if allowed:
        stored = cluster.get("pod", name, namespace="inference")
        assert stored["spec"]["containers"][0]["resources"]["limits"] == {
            "nvidia.com/mig-3g.40gb": "1"
        }
    else:
        assert "at most 1 GPU-equivalent per pod (maxGPUsPerPod)" in created.stderr
