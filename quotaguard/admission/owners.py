"""Who may create an object that names an owner: the controller of that owner's kind.

An object whose `ownerReferences` names a Job (or any handled kind) and which carries
quotaguard's decision record is not decided again: its template was decided at the owner.
Anyone may write an owner reference and a stamp into a Pod, though, so they are believed only
when the request comes from the controller of the owner's kind: kube-controller-manager's
workload controllers (with `--use-service-account-credentials` each has its own service
account; without it they all act as `system:kube-controller-manager`) and the operators of the
other kinds (the JobSet, LeaderWorkerSet, KubeRay, Kubeflow, MPI, Trainer, AppWrapper and
Volcano controllers, under the service accounts their releases install). A policy replaces a
kind's list with `spec.ownerControllers` and adds usernames trusted for every kind with
`spec.trustedControllers`.

Kueue does not queue an object whose controller owner is a kind it manages (it walks up to the
owner and accounts that instead), so such an object made by anyone but the owner's controller
would run outside every quota: admission refuses it (`foreign_owner`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from quotaguard.kube.kinds import Kind, kind_of
from quotaguard.policy.model import TenantPolicy

KUBE_CONTROLLER_MANAGER = "system:kube-controller-manager"


def _account(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def _kube(controller: str) -> tuple[str, ...]:
    return (_account("kube-system", controller), KUBE_CONTROLLER_MANAGER)


_KUBERAY = (_account("ray-system", "kuberay-operator"),)
_TRAINING_OPERATOR = (_account("kubeflow", "training-operator"),)
_LWS = (_account("lws-system", "lws-controller-manager"),)

# Owner kind (`quotaguard.kube.kinds` id) -> the usernames that create the objects it owns, as
# the projects' own release manifests install them (a Helm release of KubeRay runs in the
# release's namespace: list it in spec.ownerControllers).
DEFAULT_OWNER_CONTROLLERS: Mapping[str, tuple[str, ...]] = {
    "Job": _kube("job-controller"),
    "CronJob": _kube("cronjob-controller"),
    "Deployment": _kube("deployment-controller"),
    "ReplicaSet": _kube("replicaset-controller"),
    "StatefulSet": _kube("statefulset-controller"),
    "JobSet": (_account("jobset-system", "jobset-controller-manager"),),
    "VolcanoJob": (_account("volcano-system", "volcano-controllers"),),
    "LeaderWorkerSet": _LWS,
    # A LeaderWorkerSet's leader Pod owns its group's worker StatefulSet.
    "Pod": _LWS,
    "RayJob": _KUBERAY,
    "RayCluster": _KUBERAY,
    "RayService": _KUBERAY,
    "PyTorchJob": _TRAINING_OPERATOR,
    "TFJob": _TRAINING_OPERATOR,
    "XGBoostJob": _TRAINING_OPERATOR,
    "PaddleJob": _TRAINING_OPERATOR,
    "JAXJob": _TRAINING_OPERATOR,
    "MPIJob": (_account("mpi-operator", "mpi-operator"),),
    "TrainJob": (_account("kubeflow-system", "kubeflow-trainer-controller-manager"),),
    "AppWrapper": (_account("appwrapper-system", "appwrapper-controller-manager"),),
}

# kube-controller-manager's controllers that create pods or workload objects from templates.
KUBE_CONTROLLERS: frozenset[str] = frozenset(
    name
    for kind in ("Job", "CronJob", "Deployment", "ReplicaSet", "StatefulSet")
    for name in DEFAULT_OWNER_CONTROLLERS[kind]
)

# Owner kinds whose objects Kueue queues on their own (a Job of a CronJob, the pods of a
# Volcano Job, which Kueue does not manage): anyone may name them as owner without escaping.
# Every other handled kind is one Kueue manages, or, a ReplicaSet, one it walks through to
# its Deployment.
_NOT_KUEUE_MANAGED = frozenset({"CronJob", "VolcanoJob"})


def username_of(user_info: object) -> str | None:
    """`request.userInfo.username`, None when absent or not a string."""
    if not isinstance(user_info, Mapping):
        return None
    username = user_info.get("username")
    return username if isinstance(username, str) else None


def controllers_of(policy: TenantPolicy, kind_id: str) -> tuple[str, ...]:
    """The usernames that create the objects an owner of `kind_id` owns: the policy's
    `spec.ownerControllers` entry for the kind, else the default."""
    configured = policy.spec.owner_controllers.get(kind_id)
    if configured is not None:
        return tuple(configured)
    return DEFAULT_OWNER_CONTROLLERS.get(kind_id, ())


Owners = list[tuple[Kind, Mapping[str, Any]]]


def owner_kinds(obj: Mapping[str, Any]) -> Owners:
    """(kind, reference) of every owner reference of `obj` that names a handled kind."""
    metadata = obj.get("metadata")
    references = metadata.get("ownerReferences") if isinstance(metadata, dict) else None
    if not references or not isinstance(references, list):
        return []  # a bare object: the common case, decided here
    found: Owners = []
    for reference in references:
        if not isinstance(reference, dict):
            continue
        api_version, kind = reference.get("apiVersion"), reference.get("kind")
        if isinstance(api_version, str) and isinstance(kind, str):
            row = _handled(api_version, kind)
            if row is not None:
                found.append((row, reference))
    return found


@lru_cache(maxsize=256)
def _handled(api_version: str, kind: str) -> Kind | None:
    return kind_of({"apiVersion": api_version, "kind": kind})


def trusted_creator(policy: TenantPolicy, user_info: object, owners: Owners) -> bool:
    """Whether the request comes from the controller of a kind the object names as owner
    (`owners`, see `owner_kinds`), or from a username the policy trusts for every kind, so its
    owner references are believed."""
    if not owners:
        return False
    username = username_of(user_info)
    if username is None:
        return False
    if username in policy.spec.trusted_controllers:
        return True
    return any(username in controllers_of(policy, kind.id) for kind, _ in owners)


def kueue_managed_owner(owners: Owners) -> tuple[Kind, Mapping[str, Any]] | None:
    """The controller owner reference among `owners` when it names a kind Kueue manages (or
    walks through): Kueue then accounts the owner and does not queue the object itself."""
    for kind, reference in owners:
        if reference.get("controller") is True and kind.id not in _NOT_KUEUE_MANAGED:
            return kind, reference
    return None
