"""The webhooks' matchConditions: only objects that ask for a GPU are sent to quotaguard (an
nvidia.com/ resource, a resource whose name looks like an accelerator such as amd.com/gpu, or
KAI scheduler's gpu-fraction / gpu-memory annotations), for each kind's pod-spec location,
and odd objects are "not sent" rather than an evaluation error (which failurePolicy Fail
would turn into a rejected request). Pods are sent on UPDATE only when a container holds a
plain nvidia.com/gpu next to another nvidia.com/ resource, as re-applying a rewritten Pod's
manifest leaves it. The mutating Pod CREATE webhook
has a second condition: a Pod that already carries quotaguard's decision (a Job's Pod made by
the job controller; a bare Pod queued and gated by Kueue after quotaguard's mutation, which is
when the API server would reinvoke quotaguard) is not sent, and anything odd is.

The expressions are compiled and evaluated by the API server's own CEL compiler
(k8s.io/apiserver, built from e2e/celcheck with the machine's Go and the module proxy; it
lives with the end-to-end suite because its first build takes minutes), so
an expression the API server would refuse fails here, not in a cluster."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from quotaguard.kube.kinds import KINDS, Kind
from quotaguard.webhook.registrations import (
    CLAIM_ASKS_FOR_DEVICES,
    CLAIM_RESOURCES,
    HAS_COMPONENTS,
    NOT_YET_DECIDED,
    PLAIN_GPU_NEXT_TO_ANOTHER,
    REQUESTS_NVIDIA,
    RESOURCES_CHANGED,
    RESOURCES_UNCHANGED,
    configurations,
)
from tests.admission.builders import of_kind
from tests.deploy.manifests import WEBHOOK, load_yaml

CELCHECK = Path(__file__).resolve().parent / "celcheck"
BUILD_TIMEOUT = 600  # a cold Go build cache compiles k8s.io/apiserver's CEL packages


POD_UPDATES = "pods-update.mutate.quotaguard.dev"
POD_MUTATES = "pods.mutate.quotaguard.dev"
POD_VALIDATES = "pods.validate.quotaguard.dev"


def all_conditions() -> dict[str, dict[str, str]]:
    """Webhook name -> condition name -> expression, in the order the files give them."""
    found: dict[str, dict[str, str]] = {}
    for path in sorted(WEBHOOK.glob("*webhookconfiguration*.yaml")):
        for doc in load_yaml(path):
            for hook in doc["webhooks"]:
                found[hook["name"]] = {c["name"]: c["expression"] for c in hook["matchConditions"]}
    return found


def conditions() -> dict[str, tuple[str, str]]:
    """Webhook name -> (condition name, expression) of its first condition, the one that looks
    for GPU requests (every webhook of a workload kind has one; the DRA claim objects' are in
    claim_conditions)."""
    return {
        hook: next(iter(found.items()))
        for hook, found in all_conditions().items()
        if not hook.startswith(CLAIM_WEBHOOKS)
    }


CLAIM_WEBHOOKS = tuple(f"{plural}.validate" for plural, _ in CLAIM_RESOURCES)


def claim_conditions() -> dict[str, tuple[str, str]]:
    return {
        hook: next(iter(found.items()))
        for hook, found in all_conditions().items()
        if hook.startswith(CLAIM_WEBHOOKS)
    }


def expressions() -> dict[str, str]:
    return {name: expression for name, (_, expression) in conditions().items()}


def every_expression() -> dict[str, str]:
    """`webhook/condition` -> expression, for every condition of every webhook."""
    return {
        f"{hook}/{name}": expression
        for hook, found in all_conditions().items()
        for name, expression in found.items()
    }


def kind_of(webhook_name: str) -> str:
    return webhook_name.split(".", 1)[0].removesuffix("-update").removesuffix("-resources")


GPU = {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
# A rewritten container after `kubectl apply` of its manifest again: the plain GPU is back.
REAPPLIED = {
    "name": "main",
    "image": "x",
    "resources": {
        "limits": {"nvidia.com/mig-3g.40gb": "1", "nvidia.com/gpu": "1"},
        "requests": {"nvidia.com/mig-3g.40gb": "1", "nvidia.com/gpu": "1"},
    },
}
GPU_AND_CPU = {
    "name": "main",
    "image": "x",
    "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1"}},
}
# The plain GPU and the class in different sections: not what a merge produces.
SPLIT = {
    "name": "main",
    "image": "x",
    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/mig-1g.10gb": "1"}},
}
MIG = {"name": "main", "image": "x", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}
SHARED = {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}
CPU = {"name": "main", "image": "x", "resources": {"limits": {"cpu": "1"}}}


def asking(resources: dict[str, str], section: str = "limits") -> dict[str, Any]:
    return {"name": "main", "image": "x", "resources": {section: resources}}


# GPUs under other names: each must reach quotaguard, which counts it or refuses it by name.
MIG_ME = asking({"nvidia.com/mig-1g.10gb.me": "1"})
AMD = asking({"amd.com/gpu": "1", "cpu": "1"})
INTEL = asking({"gpu.intel.com/i915": "1"}, "requests")
GAUDI = asking({"habana.ai/gaudi": "8"})
HAMI_ONLY = asking({"nvidia.com/gpumem": "8000"})
# A DRA extended resource a DeviceClass serves implicitly (no accelerator-like name).
DRA_SERVED = asking({"deviceclass.resource.kubernetes.io/mig.nvidia.com": "1"})
# Extended resources that are no accelerator: not sent.
NICS = asking({"rdma/hca": "1", "example.com/inputs": "2", "intel.com/sriov": "1"})
KAI_SHARE = {"gpu-fraction": "0.5"}
BARE = {"name": "main", "image": "x"}


def spec(*containers: Any, init: tuple[Any, ...] = (), **fields: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"containers": list(containers), **fields}
    if init:
        found["initContainers"] = list(init)
    return found


def job(pod: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"template": {"spec": pod}}}


def jobset(*pods: dict[str, Any]) -> dict[str, Any]:
    return {
        "spec": {
            "replicatedJobs": [
                {"name": f"r{i}", "template": {"spec": {"template": {"spec": p}}}}
                for i, p in enumerate(pods)
            ]
        }
    }


def vcjob(*pods: dict[str, Any]) -> dict[str, Any]:
    return {
        "spec": {"tasks": [{"name": f"t{i}", "template": {"spec": p}} for i, p in enumerate(pods)]}
    }


# object name -> (kind it is, the object, whether quotaguard must see it); Pods sent on UPDATE
# too are in REAPPLIED_PODS.
OBJECTS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "pod-gpu": ("pods", {"spec": spec(GPU)}, True),
    "pod-reapplied": ("pods", {"spec": spec(CPU, REAPPLIED)}, True),
    "pod-reapplied-init": ("pods", {"spec": spec(BARE, init=(REAPPLIED,))}, True),
    "pod-gpu-and-cpu": ("pods", {"spec": spec(GPU_AND_CPU)}, True),
    "pod-gpu-and-class-apart": ("pods", {"spec": spec(SPLIT)}, True),
    "pod-gpu-and-class-in-two-containers": ("pods", {"spec": spec(GPU, MIG)}, True),
    "pod-mig-request": ("pods", {"spec": spec(MIG)}, True),
    "pod-shared": ("pods", {"spec": spec(CPU, SHARED)}, True),
    "pod-gpu-in-init": ("pods", {"spec": spec(BARE, init=(GPU,))}, True),
    "pod-mig-with-media-extensions": ("pods", {"spec": spec(MIG_ME)}, True),
    "pod-amd-gpu": ("pods", {"spec": spec(CPU, AMD)}, True),
    "pod-intel-gpu-in-init": ("pods", {"spec": spec(BARE, init=(INTEL,))}, True),
    "pod-hami-share-only": ("pods", {"spec": spec(HAMI_ONLY)}, True),
    "pod-dra-extended-resource": ("pods", {"spec": spec(CPU, DRA_SERVED)}, True),
    "pod-kai-share": (
        "pods",
        {"metadata": {"annotations": KAI_SHARE}, "spec": spec(CPU, schedulerName="kai")},
        True,
    ),
    "pod-other-extended-resources": ("pods", {"spec": spec(NICS)}, False),
    "pod-odd-annotations": ("pods", {"metadata": {"annotations": "x"}, "spec": spec(CPU)}, False),
    "pod-cpu": ("pods", {"spec": spec(CPU)}, False),
    "pod-no-resources": ("pods", {"spec": spec(BARE)}, False),
    "pod-nulls": ("pods", {"spec": {"containers": [{"resources": None}, None]}}, False),
    "pod-null-limits": (
        "pods",
        {"spec": {"containers": [{"resources": {"limits": None, "requests": {"cpu": "1"}}}]}},
        False,
    ),
    "pod-no-spec": ("pods", {"metadata": {"name": "x"}}, False),
    # GPUs through DRA: what a claim asks for is in an object CEL cannot read
    "pod-dra-claim": (
        "pods",
        {
            "spec": {
                **spec(BARE),
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}],
            }
        },
        True,
    ),
    "pod-empty-claims": ("pods", {"spec": {**spec(CPU), "resourceClaims": []}}, False),
    "pod-odd-claims": ("pods", {"spec": {**spec(CPU), "resourceClaims": "x"}}, False),
    "job-dra-claim": (
        "jobs",
        job({**spec(BARE), "resourceClaims": [{"name": "g", "resourceClaimName": "c"}]}),
        True,
    ),
    "job-gpu": ("jobs", job(spec(GPU)), True),
    "job-reapplied": ("jobs", job(spec(REAPPLIED)), True),
    "job-gaudi": ("jobs", job(spec(GAUDI)), True),
    "job-dra-extended-resource": ("jobs", job(spec(DRA_SERVED)), True),
    "job-kai-share-on-template": (
        "jobs",
        {"spec": {"template": {"metadata": {"annotations": KAI_SHARE}, "spec": spec(CPU)}}},
        True,
    ),
    "job-cpu": ("jobs", job(spec(CPU)), False),
    "spark-gpu-field": (
        "sparkapplications",
        {"spec": {"executor": {"gpu": {"name": "nvidia.com/gpu", "quantity": 1}}}},
        True,
    ),
    "spark-gpu-in-sidecar": ("sparkapplications", {"spec": {"driver": {"sidecars": [AMD]}}}, True),
    "spark-cpu-gpu-field": (
        "sparkapplications",
        {"spec": {"driver": {"gpu": {"name": "example.com/widget", "quantity": 1}}}},
        False,
    ),
    "spark-odd-gpu-field": ("sparkapplications", {"spec": {"driver": {"gpu": "x"}}}, False),
    # Its runtime may give it GPUs: every TrainJob with a runtimeRef is sent.
    "trainjob-runtime-only": ("trainjobs", {"spec": {"runtimeRef": {"name": "torch"}}}, True),
    "trainjob-odd-runtime-ref": ("trainjobs", {"spec": {"runtimeRef": "torch"}}, False),
    "job-no-template": ("jobs", {"spec": {}}, False),
    "jobset-gpu-in-second": ("jobsets", jobset(spec(CPU), spec(GPU)), True),
    "jobset-cpu": ("jobsets", jobset(spec(CPU)), False),
    "jobset-odd": ("jobsets", {"spec": {"replicatedJobs": [None, {"template": None}]}}, False),
    "vcjob-mig-in-second": ("volcanojobs", vcjob(spec(BARE), spec(MIG)), True),
    "vcjob-cpu": ("volcanojobs", vcjob(spec(CPU)), False),
    "vcjob-tasks-not-a-list": ("volcanojobs", {"spec": {"tasks": "oops"}}, False),
    "vcjob-containers-not-a-list": (
        "volcanojobs",
        {"spec": {"tasks": [{"template": {"spec": {"containers": "x"}}}, 3]}},
        False,
    ),
}


def _plural(kind: Kind) -> str:
    return f"{kind.id.lower()}s"


# Every other kind of the table: a GPU in its last template only, CPU only, and a first field
# of the wrong type. An AppWrapper's components are not searched: any with components is sent.
for _kind in KINDS:
    if _kind.id in ("Pod", "Job", "JobSet", "VolcanoJob"):
        continue
    _first = _kind.templates[0].path.split(".")[1] if _kind.templates else "components"
    _many = max(len(_kind.templates), 2) if _kind.templates else 1
    _gpu = [{"spec": spec(CPU)}] * (_many - 1) + [{"spec": spec(GPU)}]
    _appwrapper = _kind.components is not None
    OBJECTS[f"{_plural(_kind)}-gpu-in-last"] = (_plural(_kind), of_kind(_kind.id, *_gpu), True)
    OBJECTS[f"{_plural(_kind)}-cpu"] = (
        _plural(_kind),
        of_kind(_kind.id, {"spec": spec(CPU)}),
        _appwrapper,
    )
    OBJECTS[f"{_plural(_kind)}-odd"] = (_plural(_kind), {"spec": {_first: "oops"}}, False)

REAPPLIED_PODS = {"pod-reapplied", "pod-reapplied-init"}


def test_the_decided_pod_condition_is_on_the_mutating_pod_create_webhook_only() -> None:
    found = all_conditions()
    assert list(found.pop(POD_MUTATES)) == [REQUESTS_NVIDIA, NOT_YET_DECIDED]
    for name, hook_conditions in found.items():
        hook = name.split(".")[0]
        if ".validate." in name and hook.endswith("-update"):
            assert list(hook_conditions)[1:] == [RESOURCES_UNCHANGED], name
        elif hook.endswith("-resources"):
            assert list(hook_conditions)[1:] == [RESOURCES_CHANGED], name
        else:
            assert len(hook_conditions) == 1, name


def test_one_condition_per_kind_and_the_same_for_mutate_validate_and_updates() -> None:
    found = conditions()
    assert len(found) == 5 * len(KINDS) - 2
    assert {name: c for name, (c, _) in claim_conditions().items()} == {
        f"{plural}.validate.quotaguard.dev": CLAIM_ASKS_FOR_DEVICES for plural, _ in CLAIM_RESOURCES
    }
    assert found.pop(POD_UPDATES)[0] == PLAIN_GPU_NEXT_TO_ANOTHER
    by_kind: dict[str, set[str]] = {}
    for name, (condition, expression) in found.items():
        wanted = HAS_COMPONENTS if name.startswith("appwrappers") else REQUESTS_NVIDIA
        assert condition == wanted, name
        by_kind.setdefault(kind_of(name), set()).add(expression)
        assert "'nvidia.com/'" in expression or condition == HAS_COMPONENTS
    assert set(by_kind) == {_plural(kind) for kind in KINDS}
    assert all(len(texts) == 1 for texts in by_kind.values())
    assert "object.spec.template.spec" in next(iter(by_kind["jobs"]))
    assert "i0.template.spec.template.spec" in next(iter(by_kind["jobsets"]))
    assert "i0.template.spec" in next(iter(by_kind["volcanojobs"]))
    assert "object.spec.trainer.resourcesPerNode" in next(iter(by_kind["trainjobs"]))


def _go_environment() -> dict[str, str]:
    return {
        **os.environ,
        "GOFLAGS": "-mod=readonly",
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
    }


@pytest.fixture(scope="session")
def celcheck() -> Path:
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but there is no Go toolchain to build the CEL checker")
        pytest.skip("no Go toolchain: the API server's CEL compiler cannot be built")
    digest = hashlib.sha256()
    for name in ("main.go", "go.mod", "go.sum"):
        digest.update((CELCHECK / name).read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "quotaguard-tests"
    binary = cache / f"celcheck-{digest.hexdigest()[:16]}"
    if binary.exists():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=CELCHECK,
        env=_go_environment(),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"building celcheck failed:\n{result.stderr}")
    return binary


def evaluate(
    binary: Path,
    exprs: dict[str, str],
    objects: dict[str, Any],
    requests: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Each expression's results on each object, with the object's admission request from
    `requests` (an empty one when it has none)."""
    result = subprocess.run(
        [str(binary)],
        input=json.dumps({"expressions": exprs, "objects": objects, "requests": requests or {}}),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    outcome: dict[str, Any] = json.loads(result.stdout)
    return outcome


def test_the_api_server_compiles_every_condition(celcheck: Path) -> None:
    outcome = evaluate(celcheck, every_expression(), {})
    assert {name: result.get("error") for name, result in outcome.items()} == {
        name: None for name in every_expression()
    }


def test_the_checker_does_report_an_invalid_expression(celcheck: Path) -> None:
    outcome = evaluate(celcheck, {"bad": "object.spec.exists(", "not-bool": "'x'"}, {})
    assert "compilation failed" in outcome["bad"]["error"]
    assert "must evaluate to bool" in outcome["not-bool"]["error"]


def test_only_gpu_objects_of_the_webhooks_kind_are_sent(celcheck: Path) -> None:
    objects = {name: obj for name, (_, obj, _) in OBJECTS.items()}
    outcome = evaluate(celcheck, expressions(), objects)
    # Kinds whose templates sit at the same paths (a Job's, a Deployment's) share one expression;
    # the webhook's rules keep them apart.
    by_kind = {kind_of(name): expression for name, expression in expressions().items()}
    for webhook, result in outcome.items():
        for name, (kind, _, gpu) in OBJECTS.items():
            value = result["results"][name]
            sent = name in REAPPLIED_PODS if webhook == POD_UPDATES else gpu
            alike = kind == kind_of(webhook) or by_kind[kind] == by_kind[kind_of(webhook)]
            assert value is (sent and alike), f"{webhook} on {name}: {value}"


# ---- pods that already carry quotaguard's decision -------------------------------------------

JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
KUBE_CONTROLLER_MANAGER = "system:kube-controller-manager"
USER = "alice@example.com"
TENANT = "quotaguard.dev/tenant"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ADMISSION_GATE = {"name": "kueue.x-k8s.io/admission"}
DECIDED_GPUS = "quotaguard.dev/decided-gpus"
STAMP = {
    TENANT: "training",
    "quotaguard.dev/rewritten": "main: nvidia.com/gpu=1 -> ...",
    DECIDED_GPUS: "main=nvidia.com/mig-1g.10gb:1",
}
QUEUED = {QUEUE_LABEL: "training", "kueue.x-k8s.io/managed": "true"}
UNSET = object()


def decided_pod(
    *containers: Any,
    annotations: Any = STAMP,
    labels: Any = QUEUED,
    gates: Any = (ADMISSION_GATE,),
    metadata: Any = UNSET,
    **spec_fields: Any,
) -> dict[str, Any]:
    """A bare GPU Pod as quotaguard's mutation and then Kueue's pod webhook leave it (the object
    the API server's reinvocation would send), with what a case changes; None leaves a field
    out."""
    pod_spec = {**spec(*(containers or (MIG,))), **spec_fields}
    if gates is not None:
        pod_spec["schedulingGates"] = list(gates) if isinstance(gates, tuple) else gates
    meta: dict[str, Any] = {"name": "work", "namespace": "training"}
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    return {"metadata": meta if metadata is UNSET else metadata, "spec": pod_spec}


def owned_pod(
    *containers: Any, owners: Any = UNSET, labels: Any = None, **changes: Any
) -> dict[str, Any]:
    """A Pod a controller made from a template quotaguard decided at its owner (a Job unless
    told otherwise): stamped, no queue label (Kueue accounts for the Job), no gate."""
    made = decided_pod(*containers, labels=labels, gates=None, **changes)
    made["metadata"]["ownerReferences"] = (
        owner_references("batch/v1", "Job") if owners is UNSET else owners
    )
    return made


def owner_references(api_version: str, kind: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": api_version, "kind": kind, "name": "parent", "uid": "u", "controller": True}
    ]


def with_metadata(**fields: Any) -> dict[str, Any]:
    made = decided_pod()
    made["metadata"].update(fields)
    return made


# Pod name -> (the Pod, who creates it: "" for a request without userInfo, whether the
# not-yet-decided condition sends it to the mutating webhook).
DECIDED: dict[str, tuple[dict[str, Any], str, bool]] = {
    "bare-gpu": ({"metadata": {"name": "work"}, "spec": spec(GPU)}, USER, True),
    "gated-by-kueue-after-quotaguard": (decided_pod(), USER, False),
    "gated-with-the-default-scheduler-named": (
        decided_pod(schedulerName="default-scheduler"),
        USER,
        False,
    ),
    "gated-shared-class-in-init": (decided_pod(BARE, initContainers=[SHARED]), USER, False),
    "stamped-without-queue-label": (decided_pod(labels={"app": "x"}), USER, True),
    "stamped-and-queued-not-yet-gated": (decided_pod(gates=None), USER, True),
    "stamped-and-queued-another-gate": (decided_pod(gates=({"name": "mine"},)), USER, True),
    "queued-and-gated-unstamped": (decided_pod(annotations={"seen": "yes"}), USER, True),
    "stamp-empty": (decided_pod(annotations={TENANT: ""}), USER, True),
    # the tenant stamp written by hand, without the record of what quotaguard decided
    "stamp-without-record": (decided_pod(annotations={TENANT: "training"}), USER, True),
    "record-empty": (decided_pod(annotations={**STAMP, DECIDED_GPUS: ""}), USER, True),
    "stamp-not-a-string": (decided_pod(annotations={TENANT: 3}), USER, True),
    "queue-label-empty": (decided_pod(labels={QUEUE_LABEL: ""}), USER, True),
    "decided-then-reapplied": (decided_pod(REAPPLIED), USER, True),
    "decided-then-reapplied-init": (decided_pod(BARE, initContainers=[REAPPLIED]), USER, True),
    "gated-for-another-scheduler": (decided_pod(schedulerName="volcano"), USER, True),
    "scheduler-name-not-a-string": (decided_pod(schedulerName=7), USER, True),
    # The Volcano backend's queue reference is not taken as decided: with the Kueue backend,
    # such a Pod would never meet Kueue's gate.
    "volcano-queue-annotation": (
        decided_pod(
            annotations={**STAMP, "scheduling.volcano.sh/queue-name": "training"},
            labels=None,
            gates=None,
            schedulerName="volcano",
        ),
        USER,
        True,
    ),
    # Odd objects: sent, never an evaluation error.
    "annotations-not-a-map": (decided_pod(annotations="oops"), USER, True),
    "annotations-null": (with_metadata(annotations=None), USER, True),
    "labels-null": (with_metadata(labels=None), USER, True),
    "labels-a-list": (decided_pod(labels=[QUEUE_LABEL]), USER, True),
    "metadata-not-a-map": (decided_pod(metadata="oops"), USER, True),
    "no-metadata": ({"spec": spec(MIG)}, USER, True),
    "gates-not-a-list": (decided_pod(gates="kueue.x-k8s.io/admission"), USER, True),
    "gates-odd": (decided_pod(gates=[None, {"name": 3}, "x"]), USER, True),
    # A Pod a controller made from a decided template: mutation would answer without a patch.
    "job-pod-of-the-job-controller": (owned_pod(), JOB_CONTROLLER, False),
    "job-pod-of-kube-controller-manager": (owned_pod(), KUBE_CONTROLLER_MANAGER, False),
    "deployment-pod-of-the-replicaset-controller": (
        owned_pod(owners=owner_references("apps/v1", "ReplicaSet"), labels=QUEUED),
        REPLICASET_CONTROLLER,
        False,
    ),
    # Owner references and the stamp are believed only from those controllers (as
    # quotaguard.admission.workload.owned_by_workload believes them).
    "job-pod-from-a-user": (owned_pod(), USER, True),
    "job-pod-without-user-info": (owned_pod(), "", True),
    "job-pod-unstamped": (owned_pod(annotations={"seen": "yes"}), JOB_CONTROLLER, True),
    "job-pod-stamp-without-record": (
        owned_pod(annotations={TENANT: "training"}),
        JOB_CONTROLLER,
        True,
    ),
    "job-pod-reapplied": (owned_pod(REAPPLIED), JOB_CONTROLLER, True),
    "daemonset-pod": (
        owned_pod(owners=owner_references("apps/v1", "DaemonSet")),
        KUBE_CONTROLLER_MANAGER,
        True,
    ),
    "owner-without-its-group": (
        owned_pod(owners=owner_references("v1", "Job")),
        JOB_CONTROLLER,
        True,
    ),
    "owner-of-another-handled-kind": (
        owned_pod(owners=owner_references("ray.io/v1", "RayCluster")),
        KUBE_CONTROLLER_MANAGER,
        False,
    ),
    "owners-not-a-list": (owned_pod(owners="batch/v1 Job"), JOB_CONTROLLER, True),
    "owners-odd": (
        owned_pod(owners=[None, {"kind": 3, "apiVersion": "batch/v1"}, {"kind": "Job"}]),
        JOB_CONTROLLER,
        True,
    ),
}


def decided_objects() -> dict[str, Any]:
    return {name: pod for name, (pod, _, _) in DECIDED.items()}


def decided_requests() -> dict[str, Any]:
    return {
        name: {"userInfo": {"username": username}} if username else {}
        for name, (_, username, _) in DECIDED.items()
    }


def test_a_pod_that_carries_quotaguards_decision_is_not_sent_to_mutate_again(
    celcheck: Path,
) -> None:
    outcome = evaluate(
        celcheck, all_conditions()[POD_MUTATES], decided_objects(), decided_requests()
    )
    for name, (_, _, sent) in DECIDED.items():
        values = {condition: result["results"][name] for condition, result in outcome.items()}
        assert all(isinstance(value, bool) for value in values.values()), f"{name}: {values}"
        assert values == {REQUESTS_NVIDIA: True, NOT_YET_DECIDED: sent}, name


def test_validation_is_still_sent_every_decided_pod(celcheck: Path) -> None:
    outcome = evaluate(
        celcheck, all_conditions()[POD_VALIDATES], decided_objects(), decided_requests()
    )
    assert list(outcome) == [REQUESTS_NVIDIA]
    assert outcome[REQUESTS_NVIDIA]["results"] == {name: True for name in DECIDED}


def test_an_odd_spec_gets_no_error_from_the_decided_condition(celcheck: Path) -> None:
    odd = {
        "spec-null": {**decided_pod(), "spec": None},
        "spec-a-list": {**decided_pod(), "spec": []},
    }
    outcome = evaluate(celcheck, all_conditions()[POD_MUTATES], odd)
    assert {c: r["results"] for c, r in outcome.items()} == {
        REQUESTS_NVIDIA: {name: False for name in odd},
        NOT_YET_DECIDED: {name: True for name in odd},
    }


# ---- updates of workload objects: those that change container resources fail closed ---------

CPU_TEMPLATE = {"spec": spec(CPU)}
GPU_TEMPLATE = {"spec": spec(GPU)}
TWO_GPUS = {"spec": spec({**GPU, "resources": {"limits": {"nvidia.com/gpu": "2"}}})}


def suspended(obj: dict[str, Any], value: bool) -> dict[str, Any]:
    """What Kueue's unsuspend changes: suspend, labels, a nodeSelector in every template."""
    changed = json.loads(json.dumps(obj))
    changed["spec"]["suspend"] = value
    changed.setdefault("metadata", {}).setdefault("labels", {})["kueue.x-k8s.io/managed"] = "t"
    return changed


def update_cases(kind: Kind) -> dict[str, tuple[dict[str, Any], dict[str, Any], bool]]:
    """Case -> (old object, new object, whether container resources changed)."""
    # the last template wins where a kind has one: the GPU goes last
    gpu = of_kind(kind.id, CPU_TEMPLATE, CPU_TEMPLATE, GPU_TEMPLATE)
    return {
        "gains-gpus": (of_kind(kind.id, CPU_TEMPLATE, CPU_TEMPLATE, CPU_TEMPLATE), gpu, True),
        "more-gpus": (gpu, of_kind(kind.id, CPU_TEMPLATE, CPU_TEMPLATE, TWO_GPUS), True),
        "kueue-unsuspends": (suspended(gpu, True), suspended(gpu, False), False),
        "unchanged": (gpu, json.loads(json.dumps(gpu)), False),
        "old-odd": ({"spec": {"x": [None]}}, gpu, True),
        "new-odd": (gpu, {"spec": "oops"}, True),
    }


@pytest.mark.parametrize("kind", [k for k in KINDS if k.id != "Pod"], ids=lambda k: k.id)
def test_only_updates_that_change_container_resources_reach_the_fail_closed_webhook(
    celcheck: Path, kind: Kind
) -> None:
    """Each update reaches exactly one of a kind's two validating UPDATE webhooks: a GPU gained
    or changed the fail-closed one, Kueue's unsuspend (suspend, labels) the fail-open one; an
    odd object never makes an evaluation error. A map of templates (a PyTorchJob's replica
    specs) compares key by key, whatever order CEL walks it in."""
    cases = update_cases(kind)
    found = all_conditions()
    plural = _plural(kind)
    exprs = {
        "resources": found[f"{plural}-resources.validate.quotaguard.dev"][RESOURCES_CHANGED],
        "update": found[f"{plural}-update.validate.quotaguard.dev"][RESOURCES_UNCHANGED],
    }
    objects = {name: new for name, (_, new, _) in cases.items()}
    olds = {name: old for name, (old, _, _) in cases.items()}
    result = subprocess.run(
        [str(celcheck)],
        input=json.dumps({"expressions": exprs, "objects": objects, "oldObjects": olds}),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    outcome = json.loads(result.stdout)
    for name, (_, _, changed) in cases.items():
        values = {hook: outcome[hook]["results"][name] for hook in exprs}
        assert values == {"resources": changed, "update": not changed}, f"{kind.id} {name}"


# ---- ResourceClaimTemplates and ResourceClaims ------------------------------------------------

REQUESTS = {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
CLAIM_OBJECTS: dict[str, tuple[str, dict[str, Any], str, bool]] = {
    # name -> (plural, object, username, sent)
    "template-by-user": (
        "resourceclaimtemplates",
        {"spec": {"spec": {"devices": REQUESTS}}},
        USER,
        True,
    ),
    "template-no-requests": (
        "resourceclaimtemplates",
        {"spec": {"spec": {"devices": {"requests": []}}}},
        USER,
        False,
    ),
    "template-odd": ("resourceclaimtemplates", {"spec": {"spec": "x"}}, USER, False),
    "claim-by-user": ("resourceclaims", {"spec": {"devices": REQUESTS}}, USER, True),
    "claim-for-a-pod": (
        "resourceclaims",
        {"spec": {"devices": REQUESTS}},
        "system:serviceaccount:kube-system:resource-claim-controller",
        False,
    ),
    "claim-for-an-extended-resource": (
        "resourceclaims",
        {"spec": {"devices": REQUESTS}},
        "system:kube-scheduler",
        False,
    ),
    "claim-odd": ("resourceclaims", {"spec": {"devices": {"requests": 3}}}, USER, False),
}


def test_claim_objects_are_sent_when_a_user_asks_for_devices(celcheck: Path) -> None:
    found = claim_conditions()
    for webhook, (_, expression) in found.items():
        plural = webhook.split(".", 1)[0]
        mine = {n: o for n, (p, o, _, _) in CLAIM_OBJECTS.items() if p == plural}
        requests = {
            n: {"userInfo": {"username": u}}
            for n, (p, _, u, _) in CLAIM_OBJECTS.items()
            if p == plural
        }
        outcome = evaluate(celcheck, {webhook: expression}, mine, requests)
        assert outcome[webhook]["results"] == {
            n: sent for n, (p, _, _, sent) in CLAIM_OBJECTS.items() if p == plural
        }, webhook


# ---- a policy's own resource names (`quotaguard registrations`) ------------------------------

POLICY_NAMES = ("example.com/a100-slice", "example.org/fabric")
SLICES = asking({"example.com/a100-slice": "4"})
# a rewritten Pod re-applied: the plain GPU back next to the policy's own resource
SLICES_REAPPLIED = asking({"example.com/a100-slice": "1", "nvidia.com/gpu": "1"})


def first_conditions(names: tuple[str, ...]) -> dict[str, str]:
    """Webhook name -> its first condition's expression, in registrations rendered for
    `names`; the AppWrapper's (its components, all sent) and the claim objects' left out."""
    return {
        hook["name"]: hook["matchConditions"][0]["expression"]
        for config in configurations(names)
        for hook in config["webhooks"]
        if hook["matchConditions"][0]["name"] in (REQUESTS_NVIDIA, PLAIN_GPU_NEXT_TO_ANOTHER)
    }


def test_the_api_server_compiles_every_condition_widened_for_a_policys_names(
    celcheck: Path,
) -> None:
    widened = {
        f"{hook['name']}/{condition['name']}": condition["expression"]
        for config in configurations(POLICY_NAMES)
        for hook in config["webhooks"]
        for condition in hook["matchConditions"]
    }
    outcome = evaluate(celcheck, widened, {})
    assert {name: result.get("error") for name, result in outcome.items()} == {
        name: None for name in widened
    }


def test_a_policys_own_name_is_sent_by_the_widened_conditions_only(celcheck: Path) -> None:
    template = {"spec": spec(SLICES, CPU)}
    objects = {f"{kind.id.lower()}s": of_kind(kind.id, template) for kind in KINDS}
    objects["pods-reapplied"] = {"spec": spec(SLICES_REAPPLIED)}

    def sent(names: tuple[str, ...]) -> dict[str, bool]:
        conditions = first_conditions(names)
        outcome = evaluate(celcheck, conditions, objects)
        return {
            hook: outcome[hook]["results"]["pods-reapplied" if hook == POD_UPDATES else kind]
            for hook in conditions
            if (kind := kind_of(hook)) in objects
        }

    widened, default = sent(POLICY_NAMES), sent(())
    assert len(widened) == 20 + 1 + 19 + 20 + 19 + 19
    assert widened == {hook: True for hook in widened}
    assert default == {hook: False for hook in default}
