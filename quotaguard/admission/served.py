"""GPUs asked as an extended resource a DRA DeviceClass serves, judged as the claim it becomes.

With DRA extended resources (KEP-5004, beta in Kubernetes 1.36) a container may ask for
`deviceclass.resource.kubernetes.io/<DeviceClass>: N`, or for the `extendedResourceName` a
DeviceClass declares, and the API server builds the pod's ResourceClaim itself: N devices of
the DeviceClass, with no selectors. The request may therefore get a device of every policy
class of that DeviceClass, so each of them must be allowed to the tenant (a claim's rule, see
`claimrules`), and it is worth the largest of their GPU-equivalents (`classes.gpu_equivalent`).
The webhook itself creates no objects: a rewrite only changes the container's resource name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from quotaguard.admission.decision import Denial
from quotaguard.admission.workload import TemplateView
from quotaguard.kube.names import DRA_EXTENDED_RESOURCE_PREFIX
from quotaguard.policy.dra_classes import served_classes
from quotaguard.policy.model import Tenant, TenantPolicy


def is_served(policy: TenantPolicy, resource: str) -> bool:
    """Whether `resource` is an extended resource a DeviceClass of the policy serves."""
    return resource in policy.served_resources


def served_denials(policy: TenantPolicy, tenant: Tenant, view: TemplateView) -> Iterator[Denial]:
    """A container asking for a served resource that may get a class the tenant does not
    allow, naming the container, the DeviceClass and the refused classes."""
    for container in view.gpu_containers:
        for resource in container.resources:
            classes = served_classes(policy, resource)
            refused = [c for c in classes if not tenant.allows(c.name)]
            if not refused:
                continue
            value = container.limits.get(resource, container.requests.get(resource))
            names = ", ".join(f'"{c.name}"' for c in refused)
            allowed = ", ".join(tenant.allowed_classes or [])
            yield Denial(
                "class-not-allowed",
                f'tenant "{tenant.name}": {container.title} asks for {resource}: '
                f"{json.dumps(value)}, served through DRA by DeviceClass "
                f'"{policy.served_resources[resource]}", which may get devices of class '
                f"{names}, which the tenant does not allow (allowedClasses: {allowed}); "
                f"{_instead(policy, tenant)}",
            )


def _instead(policy: TenantPolicy, tenant: Tenant) -> str:
    """Another served resource all of whose classes the tenant may use, else a claim."""
    usable = [
        resource
        for resource in sorted(policy.served_resources, key=_implicit_last)
        if all(tenant.allows(c.name) for c in served_classes(policy, resource))
        and served_classes(policy, resource)
    ]
    if usable:
        return "ask for " + " or ".join(usable[:2])
    return "ask through a ResourceClaim whose selector pins an allowed class"


def _implicit_last(resource: str) -> bool:
    """A name a DeviceClass declares before the implicit one (the one a manifest would use)."""
    return resource.startswith(DRA_EXTENDED_RESOURCE_PREFIX)
