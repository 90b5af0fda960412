"""Kueue's hold on a workload: only Kueue lifts it.

Kueue holds what it queues until it admits it within the ClusterQueue's quota: a Pod by a
scheduling gate (`kueue.x-k8s.io/admission`), a Job, JobSet, RayJob, Kubeflow job, TrainJob,
AppWrapper ... by its suspend field (`Kind.suspend`). The API server lets anyone who may update
the object lift either, and Kueue's webhooks do not object: a tenant who lifts the hold on their
own GPU workload has its pods scheduled at once, outside the quota. Kueue notices only
afterwards and stops them, each with the `terminationGracePeriodSeconds` the tenant chose. So
the hold is Kueue's to lift: an UPDATE of a GPU workload of a tenant's namespace that lifts it
is refused unless it comes from one of the policy's `spec.kueueControllers`, or one of
`spec.trustedControllers`, or (for a suspend) the controller of the object's owner (the JobSet
controller resumes a JobSet's Jobs).

Raising the pod count of a running workload (a Job's parallelism, a JobSet's replicas, a
PyTorchJob's replicas, ... `Kind.pod_counts`) does the same: its controller starts the extra
pods at once, and Kueue suspends the workload (every pod stopped within its grace period) only
afterwards, to admit it again. It is refused from the same users (lowered, or raised while held,
it is not).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quotaguard.admission.decision import Denial
from quotaguard.admission.owners import username_of
from quotaguard.admission.reading import Reading
from quotaguard.admission.workload import as_map, has_gpus
from quotaguard.kube.dra import has_pod_claims
from quotaguard.kube.kinds import Kind, parse_path, walk
from quotaguard.kube.names import KUEUE_ADMISSION_GATE
from quotaguard.policy.model import TenantPolicy


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = as_map(pod.get("spec")).get("schedulingGates")
    if not isinstance(gates, list):
        return False
    return any(isinstance(g, Mapping) and g.get("name") == KUEUE_ADMISSION_GATE for g in gates)


def _suspended(obj: Mapping[str, Any], path: str) -> bool:
    return any(value is True for _, value, _ in walk(obj, parse_path(path)))


def _held(kind: Kind, obj: Mapping[str, Any]) -> bool:
    if kind.id == "Pod":
        return _gated(obj)
    return kind.suspend is not None and _suspended(obj, kind.suspend)


def _hold_name(kind: Kind) -> str:
    if kind.id == "Pod":
        return f"the scheduling gate {KUEUE_ADMISSION_GATE} from a GPU pod"
    return f"{kind.suspend}: true from a GPU {kind.kind}"


def _counts(kind: Kind, obj: Mapping[str, Any]) -> dict[str, int]:
    """JSON Pointer -> pod count, at every place of `kind.pod_counts` (a count left out is 1)."""
    found: dict[str, int] = {}
    for path in kind.pod_counts:
        for pointer, value, _ in walk(obj, parse_path(path)):
            if isinstance(value, int) and not isinstance(value, bool):
                found[pointer] = value
    return found


def _widened(kind: Kind, old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """The first count `new` raises over `old` on a running object (`/spec/parallelism: 1 -> 6`),
    None when none is raised or the object is held."""
    if not kind.pod_counts or _held(kind, old) or _held(kind, new):
        return None
    before = _counts(kind, old)
    for pointer, count in _counts(kind, new).items():
        was = before.get(pointer, 1)
        if count > was:
            return f"{pointer}: {was} -> {count}"
    return None


def _lifting(kind: Kind, old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """What the update does that only Kueue may: None when nothing."""
    if _held(kind, old) and not _held(kind, new):
        return f"only Kueue removes {_hold_name(kind)}, when it admits the workload"
    widened = _widened(kind, old, new)
    if widened is not None:
        return (
            f"a running {kind.kind} keeps the pods Kueue admitted ({widened} would start more "
            "before Kueue suspends it to admit it again): create it anew with the new count, "
            "which Kueue admits within the quota"
        )
    return None


def lifted_hold(
    policy: TenantPolicy,
    reading: Reading,
    old: Mapping[str, Any] | None,
    namespace: str,
    user_info: object,
    *,
    owner_controller: bool,
) -> Denial | None:
    """The denial of an UPDATE that lifts Kueue's hold off a GPU workload of a tenant's
    namespace, made by other than Kueue (`owner_controller`: the request comes from the
    controller of an owner the object names, which may resume what it suspended); None for
    every other request."""
    kind = reading.kind
    if kind is None or old is None or policy.spec.backend != "kueue":
        return None
    lifting = _lifting(kind, old, reading.obj)
    if lifting is None or policy.exempt(namespace):
        return None
    username = username_of(user_info)
    if username in (*policy.spec.kueue_controllers, *policy.spec.trusted_controllers):
        return None
    if owner_controller and kind.id != "Pod":
        return None
    if not has_gpus(reading.views) and not any(has_pod_claims(v.spec) for v in reading.views):
        return None
    tenant = policy.tenant_of(namespace)
    who = f'tenant "{tenant.name}": ' if tenant is not None else ""
    return Denial(
        "kueue-hold-lifted",
        f"{who}{lifting}; {username or 'a request without a user'} may not (it would start pods "
        "outside the queue's quota; spec.kueueControllers names who may)",
    )
