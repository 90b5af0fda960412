"""Validation of the final object (after every mutating webhook): the admission denial rules.

Every violation is collected, so the one message a user gets lists all of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from functools import lru_cache
from math import lcm
from typing import Any

from quotaguard.admission.asked import asked_for, rewrites
from quotaguard.admission.claimrules import NO_WORKLOAD_CLAIMS, WorkloadClaims, workload_claims
from quotaguard.admission.classes import (
    allowed_classes,
    format_gpus,
    gpu_equivalent,
)
from quotaguard.admission.decision import ALLOWED, Decision, Denial, deny
from quotaguard.admission.names import (
    DEFAULT_SCHEDULER,
    GPU_CLASS_HINT,
    GPU_MEMORY_HINT,
    KUEUE_QUEUE_LABEL,
    REWRITE_HINT,
    VOLCANO_QUEUE_ANNOTATION,
    VOLCANO_SCHEDULER,
)
from quotaguard.admission.provenance import undecided_update
from quotaguard.admission.reading import Reading, reading_of
from quotaguard.admission.served import is_served, served_denials
from quotaguard.admission.ungoverned import ungoverned_denials
from quotaguard.admission.workload import (
    GpuContainer,
    TemplateView,
    as_map,
    has_gpus,
    owned_by_workload,
)
from quotaguard.kube.dra import DraLookup, has_pod_claims
from quotaguard.kube.podspec import PLAIN_GPU, containers, pod_gpus
from quotaguard.kube.quantity import parse_gpu_count
from quotaguard.policy.model import Tenant, TenantPolicy

QueueRef = tuple[str, str]  # (where it is set, queue name)


def validate(
    policy: TenantPolicy,
    obj: Mapping[str, Any],
    namespace: str,
    *,
    operation: str = "CREATE",
    old_object: Mapping[str, Any] | None = None,
    creator_trusted: bool = False,
    dra: DraLookup | None = None,
    reading: Reading | None = None,
    old_reading: Reading | None = None,
) -> Decision:
    """Allowed, or denied with every reason. `creator_trusted`: the request comes from a
    controller whose owner references are believed (see `owners`); `dra` finds the DRA
    objects its claims name (see `claimrules`); `reading`, `old_reading`: the engine's
    readings of `obj` and `old_object`.

    On UPDATE a changed queue is judged (Kueue lets a suspended Job move queues), and the GPU
    rules run again only when the GPU requests themselves changed (a suspended Job's template
    may be edited): an object that keeps what it was admitted with is never refused later
    because the policy changed meanwhile."""
    if operation not in ("CREATE", "UPDATE") or policy.exempt(namespace):
        return ALLOWED
    read = reading_of(obj, policy.gpu_resources, reading)
    views = read.views
    old = (
        reading_of(old_object, policy.gpu_resources, old_reading, "request.oldObject")
        if old_object is not None
        else None
    )
    claims = _claims(policy, namespace, views, dra, old if operation == "UPDATE" else None)
    if not has_gpus(views) and not claims.asks_gpus:
        return ALLOWED
    tenant = policy.tenant_of(namespace)
    # Made from a template judged at its owner: only another tenant's queue is refused here.
    strict = not owned_by_workload(obj, views, creator_trusted=creator_trusted)
    if operation == "UPDATE":
        judged = _update(policy, tenant, read, namespace, old, strict=strict)
        return _decision(tenant, judged + claims.denials(policy, tenant))
    denials: list[Denial] = []
    if tenant is None and policy.spec.unmatched_namespaces == "deny":
        denials.append(_unmatched(policy, namespace))
    for view in views:
        denials.extend(_gpu_rules(policy, tenant, view))
    denials.extend(claims.denials(policy, tenant))
    refs = queue_refs(read)
    denials.extend(_queue_isolation(policy, tenant, namespace, refs, strict=strict))
    if strict:
        denials.extend(_schedulers(policy, tenant, scheduler_refs(read)))
    return _decision(tenant, denials)


def _claims(
    policy: TenantPolicy,
    namespace: str,
    views: list[TemplateView],
    dra: DraLookup | None,
    old: Reading | None,
) -> WorkloadClaims:
    """The object's DRA claims; on UPDATE only when they changed."""
    if not any(has_pod_claims(view.spec) for view in views):
        return NO_WORKLOAD_CLAIMS
    old_views = old.views if old is not None else None
    return workload_claims(policy, namespace, views, dra, old_views=old_views)


