"""The admission rules for GPUs asked through DRA claims, beside those for extended resources.

For each pod template of a workload (or a Pod), its `resourceClaims` are resolved
(`claims`); a tenant's template is denied, naming the claim and its request, when a request
may get devices of a class the tenant does not allow or of a GPU DeviceClass no class covers,
when its claims (with its extended GPU resources) are worth more than `maxGPUsPerPod`, or when
a claim cannot be resolved. The queue, scheduler and namespace rules of `validate` apply to a
workload with DRA GPUs as to any GPU workload.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from quotaguard.admission.claims import (
    ChoiceGpus,
    ClaimGpus,
    PodClaimGpus,
    claim_spec_gpus,
    pod_claim_gpus,
)
from quotaguard.admission.classes import format_gpus, gpu_equivalent
from quotaguard.admission.decision import ALLOWED, Decision, Denial, deny
from quotaguard.admission.workload import TemplateView, as_map
from quotaguard.kube.dra import (
    CLAIM_KIND,
    NO_DRA_OBJECTS,
    TEMPLATE_KIND,
    DraLookup,
    PodClaim,
    has_pod_claims,
    is_resource_kind,
    resource_claim_spec,
    template_claim_spec,
)
from quotaguard.kube.podspec import pod_gpus
from quotaguard.policy.model import GpuClass, Tenant, TenantPolicy


@dataclass(frozen=True, slots=True)
class TemplateClaims:
    view: TemplateView
    gpus: PodClaimGpus


@dataclass(frozen=True, slots=True)
class WorkloadClaims:
    """The DRA claims of every pod template of one object, resolved."""

    templates: tuple[TemplateClaims, ...] = ()

    @property
    def asks_gpus(self) -> bool:
        return any(t.gpus.asks_gpus for t in self.templates)

    def asks_gpus_in(self, view: TemplateView) -> bool:
        return any(t.view is view and t.gpus.asks_gpus for t in self.templates)

    def denials(self, policy: TenantPolicy, tenant: Tenant | None) -> list[Denial]:
        """Every rule the claims break (none outside a tenant: only the namespace rule of
        `validate` applies there)."""
        if tenant is None:
            return []
        found: list[Denial] = []
        for template in self.templates:
            found.extend(_template_denials(policy, tenant, template))
        return found


NO_WORKLOAD_CLAIMS = WorkloadClaims()


def workload_claims(
    policy: TenantPolicy,
    namespace: str,
    views: Sequence[TemplateView],
    lookup: DraLookup | None,
    *,
    old_views: Sequence[TemplateView] | None = None,
) -> WorkloadClaims:
    """The claims of `views`; on UPDATE (`old_views`), none when the templates' claims did not
    change (an object keeps what it was admitted with)."""
    if not any(has_pod_claims(view.spec) for view in views):
        return NO_WORKLOAD_CLAIMS
    if old_views is not None and [_claims_of(v) for v in old_views] == [
        _claims_of(v) for v in views
    ]:
        return NO_WORKLOAD_CLAIMS
    found = lookup if lookup is not None else NO_DRA_OBJECTS
    return WorkloadClaims(
        tuple(
            TemplateClaims(view, pod_claim_gpus(policy, view.spec, namespace, found))
            for view in views
            if has_pod_claims(view.spec)
        )
    )


def _claims_of(view: TemplateView) -> str:
    return repr(view.spec.get("resourceClaims"))


def _template_denials(
    policy: TenantPolicy, tenant: Tenant, template: TemplateClaims
) -> Iterator[Denial]:
    who = f'tenant "{tenant.name}": '
    where = f"{template.view.name} " if template.view.name else ""
    for claim in template.gpus.claims:
        if claim.unresolved is not None:
            yield Denial("claim-unresolved", f"{who}{where}{claim.unresolved}")
            continue
        yield from claim_class_denials(policy, tenant, claim, where)
    limit = tenant.max_gpus_per_pod
    if limit is not None and template.gpus.asks_gpus:
        denial = _max_per_pod(policy, tenant, template, limit)
        if denial is not None:
            yield denial


def claim_class_denials(
    policy: TenantPolicy, tenant: Tenant, claim: ClaimGpus, where: str = ""
) -> Iterator[Denial]:
    """A request that may get devices of a class the tenant may not use, or of a GPU
    DeviceClass no class of the policy covers."""
    who = f'tenant "{tenant.name}": '
    for request in claim.requests:
        for choice in request.choices:
            if not choice.gpu:
                continue
            asked = f'{where}{claim.title} request "{choice.choice.name}"'
            if not choice.classes:
                yield Denial(
                    "class-not-allowed",
                    f'{who}{asked} asks for devices of DeviceClass "{choice.choice.device_class}"'
                    f'{_narrowed(choice)}, which no GPU class of policy "{policy.name}" covers; '
                    f"{_todo(tenant, policy)}",
                )
                continue
            refused = [c for c in choice.classes if not tenant.allows(c.name)]
            if refused:
                names = ", ".join(f'"{c.name}"' for c in refused)
                yield Denial(
                    "class-not-allowed",
                    f"{who}{asked} may get devices of class {names} (DeviceClass "
                    f'"{choice.choice.device_class}"{_narrowed(choice)}), which the tenant does '
                    f"not allow (allowedClasses: {', '.join(tenant.allowed_classes or [])}); "
                    f"{_todo(tenant, policy)}",
                )


def _narrowed(choice: ChoiceGpus) -> str:
    conditions = choice.choice.selection.conditions
    return f" where {' && '.join(map(str, conditions))}" if conditions else ""


def _todo(tenant: Tenant, policy: TenantPolicy) -> str:
    usable = [c for c in policy.dra_classes if tenant.allows(c.name)]
    if not usable:
        return "the tenant may use no GPU class through DRA: ask for an allowed class's resource"
    return "ask for " + " or ".join(_how(c) for c in usable[:3])


def _how(gpu_class: GpuClass) -> str:
    assert gpu_class.dra is not None
    pinned = ", ".join(str(c) for c in gpu_class.dra.selection.conditions)
    narrowed = f" with a selector for {pinned}" if pinned else ""
    return f'DeviceClass "{gpu_class.dra.device_class_name}"{narrowed} (class {gpu_class.name})'


def _max_per_pod(
    policy: TenantPolicy, tenant: Tenant, template: TemplateClaims, limit: float
) -> Denial | None:
    view = template.view
    extended = sum(
        (
            count * gpu_equivalent(policy, tenant, resource, view.node_selector)
            for resource, count in pod_gpus(view.spec, policy.gpu_resources).items()
        ),
        Fraction(0),
    )
    claimed = template.gpus.worth
    ceiling = Fraction(limit)
    if extended + claimed <= ceiling or extended > ceiling:
        return None  # within, or already refused for its extended resources alone
    parts = [
        f'claim "{claim.pod_claim.name}" = {format_gpus(claim.worth)}'
        for claim in template.gpus.claims
        if claim.worth
    ]
    if extended:
        parts.append(f"extended resources = {format_gpus(extended)}")
    where = f"{view.name} " if view.name else ""
    unit = "GPU-equivalent" if limit == 1 else "GPU-equivalents"
    return Denial(
        "max-gpus-per-pod",
        f'tenant "{tenant.name}": at most {limit:g} {unit} per pod (maxGPUsPerPod); {where}pod '
        f"asks for {format_gpus(extended + claimed)} ({', '.join(parts)}); ask for fewer "
        "devices or smaller classes in the claims, or use a namespace of a tenant that allows "
        "more",
    )


def claim_object_decision(
    policy: TenantPolicy,
    obj: Mapping[str, Any],
    namespace: str,
    lookup: DraLookup | None,
) -> Decision | None:
    """A ResourceClaimTemplate or ResourceClaim created in a tenant's namespace, judged before
    any pod names it: a request that may get a class the tenant does not allow, or more than
    `maxGPUsPerPod`, is refused. None for objects of other kinds. A DeviceClass that does not
    exist yet, or `allocationMode: All`, is left to the pods that use the claim."""
    template = is_resource_kind(obj, TEMPLATE_KIND)
    if not template and not is_resource_kind(obj, CLAIM_KIND):
        return None
    tenant = policy.tenant_of(namespace)
    if tenant is None or policy.exempt(namespace):
        return ALLOWED
    name = str(as_map(obj.get("metadata")).get("name") or "?")
    kind = TEMPLATE_KIND if template else CLAIM_KIND
    resolved = _claim_object(policy, obj, name, lookup, template=template)
    if resolved.unresolved is not None:
        return ALLOWED
    denials = [
        Denial(d.rule, d.message.replace(resolved.title, f'{kind} "{name}"'))
        for d in claim_class_denials(policy, tenant, resolved)
    ]
    limit = tenant.max_gpus_per_pod
    if limit is not None and resolved.worth > Fraction(limit):
        denials.append(
            Denial(
                "max-gpus-per-pod",
                f'tenant "{tenant.name}": {kind} "{name}" asks for '
                f"{format_gpus(resolved.worth)} GPU-equivalents, more than a pod may have "
                f"(maxGPUsPerPod: {limit:g}); no pod could use it: ask for fewer devices",
            )
        )
    if not denials:
        return ALLOWED
    return deny(denials, audit={"tenant": tenant.name})


def _claim_object(
    policy: TenantPolicy,
    obj: Mapping[str, Any],
    name: str,
    lookup: DraLookup | None,
    *,
    template: bool,
) -> ClaimGpus:
    if template:
        ref, spec = PodClaim(name, template_name=name), template_claim_spec(obj)
    else:
        ref, spec = PodClaim(name, claim_name=name), resource_claim_spec(obj)
    return claim_spec_gpus(policy, ref, spec, lookup if lookup is not None else NO_DRA_OBJECTS)
