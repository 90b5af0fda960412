"""Kueue's admission gate on a Pod: only Kueue lifts it.

Kueue queues a Pod by gating it (`kueue.x-k8s.io/admission` in `spec.schedulingGates`) and
removes the gate when the Pod's Workload is admitted within its ClusterQueue's quota. The API
server lets anyone who may update the Pod remove a scheduling gate, and Kueue's own webhook does
not object: a tenant who lifts the gate on their own GPU Pod gets it scheduled at once, outside
the quota. Kueue notices the running, unadmitted Pod only afterwards and deletes it, with the
Pod's own `terminationGracePeriodSeconds`, which the tenant chose. So the gate is Kueue's to
lift: an UPDATE of a tenant's GPU Pod that drops it is refused unless it comes from one of the
policy's `spec.kueueControllers` (or `spec.trustedControllers`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quotaguard.admission.decision import Denial
from quotaguard.admission.owners import username_of
from quotaguard.admission.reading import Reading
from quotaguard.admission.workload import as_map, has_gpus
from quotaguard.kube.dra import has_pod_claims
from quotaguard.kube.names import KUEUE_ADMISSION_GATE
from quotaguard.policy.model import TenantPolicy


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = as_map(pod.get("spec")).get("schedulingGates")
    if not isinstance(gates, list):
        return False
    return any(isinstance(g, Mapping) and g.get("name") == KUEUE_ADMISSION_GATE for g in gates)


def lifted_gate(
    policy: TenantPolicy,
    reading: Reading,
    old: Mapping[str, Any] | None,
    namespace: str,
    user_info: object,
) -> Denial | None:
    """The denial of an UPDATE that lifts Kueue's admission gate off a GPU Pod of a tenant's
    namespace, made by other than Kueue; None for every other request."""
    if reading.kind_id != "Pod" or old is None or policy.spec.backend != "kueue":
        return None
    if not _gated(old) or _gated(reading.obj) or policy.exempt(namespace):
        return None
    username = username_of(user_info)
    allowed = (*policy.spec.kueue_controllers, *policy.spec.trusted_controllers)
    if username in allowed:
        return None
    spec = as_map(reading.obj.get("spec"))
    if not has_gpus(reading.views) and not has_pod_claims(spec):
        return None
    tenant = policy.tenant_of(namespace)
    who = f'tenant "{tenant.name}": ' if tenant is not None else ""
    return Denial(
        "gate-not-kueues",
        f"{who}only Kueue removes the scheduling gate {KUEUE_ADMISSION_GATE} from a GPU pod, "
        f"when it admits the pod's workload within the queue's quota; {username or 'a request'} "
        "may not (it would start the pod outside the quota): keep the gate and let Kueue admit "
        "the workload (spec.kueueControllers names who may remove it)",
    )