def _update(
    policy: TenantPolicy,
    tenant: Tenant | None,
    reading: Reading,
    namespace: str,
    old: Reading | None,
    *,
    strict: bool,
) -> list[Denial]:
    """What an UPDATE changed, judged: GPU requests, queues, schedulers."""
    views = reading.views
    refs = queue_refs(reading)
    old_views = old.views if old is not None else []
    judged: list[Denial] = []
    if old is None or _gpu_requests(old_views) != _gpu_requests(views):
        for view in views:
            judged.extend(_gpu_rules(policy, tenant, view))
        if strict and tenant is not None and old is not None:
            judged.extend(undecided_update(policy, tenant, reading, old_views))
    if old is None or queue_refs(old) != refs:
        judged.extend(_queue_isolation(policy, tenant, namespace, refs, strict=strict))
    schedulers = scheduler_refs(reading)
    if strict and (old is None or scheduler_refs(old) != schedulers):
        judged.extend(_schedulers(policy, tenant, schedulers))
    return judged


def _gpu_requests(views: list[TemplateView]) -> list[tuple[str, str, str]]:
    """What the GPU containers of some templates ask for, comparable across two versions."""
    found = [
        (
            container.label,
            repr(dict(container.limits)),
            repr({**container.requests, **container.ungoverned}),
        )
        for view in views
        for container in view.gpu_containers
    ]
    found.extend((view.name or "", "shares", repr(view.scheduler_shares)) for view in views)
    return found


def _decision(tenant: Tenant | None, denials: list[Denial]) -> Decision:
    if not denials:
        return ALLOWED
    return deny(denials, audit={"tenant": tenant.name} if tenant else {})


def _who(tenant: Tenant | None) -> str:
    return f'tenant "{tenant.name}": ' if tenant else ""


def _gpu_rules(policy: TenantPolicy, tenant: Tenant | None, view: TemplateView) -> Iterator[Denial]:
    """Every GPU rule on one template: GPUs no quota counts, then the counted ones."""
    if tenant is not None:
        yield from ungoverned_denials(policy, tenant, view)
        yield from served_denials(policy, tenant, view)
    yield from _template(policy, tenant, view)


def _template(policy: TenantPolicy, tenant: Tenant | None, view: TemplateView) -> Iterator[Denial]:
    hint_denied = False
    if tenant is not None and view.gpu_containers:
        hint_denial = _class_hint(policy, tenant, view)
        if hint_denial is not None:
            hint_denied = True
            yield hint_denial
    for container in view.gpu_containers:
        yield from _container_rules(policy, tenant, view, container, hint_denied=hint_denied)
    if tenant is not None and tenant.max_gpus_per_pod is not None and view.gpu_containers:
        denial = _max_per_pod(policy, tenant, view, tenant.max_gpus_per_pod)
        if denial is not None:
            yield denial


def _container_rules(
    policy: TenantPolicy,
    tenant: Tenant | None,
    view: TemplateView,
    container: GpuContainer,
    *,
    hint_denied: bool,
) -> Iterator[Denial]:
    """The rules of one GPU container: whole values, one class, an allowed class, shared units
    (the plain GPU's class is not judged again when the template's class hint was denied)."""
    yield from _values(tenant, container)
    resources = container.resources
    if len(resources) > 1:
        yield Denial(
            "two-classes",
            f"{_who(tenant)}{container.title} asks for {len(resources)} GPU classes "
            f"({', '.join(resources)}); one container gets one GPU class: keep one of them "
            "or split the work into two containers",
        )
    for resource in resources:
        if tenant is not None and not (hint_denied and resource == PLAIN_GPU):
            denial = _class_allowed(policy, tenant, view, container, resource)
            if denial is not None:
                yield denial
        yield from _shared_units(policy, tenant, view, container, resource)


def _values(tenant: Tenant | None, container: GpuContainer) -> Iterator[Denial]:
    who = _who(tenant)
    for resource in container.resources:
        limit = container.limits.get(resource)
        request = container.requests.get(resource)
        if resource not in container.limits:
            yield Denial(
                "requests-only",
                f"{who}{container.title} sets {resource} only in requests; GPUs must be set in "
                f"limits: move it to limits (requests may be left out)",
            )
            if not parse_gpu_count(request):
                yield _not_whole(who, container, resource, "requests", request)
            continue
        if not parse_gpu_count(limit):
            yield _not_whole(who, container, resource, "limits", limit)
            continue
        if resource in container.requests:
            if not parse_gpu_count(request):
                yield _not_whole(who, container, resource, "requests", request)
            elif parse_gpu_count(request) != parse_gpu_count(limit):
                yield Denial(
                    "requests-limits",
                    f"{who}{container.title} requests {resource}={request} but limits it to "
                    f"{limit}; GPUs cannot be overcommitted: set requests equal to limits or "
                    "leave requests out",
                )


