"""Every row of the kind table, as a user submitting that kind sees it: each GPU template
rewritten, the queue label where Kueue reads it, a denial at the top-level object naming the
template, mutating twice the same as once, an UPDATE that brought `nvidia.com/gpu` back
restored, and the pods a handled kind creates left alone.

Where the templates and labels are is written out below by hand, from the kinds' own API
references, rather than read from `quotaguard.kube.kinds`: a wrong path in the table fails here
instead of agreeing with itself."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from quotaguard.admission import mutate, review_offline, validate
from quotaguard.admission.names import KUEUE_QUEUE_LABEL, TENANT_ANNOTATION
from quotaguard.kube.kinds import BY_ID, KINDS

from .builders import applied, gpu, of_kind, owner, pod, template

MEMORY_HINT = {"quotaguard.dev/gpu-memory": "8Gi"}
MIG_1G = "nvidia.com/mig-1g.10gb"

# kind id -> JSON Pointers of the pod specs of `of_kind(id, *one template per pointer)`, or of
# the resources map that stands for one (a TrainJob's resourcesPerNode).
SPECS: dict[str, list[str]] = {
    "Pod": ["/spec"],
    "Job": ["/spec/template/spec"],
    "CronJob": ["/spec/jobTemplate/spec/template/spec"],
    "JobSet": ["/spec/replicatedJobs/0/template/spec/template/spec"],
    "VolcanoJob": ["/spec/tasks/0/template/spec"],
    "Deployment": ["/spec/template/spec"],
    "StatefulSet": ["/spec/template/spec"],
    "ReplicaSet": ["/spec/template/spec"],
    "LeaderWorkerSet": [
        "/spec/leaderWorkerTemplate/leaderTemplate/spec",
        "/spec/leaderWorkerTemplate/workerTemplate/spec",
    ],
    "RayJob": [
        "/spec/rayClusterSpec/headGroupSpec/template/spec",
        "/spec/rayClusterSpec/workerGroupSpecs/0/template/spec",
        "/spec/submitterPodTemplate/spec",
    ],
    "RayCluster": ["/spec/headGroupSpec/template/spec", "/spec/workerGroupSpecs/0/template/spec"],
    "RayService": [
        "/spec/rayClusterConfig/headGroupSpec/template/spec",
        "/spec/rayClusterConfig/workerGroupSpecs/0/template/spec",
    ],
    "PyTorchJob": ["/spec/pytorchReplicaSpecs/pytorchreplicaspecs-0/template/spec"],
    "TFJob": ["/spec/tfReplicaSpecs/tfreplicaspecs-0/template/spec"],
    "XGBoostJob": ["/spec/xgbReplicaSpecs/xgbreplicaspecs-0/template/spec"],
    "PaddleJob": ["/spec/paddleReplicaSpecs/paddlereplicaspecs-0/template/spec"],
    "JAXJob": ["/spec/jaxReplicaSpecs/jaxreplicaspecs-0/template/spec"],
    "MPIJob": ["/spec/mpiReplicaSpecs/mpireplicaspecs-0/template/spec"],
    "TrainJob": ["/spec/trainer/resourcesPerNode"],
    "SparkApplication": ["/spec/driver/template/spec", "/spec/executor/template/spec"],
    "AppWrapper": ["/spec/components/0/template/spec/template/spec"],
}
# What a denial calls each template ("" for a kind's only one).
NAMES: dict[str, list[str]] = {
    "JobSet": ["replicatedjobs-0"],
    "VolcanoJob": ["tasks-0"],
    "LeaderWorkerSet": ["leader", "worker"],
    "RayJob": ["head", "workergroupspecs-1", "submitter"],
    "RayCluster": ["head", "workergroupspecs-1"],
    "RayService": ["head", "workergroupspecs-1"],
    **{
        kind: [f"{field.lower()}-0"]
        for kind, field in [
            ("PyTorchJob", "pytorchReplicaSpecs"),
            ("TFJob", "tfReplicaSpecs"),
            ("XGBoostJob", "xgbReplicaSpecs"),
            ("PaddleJob", "paddleReplicaSpecs"),
            ("JAXJob", "jaxReplicaSpecs"),
            ("MPIJob", "mpiReplicaSpecs"),
        ]
    },
    "AppWrapper": ["part-0"],
    "SparkApplication": ["driver", "executor"],
}
# Where Kueue v0.17 reads the queue label of each kind (the object's own metadata otherwise).
LABELS: dict[str, list[str]] = {
    "CronJob": ["/spec/jobTemplate/metadata"],
    "Deployment": ["/metadata", "/spec/template/metadata"],
    "ReplicaSet": ["/metadata", "/spec/template/metadata"],
}

IDS = [kind.id for kind in KINDS]


def at(obj: Any, pointer: str) -> Any:
    for part in pointer.split("/")[1:]:
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def limits_at(obj: dict[str, Any], pointer: str) -> dict[str, Any]:
    found = at(obj, pointer)
    if pointer.endswith("resourcesPerNode"):
        return dict(found["limits"])
    return dict(found["containers"][0]["resources"]["limits"])


def manifest(kind_id: str, count: int = 1) -> dict[str, Any]:
    templates = [template(gpu(count)) for _ in SPECS[kind_id]]
    return of_kind(kind_id, *templates, annotations=dict(MEMORY_HINT))


def offline(policy: Any, obj: dict[str, Any], namespace: str = "inference") -> tuple[Any, Any]:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "CREATE", "namespace": namespace, "object": obj},
    }
    response, stored = review_offline(policy, body)
    return response["response"], stored


def test_every_kind_of_the_table_is_covered_here():
    assert set(SPECS) == set(IDS)


@pytest.mark.parametrize("kind_id", IDS)
def test_every_gpu_template_is_rewritten(policy, kind_id):
    response, stored = offline(policy, manifest(kind_id))
    assert response["allowed"], response
    for pointer in SPECS[kind_id]:
        assert limits_at(stored, pointer) == {MIG_1G: "1"}, pointer


@pytest.mark.parametrize("kind_id", IDS)
def test_the_queue_label_goes_where_kueue_reads_it(policy, kind_id):
    _, stored = offline(policy, manifest(kind_id))
    for pointer in LABELS.get(kind_id, ["/metadata"]):
        assert at(stored, pointer)["labels"][KUEUE_QUEUE_LABEL] == "inference", pointer


@pytest.mark.parametrize("kind_id", IDS)
def test_too_many_gpus_are_denied_at_the_top_level_object_naming_the_template(policy, kind_id):
    # inference allows 1 GPU-equivalent per pod; 8 GPUs become 8 3g.40gb slices (3.43).
    response, _ = offline(policy, manifest(kind_id, 8))
    assert not response["allowed"]
    message = response["status"]["message"]
    assert response["auditAnnotations"]["denied"] == "max-gpus-per-pod"
    assert "nvidia.com/gpu: 8 as nvidia.com/mig-3g.40gb = 3.43" in message
    for name in NAMES.get(kind_id, [""]):
        assert f"; {name + ' ' if name else ''}pod asks for 3.43 (" in message, name


@pytest.mark.parametrize("kind_id", IDS)
def test_mutating_twice_is_mutating_once(policy, kind_id):
    _, stored = offline(policy, manifest(kind_id))
    again = mutate(policy, stored, "inference")
    assert again.allowed
    assert again.patch == ()


@pytest.mark.parametrize("kind_id", IDS)
def test_an_update_that_brings_the_whole_gpu_back_is_restored(policy, kind_id):
    _, stored = offline(policy, manifest(kind_id))
    reapplied = copy.deepcopy(stored)
    for pointer in SPECS[kind_id]:  # `kubectl apply` of the original manifest, GPUs as written
        limits = limits_at(reapplied, pointer)
        assert limits == {MIG_1G: "1"}
        target = at(reapplied, pointer)
        resources = target if pointer.endswith("resourcesPerNode") else None
        resources = resources or target["containers"][0]["resources"]
        resources["limits"] = {"nvidia.com/gpu": 1}
        resources.pop("requests", None)
    decision = mutate(policy, reapplied, "inference", operation="UPDATE", old_object=stored)
    assert decision.allowed, decision.message
    restored = applied(reapplied, decision)
    for pointer in SPECS[kind_id]:
        assert limits_at(restored, pointer) == {MIG_1G: "1"}, pointer
    assert validate(policy, restored, "inference", operation="UPDATE", old_object=stored).allowed


@pytest.mark.parametrize("kind_id", [k for k in IDS if k != "Pod"])
def test_a_pod_made_from_a_rewritten_template_is_left_alone_and_allowed(policy, kind_id):
    kind = BY_ID[kind_id]
    _, stored = offline(policy, manifest(kind_id))
    pointer = SPECS[kind_id][0]
    if pointer.endswith("resourcesPerNode"):
        resources = at(stored, pointer)
        spec = {"containers": [{"name": "trainer", "image": "x", "resources": resources}]}
        annotations = stored["metadata"]["annotations"]
    elif kind_id == "SparkApplication":  # the operator gives the pod the role's annotations
        spec = at(stored, pointer)
        annotations = dict(stored["spec"]["driver"]["annotations"])
    else:
        spec = at(stored, pointer)
        parent = at(stored, pointer.rpartition("/")[0])
        annotations = {**stored["metadata"]["annotations"], **parent["metadata"]["annotations"]}
    child = pod(owners=[owner(kind.kind, kind.api_versions[0])])
    child["spec"] = copy.deepcopy(spec)
    child["metadata"]["annotations"] = dict(annotations)
    assert TENANT_ANNOTATION in child["metadata"]["annotations"]
    # Created by the kind's controller (a creator whose owner references are believed).
    assert mutate(policy, child, "inference", creator_trusted=True).patch == ()
    assert validate(policy, child, "inference").allowed


# --- HAMi's shares are refused, never rewritten halfway ------------------------------------

# The Pod of Kueue's HAMi page (site/content/en/docs/tasks/run/hami.md): one vGPU with 1 GiB of
# its memory and half its cores. nvidia.com/gpumem and nvidia.com/gpucores are HAMi's.
HAMI_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "gpu-pod", "labels": {KUEUE_QUEUE_LABEL: "training"}},
    "spec": {
        "containers": [
            {
                "name": "ubuntu-container",
                "image": "ubuntu:22.04",
                "command": ["bash", "-c", "sleep 86400"],
                "resources": {
                    "limits": {
                        "nvidia.com/gpu": 1,
                        "nvidia.com/gpumem": 1024,
                        "nvidia.com/gpucores": 50,
                    }
                },
            }
        ]
    },
}


def test_hamis_sample_pod_is_refused_naming_its_shares_and_never_half_rewritten(policy):
    # inference rewrites nvidia.com/gpu to a MIG slice: never next to HAMi's gpumem.
    for namespace in ("training", "inference"):
        obj = copy.deepcopy(HAMI_POD)
        assert mutate(policy, obj, namespace).patch == ()
        response, stored = offline(policy, obj, namespace)
        assert not response["allowed"], response
        message = response["status"]["message"]
        assert "nvidia.com/gpumem: 1024, HAMi's share of a GPU" in message
        assert "nvidia.com/gpucores: 50" in message
        assert stored == HAMI_POD


def test_hamis_resources_alone_are_refused_too(policy):
    obj = copy.deepcopy(HAMI_POD)
    del obj["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    response, _ = offline(policy, obj, "inference")
    assert not response["allowed"], response
    # 1024 "units" are not GPUs: no maxGPUsPerPod or class denial about them.
    rules = validate(policy, obj, "inference").rules
    assert "gpu-not-governed" in rules
    assert not {"max-gpus-per-pod", "class-not-allowed", "gpu-value"} & set(rules)
