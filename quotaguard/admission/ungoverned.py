"""GPUs a tenant asks for in a form no quota counts: refused, naming what was asked.

A GPU class counts whole units of one resource, so a queue's quota holds them. Three other ways
of asking for a GPU would run beside the quotas, unseen: HAMi's shares of an NVIDIA GPU
(`nvidia.com/gpumem`, `gpucores`, `gpumem-percentage` next to `nvidia.com/gpu`), an accelerator
of another vendor that no class of the policy names (`amd.com/gpu`, `gpu.intel.com/i915`,
`habana.ai/gaudi`, ...; a policy that gives it a class governs it like any other), and KAI
scheduler's share annotations (`gpu-fraction`, `gpu-memory`). None of them passes as "no GPU",
and none is rewritten halfway (HAMi's `nvidia.com/gpu` is not turned into a class beside its
`gpumem`): mutation leaves such an object alone and validation refuses it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from quotaguard.admission.decision import Denial
from quotaguard.admission.workload import GpuContainer, TemplateView
from quotaguard.kube.names import GPU_RESOURCE, HAMI_RESOURCES
from quotaguard.policy.model import Tenant, TenantPolicy

NOT_COUNTED = "which quotaguard does not govern (no queue's quota counts it)"


def asks_ungoverned(views: list[TemplateView]) -> bool:
    return any(
        view.scheduler_shares or any(c.ungoverned for c in view.gpu_containers) for view in views
    )


def ungoverned_denials(
    policy: TenantPolicy, tenant: Tenant, view: TemplateView
) -> Iterator[Denial]:
    """One denial per GPU of `view` that no quota counts."""
    who = f'tenant "{tenant.name}": '
    instead = _instead(tenant)
    for container in view.gpu_containers:
        for resource, value in container.ungoverned.items():
            yield _resource(policy, who, container, resource, value, instead)
    shares = view.scheduler_shares
    if shares:
        asked = ", ".join(f"{k}: {json.dumps(v)}" for k, v in shares.items())
        where = f" of {view.name}" if view.name else ""
        scheduler = json.dumps(view.spec.get("schedulerName"))
        yield Denial(
            "gpu-not-governed",
            f"{who}the pod annotations{where} ({asked}) ask scheduler {scheduler} for a share "
            f"of a GPU, {NOT_COUNTED}; remove {' and '.join(shares)} and {instead}",
        )


def _resource(
    policy: TenantPolicy,
    who: str,
    container: GpuContainer,
    resource: str,
    value: object,
    instead: str,
) -> Denial:
    asked = f"{container.title} asks for {resource}: {json.dumps(value)}"
    if resource in HAMI_RESOURCES:
        return Denial(
            "gpu-not-governed",
            f"{who}{asked}, HAMi's share of a GPU, {NOT_COUNTED}; remove HAMi's resources "
            f"({', '.join(sorted(HAMI_RESOURCES))}) and {instead}",
        )
    return Denial(
        "gpu-not-governed",
        f'{who}{asked}, an accelerator no GPU class of policy "{policy.name}" offers, '
        f"{NOT_COUNTED}; {instead}, or ask the platform team for a GPU class of {resource}",
    )


def _instead(tenant: Tenant) -> str:
    allowed = ", ".join(tenant.allowed_classes) if tenant.allowed_classes is not None else "any"
    return (
        f"ask for {GPU_RESOURCE}, which quotaguard rewrites to a class the tenant may use "
        f"(allowedClasses: {allowed})"
    )