def _not_whole(
    who: str, container: GpuContainer, resource: str, section: str, value: object
) -> Denial:
    return Denial(
        "gpu-value",
        f"{who}{container.title} asks for {resource}: {_shown(value)} in {section}; "
        "GPUs come in whole units: use a positive whole number such as 1",
    )


def _shown(value: object, limit: int = 40) -> str:
    """The value as JSON, cut short: a 400-digit count need not be repeated in full."""
    text = json.dumps(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _allowed_names(tenant: Tenant) -> str:
    return ", ".join(tenant.allowed_classes or []) or "none"


def _class_hint(policy: TenantPolicy, tenant: Tenant, view: TemplateView) -> Denial | None:
    hint = view.hints.get(GPU_CLASS_HINT)
    if hint is None or hint == "":
        return None
    if isinstance(hint, str) and hint in policy.classes_by_name and tenant.allows(hint):
        return None
    where = f" on {view.name}" if view.name else ""
    if hint not in policy.classes_by_name:
        known = ", ".join(policy.classes_by_name)
        return Denial(
            "class-not-allowed",
            f"{_who(tenant)}{GPU_CLASS_HINT} {json.dumps(hint)}{where} is not a GPU class of "
            f'policy "{policy.name}" (classes: {known}); set it to one of '
            f"{_allowed_names(tenant)} or remove it",
        )
    return Denial(
        "class-not-allowed",
        f"{_who(tenant)}{GPU_CLASS_HINT} {json.dumps(hint)}{where} names a class the tenant "
        f"does not allow (allowedClasses: {_allowed_names(tenant)}); set it to one of those or "
        "remove it",
    )


def _class_allowed(
    policy: TenantPolicy,
    tenant: Tenant,
    view: TemplateView,
    container: GpuContainer,
    resource: str,
) -> Denial | None:
    if is_served(policy, resource) or allowed_classes(policy, tenant, resource):
        return None  # a served resource is judged as the claim it becomes (`served`)
    classes = policy.classes_by_resource.get(resource, [])
    asked = (
        f'class "{classes[0].name}" ({resource})'
        if len(classes) == 1
        else f"{resource}, which no GPU class of the policy offers"
        if not classes
        else f"{resource} (classes {', '.join(c.name for c in classes)})"
    )
    if resource == PLAIN_GPU and not view.rewrite_enabled:
        todo = f'remove the {REWRITE_HINT}: "false" annotation so the request is rewritten'
    elif resource == PLAIN_GPU:
        todo = (
            f"set {GPU_CLASS_HINT} to an allowed class, or {GPU_MEMORY_HINT} so the tenant's "
            "rewrite rules can pick one"
        )
    else:
        todo = f"ask for {PLAIN_GPU} and let quotaguard pick a class, or use an allowed class"
    return Denial(
        "class-not-allowed",
        f"{_who(tenant)}{container.title} asks for {asked}, which the tenant does not allow "
        f"(allowedClasses: {_allowed_names(tenant)}); {todo}",
    )


def _shared_units(
    policy: TenantPolicy,
    tenant: Tenant | None,
    view: TemplateView,
    container: GpuContainer,
    resource: str,
) -> Iterator[Denial]:
    count = parse_gpu_count(container.limits.get(resource))
    if not count or count <= 1:
        return
    shared = [c for c in policy.classes_by_resource.get(resource, []) if c.shared]
    if shared:
        asked = asked_for(view, container, resource, rewrites(view.hints))
        written = asked.resource if asked else resource
        what = (
            f"{asked}, which is shared class"
            if asked and asked.became
            else f"{count} units of shared class"
        )
        yield Denial(
            "shared-units",
            f'{_who(tenant)}{container.title} asks for {what} "{shared[0].name}" ({resource}); '
            f"time-slicing gives one container no extra compute for more units: ask for "
            f"{written}: 1",
        )


def _max_per_pod(
    policy: TenantPolicy, tenant: Tenant, view: TemplateView, limit: float
) -> Denial | None:
    def worth(resource: str) -> Fraction:
        return gpu_equivalent(policy, tenant, resource, view.node_selector)

    ceiling = _ceiling(limit)
    # Every container at once bounds what the scheduler reserves; most pods are far below the
    # limit, and then the exact count (init containers at their peak) is not needed.
    if _upper_bound_within(view, worth, ceiling):
        return None
    reserved = pod_gpus(view.spec, policy.gpu_resources)
    total = sum((count * worth(r) for r, count in reserved.items()), Fraction(0))
    if total <= ceiling:
        return None
    init_note = ""
    if any(c.init for c in view.gpu_containers):
        init_note = "; init containers count as the largest one"
        if any(ref.sidecar for ref in containers(view.spec)):
            init_note += ", each beside the sidecars declared before it"
    where = f"{view.name} " if view.name else ""
    unit = "GPU-equivalent" if limit == 1 else "GPU-equivalents"
    return Denial(
        "max-gpus-per-pod",
        f"{_who(tenant)}at most {limit:g} {unit} per pod (maxGPUsPerPod); {where}pod asks for "
        f"{format_gpus(total)} ({_asked_list(view, worth)}{init_note}); request fewer GPUs or "
        "smaller classes, or use a namespace of a tenant that allows more",
    )


def _asked_list(view: TemplateView, worth: Callable[[str], Fraction]) -> str:
    """`main: nvidia.com/gpu: 8 as nvidia.com/mig-3g.40gb = 3.43, sidecar: nvidia.com/gpu: 1`:
    each container as the manifest wrote it, with what it became and is worth when that
    differs."""
    found = rewrites(view.hints)
    parts = []
    for container in view.gpu_containers:
        for resource in container.limits:
            asked = asked_for(view, container, resource, found)
            if asked is None:
                continue
            text = f"{container.label}: {asked}"
            if asked.became:
                text += f" as {resource}"
            each = worth(resource)
            if each != 1:
                text += f" = {format_gpus(asked.amount * each)}"
            parts.append(text)
    return ", ".join(parts)


@lru_cache(maxsize=64)
def _ceiling(limit: float) -> Fraction:
    return Fraction(limit)


def _upper_bound_within(
    view: TemplateView, worth: Callable[[str], Fraction], ceiling: Fraction
) -> bool:
    """Whether every GPU container at once asks for at most `ceiling` whole GPUs. Exact, in
    integers over the least common denominator: a sum of Fractions builds and normalises a
    Fraction per step, and this runs for every pod of a tenant with maxGPUsPerPod."""
    numerator, denominator = 0, 1
    for container in view.gpu_containers:
        for resource in container.resources:
            value = container.limits.get(resource, container.requests.get(resource))
            count = parse_gpu_count(value)
            if count:
                each = worth(resource)
                if denominator % each.denominator:
                    common = lcm(denominator, each.denominator)
                    numerator *= common // denominator
                    denominator = common
                numerator += count * each.numerator * (denominator // each.denominator)
    return numerator * ceiling.denominator <= ceiling.numerator * denominator


def queue_refs(reading: Reading) -> list[QueueRef]:
    """Every queue the object names: Kueue labels, Volcano annotations, a Volcano Job's queue."""
    refs: dict[QueueRef, None] = {}
    obj = reading.obj
    labelled = [where for _, where in reading.queue_label_metadata()]
    metadatas = [reading.metadata, *labelled, *(v.template.metadata for v in reading.views)]
    for metadata in metadatas:
        label = as_map(metadata.get("labels")).get(KUEUE_QUEUE_LABEL)
        if isinstance(label, str) and label:
            refs[(f"label {KUEUE_QUEUE_LABEL}", label)] = None
        annotation = as_map(metadata.get("annotations")).get(VOLCANO_QUEUE_ANNOTATION)
        if isinstance(annotation, str) and annotation:
            refs[(f"annotation {VOLCANO_QUEUE_ANNOTATION}", annotation)] = None
    if reading.kind_id == "VolcanoJob":
        queue = as_map(obj.get("spec")).get("queue")
        if isinstance(queue, str) and queue:
            refs[("spec.queue", queue)] = None
    return list(refs)


def _queue_isolation(
    policy: TenantPolicy,
    tenant: Tenant | None,
    namespace: str,
    refs: list[QueueRef],
    *,
    strict: bool,
) -> Iterator[Denial]:
    """Another tenant's queue is refused; with `strict`, so is any queue that is not the
    tenant's own or one of its `extraQueues` (`default`, the parent queue, a typo)."""
    for where, queue in refs:
        if tenant is not None and queue in tenant.queues:
            continue
        owner = policy.tenant_of_queue(queue)
        if owner is None and tenant is not None and strict:
            yield _queue_not_allowed(policy, tenant, namespace, where, queue)
            continue
        if owner is None or (tenant is not None and owner.name == tenant.name):
            continue
        if tenant is None:
            todo = "use a queue of your own, or run the workload in a tenant namespace"
        else:
            own = tenant.local_queue if where.startswith("label") else tenant.queue
            todo = f'remove it (quotaguard sets it) or set it to "{own}"'
        yield Denial(
            "queue-isolation",
            f'{_who(tenant)}queue "{queue}" ({where}) belongs to tenant "{owner.name}"; '
            f'workloads in namespace "{namespace}" may not use it: {todo}',
        )


def _unmatched(policy: TenantPolicy, namespace: str) -> Denial:
    owned = ", ".join(p for t in policy.spec.tenants for p in t.namespaces)
    return Denial(
        "unmatched-namespace",
        f'namespace "{namespace}" belongs to no tenant of policy "{policy.name}" and '
        f"unmatchedNamespaces is deny: GPUs are for tenant namespaces ({owned}); run the "
        "workload in one of them or ask the platform team to add this namespace to a tenant",
    )


def _queue_not_allowed(
    policy: TenantPolicy, tenant: Tenant, namespace: str, where: str, queue: str
) -> Denial:
    own = tenant.local_queue if where.startswith("label") else tenant.queue
    what = (
        "is the parent queue of every tenant queue"
        if queue == policy.volcano_parent
        else "is not a queue of the tenant"
    )
    extra = (
        f" (or one of extraQueues: {', '.join(tenant.extra_queues)})" if tenant.extra_queues else ""
    )
    return Denial(
        "queue-not-allowed",
        f'{_who(tenant)}queue "{queue}" ({where}) {what}; GPU workloads in namespace '
        f'"{namespace}" go to "{own}"{extra}: remove it (quotaguard sets it) or set it to '
        f'"{own}"',
    )


SchedulerRef = tuple[str, object]  # (where it is set, schedulerName as written)


def scheduler_refs(reading: Reading) -> list[SchedulerRef]:
    """The schedulerName of every pod template that has a pod spec, and a Volcano Job's."""
    refs: list[SchedulerRef] = []
    for view in reading.views:
        if view.template.placeable:
            where = f"{view.name} " if view.name else ""
            refs.append((f"{where}schedulerName", view.spec.get("schedulerName")))
    if reading.kind_id == "VolcanoJob":
        spec = as_map(reading.obj.get("spec"))
        refs.append(("spec.schedulerName", spec.get("schedulerName")))
    return refs


def allowed_schedulers(policy: TenantPolicy) -> tuple[str, ...]:
    own = VOLCANO_SCHEDULER if policy.spec.backend == "volcano" else DEFAULT_SCHEDULER
    scheduling = policy.spec.scheduling
    packing = [scheduling.scheduler_name] if scheduling and scheduling.scheduler_name else []
    return tuple(dict.fromkeys([own, *packing, *policy.spec.allowed_schedulers]))


def _schedulers(
    policy: TenantPolicy, tenant: Tenant | None, refs: list[SchedulerRef]
) -> Iterator[Denial]:
    """A GPU workload of a tenant is scheduled by the backend's scheduler (or one the policy
    lists): another scheduler would place it past the queue's quota and the class's nodes."""
    if tenant is None:
        return
    allowed = allowed_schedulers(policy)
    for where, name in refs:
        effective = DEFAULT_SCHEDULER if name in (None, "") else name
        if effective in allowed:
            continue
        volcano = policy.spec.backend == "volcano"
        remove = "remove schedulerName (quotaguard sets it)" if volcano else "remove schedulerName"
        yield Denial(
            "scheduler-not-allowed",
            f"{_who(tenant)}{where} {json.dumps(name)} is not a scheduler of this cluster's "
            f"GPU workloads (allowedSchedulers: {', '.join(allowed)}); another scheduler "
            f"bypasses {'Volcano' if volcano else 'Kueue'}'s queues and the GPU classes' "
            f'nodes: {remove} or set it to "{allowed[0]}"',
        )
