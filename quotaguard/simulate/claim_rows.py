"""A trace workload's DRA claims as the simulator's class requests.

The webhook resolves a pod's claims to policy classes (`admission.claims`); the simulator then
queues and places each request as that many units of its class, on the same capacity as the
class's extended resource: a DRA GPU and a device-plugin GPU of one class are the same GPU to
quotas and nodes. A request that may get several classes is placed as the first of them (the
controller counts demand the same way); a claim shared by several pods (a ResourceClaim by
name) is counted for each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from quotaguard.admission.claims import pod_claim_gpus
from quotaguard.kube.dra import DraObjects, has_pod_claims
from quotaguard.kube.podspec import pod_gpus, pod_templates
from quotaguard.policy.model import GpuClass, TenantPolicy

# pods, units per pod, nodeSelector, candidate classes (as `arrivals` rows)
Row = tuple[int, int, tuple[tuple[str, str], ...], list[GpuClass]]


class ClaimRows:
    """The claims of the objects of one namespace, resolved against a trace's DRA objects."""

    def __init__(self, policy: TenantPolicy, namespace: str, dra: DraObjects) -> None:
        self._policy = policy
        self._namespace = namespace
        self._dra = dra

    def rows(self, obj: Mapping[str, Any], multiplicity: Sequence[int]) -> list[Row]:
        """One row per pod template and class its claims get devices of."""
        found: list[Row] = []
        classes = self._policy.classes_by_name
        for template, pods in zip(pod_templates(obj), multiplicity, strict=False):
            if not has_pod_claims(template.spec):
                continue
            claims = pod_claim_gpus(self._policy, template.spec, self._namespace, self._dra)
            raw = template.spec.get("nodeSelector")
            selector = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
            for name, count in claims.per_class().items():
                found.append((pods, count, tuple(sorted(selector.items())), [classes[name]]))
        return found

    def dra(self, obj: Mapping[str, Any]) -> bool:
        """Whether some pod of the object gets GPUs through DRA: by claim, or by an extended
        resource a DeviceClass of the policy serves."""
        served = self._policy.served_resources
        for template in pod_templates(obj):
            if (
                has_pod_claims(template.spec)
                and pod_claim_gpus(
                    self._policy, template.spec, self._namespace, self._dra
                ).asks_gpus
            ):
                return True
            if any(r in served for r in pod_gpus(template.spec, self._policy.gpu_resources)):
                return True
        return False
