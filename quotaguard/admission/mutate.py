"""Mutation: rewrite GPU requests into the tenant's classes, place, queue, and say so.

Pure: reads the object and the policy, returns a Decision whose patch applies to the object as
it arrived. Mutating the result again yields no patch. This decides on CREATE; an UPDATE only
gets back what CREATE decided (`restore`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

import jsonpatch

from quotaguard.admission.claimrules import WorkloadClaims, workload_claims
from quotaguard.admission.classes import left_to_kueue, resolve_class
from quotaguard.admission.decision import ALLOWED, Decision, Denial, PatchOp, deny
from quotaguard.admission.names import (
    DECIDED_ANNOTATION,
    DEFAULT_SCHEDULER,
    GPU_CLASS_HINT,
    GPU_MEMORY_HINT,
    KUEUE_QUEUE_LABEL,
    REWRITTEN_ANNOTATION,
    TENANT_ANNOTATION,
    VOLCANO_QUEUE_ANNOTATION,
    VOLCANO_SCHEDULER,
)
from quotaguard.admission.patch import PatchBuilder
from quotaguard.admission.provenance import TEMPLATE_COMPARED
from quotaguard.admission.reading import Reading, reading_of
from quotaguard.admission.restore import restore
from quotaguard.admission.swap import swap_resource, whole_gpus
from quotaguard.admission.ungoverned import asks_ungoverned
from quotaguard.admission.workload import (
    GpuContainer,
    TemplateView,
    as_map,
    changed_views,
    decision_holds,
    gpu_ask,
    has_gpus,
    owned_by_workload,
)
from quotaguard.kube.dra import DraLookup
from quotaguard.kube.podspec import PLAIN_GPU
from quotaguard.kube.quantity import QuantityError, format_bytes, parse_quantity
from quotaguard.policy.fungibility import compatible
from quotaguard.policy.model import BEST_FIT, GpuClass, RewriteCondition, Tenant, TenantPolicy


class _Choice(NamedTuple):
    gpu_class: GpuClass | None
    reason: str = ""
    warning: str | None = None
    # several classes on one resource (`to: [h100, a100]`): Kueue's flavor picks among them
    fungible: tuple[GpuClass, ...] = ()


@dataclass(slots=True)
class _Mutation:
    """What one pass over the object collects before it becomes a Decision."""

    patch: PatchBuilder
    changes: list[str]
    warnings: list[str]
    denials: list[Denial]
    # requests left on a resource several classes share, for Kueue to pick the flavor
    kept: list[str] = field(default_factory=list)
    # container pointer -> the resource its GPU request moves to
    moved: dict[str, str] = field(default_factory=dict)


def mutate(
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
    """CREATE decides; UPDATE puts back what CREATE decided when the update undid it (see
    `restore`) and decides like CREATE a template whose GPU requests it changes (see
    `_update`); other operations are left alone. `creator_trusted`: the request comes from
    the controller of the object's owner (see `owners`). `dra` finds the DRA
    objects its claims name (a workload with GPUs only through claims is queued too).
    `reading`, `old_reading`: the engine's readings of `obj` and `old_object`."""
    if policy.exempt(namespace):
        return ALLOWED
    if operation == "UPDATE":
        read = reading_of(obj, policy.gpu_resources, reading)
        old = (
            None
            if old_object is None
            else reading_of(old_object, policy.gpu_resources, old_reading, "request.oldObject")
        )
        return _update(policy, read, namespace, old, creator_trusted=creator_trusted)
    if operation != "CREATE":
        return ALLOWED
    tenant = policy.tenant_of(namespace)
    if tenant is None:
        return ALLOWED
    return _create(
        policy,
        tenant,
        reading_of(obj, policy.gpu_resources, reading),
        namespace,
        dra,
        creator_trusted=creator_trusted,
    )


def _create(
    policy: TenantPolicy,
    tenant: Tenant,
    read: Reading,
    namespace: str,
    dra: DraLookup | None,
    *,
    creator_trusted: bool,
) -> Decision:
    """A tenant's object on CREATE: rewritten, placed, queued and stamped."""
    obj, views = read.obj, read.views
    claims = workload_claims(policy, namespace, views, dra)
    # A pod of a Job was made from a template this webhook already rewrote. GPUs no quota
    # counts are not rewritten halfway: validation refuses them.
    if (
        not _gpu_workload(views, claims)
        or owned_by_workload(obj, views, creator_trusted=creator_trusted)
        or asks_ungoverned(views)
    ):
        return ALLOWED
    state = _Mutation(PatchBuilder(obj), [], [], [])
    single_template = len(views) == 1 and views[0].template.metadata_pointer == "/metadata"
    for view in views:
        placement, changes = _rewrite(policy, tenant, view, state)
        _place(tenant, view, placement, state)
        state.changes.extend(changes)
        if _gpu_template(view, claims):
            _stamp_template(view, tenant, changes, state, single_template=single_template)
            _packing_scheduler(policy, view, state)
    _queue(policy, tenant, read, state)
    _provenance("/metadata", read.metadata, tenant, state.changes, state)
    return _decided(tenant, state)


def _decided(tenant: Tenant, state: _Mutation) -> Decision:
    audit = {"tenant": tenant.name}
    if state.changes:
        audit["rewritten"] = "; ".join(state.changes)
    if state.kept:
        audit["kept"] = "; ".join(state.kept)
    if state.denials:
        return deny(state.denials, warnings=tuple(state.warnings), audit=audit)
    return Decision(
        allowed=True,
        patch=tuple(state.patch.ops()),
        warnings=tuple(state.warnings),
        audit=audit,
    )


def _update(
    policy: TenantPolicy,
    reading: Reading,
    namespace: str,
    old: Reading | None,
    *,
    creator_trusted: bool,
) -> Decision:
    """What CREATE decided, put back; then, when the update (so restored) asks for GPUs the
    stored object did not, the object decided like a CREATE: a Deployment edited to add GPUs is
    rewritten and queued (or denied) as if created so. A Deployment's template without a
    decision record is decided too: its new ReplicaSets are believed only with one."""
    restored = restore(
        policy,
        reading.obj,
        namespace,
        None if old is None else old.obj,
        creator_trusted=creator_trusted,
        reading=reading,
        old_reading=old,
    )
    if old is None or policy.tenant_of(namespace) is None:
        return restored
    current = _applied(reading.obj, restored.patch)
    now = reading_of(current, policy.gpu_resources, reading)
    old_views = old.views  # read first, as the stored object is the one read first
    redecide = changed_views(now.views, old_views)
    if not redecide and now.kind_id in TEMPLATE_COMPARED:
        redecide = [view for view in now.views if view.gpu_containers and not decision_holds(view)]
    if not redecide:
        return restored
    decided = mutate(policy, current, namespace, creator_trusted=creator_trusted, reading=now)
    audit = {**restored.audit, **decided.audit}
    warnings = restored.warnings + decided.warnings
    if not decided.allowed:
        return deny(decided.denials, warnings=warnings, audit=audit)
    patch = restored.patch + decided.patch
    return Decision(allowed=True, patch=patch, warnings=warnings, audit=audit)


def _applied(obj: Mapping[str, Any], ops: tuple[PatchOp, ...]) -> Mapping[str, Any]:
    if not ops:
        return obj
    patched: dict[str, Any] = jsonpatch.apply_patch(obj, list(ops))
    return patched


def _gpu_workload(views: list[TemplateView], claims: WorkloadClaims) -> bool:
    """GPUs asked as extended resources or through DRA claims."""
    return has_gpus(views) or claims.asks_gpus


def _gpu_template(view: TemplateView, claims: WorkloadClaims) -> bool:
    return bool(view.gpu_containers) or claims.asks_gpus_in(view)


def _rewrite(
    policy: TenantPolicy, tenant: Tenant, view: TemplateView, state: _Mutation
) -> tuple[dict[str, GpuClass], list[str]]:
    """Rewrite `nvidia.com/gpu` per container; return each container's class and the changes."""
    placement: dict[str, GpuClass] = {}
    changes: list[str] = []
    if not view.gpu_containers:
        return placement, changes
    enabled = view.rewrite_enabled
    memory = _memory_hint(view, state)
    for container in view.gpu_containers:
        resources = container.resources
        if len(resources) != 1:
            continue  # two classes in one container: validation denies it
        resource = resources[0]
        count = whole_gpus(container, resource)
        if resource != PLAIN_GPU or not enabled or count is None:
            if left_to_kueue(policy, tenant, resource, view.node_selector):
                continue  # a list's shared resource: the flavor is Kueue's to pick
            found = resolve_class(policy, tenant, resource, view.node_selector)
            if found is not None:
                placement[container.pointer] = found
            continue
        choice = _choose(policy, tenant, view, container, count, memory)
        if choice.warning:
            state.warnings.append(choice.warning)
        if choice.fungible:
            _keep_for_kueue(tenant, view, container, count, choice, state, changes)
            continue
        chosen = choice.gpu_class or resolve_class(policy, tenant, PLAIN_GPU, view.node_selector)
        if chosen is None:
            continue
        placement[container.pointer] = chosen
        if chosen.resource != PLAIN_GPU:
            change = swap_resource(container, count, chosen.resource, state.patch)
            state.moved[container.pointer] = chosen.resource
            changes.append(change)
            state.warnings.append(f"{change} (tenant {tenant.name}, {choice.reason})")
    return placement, changes


def _keep_for_kueue(
    tenant: Tenant,
    view: TemplateView,
    container: GpuContainer,
    count: int,
    choice: _Choice,
    state: _Mutation,
    changes: list[str],
) -> None:
    """A list of classes: the request goes on the resource they share (nvidia.com/gpu stays
    as it is) and no nodeSelector is set; Kueue assigns the first flavor with room, in the
    order of the tenant's ClusterQueue, and puts its nodeLabels on the pods."""
    selector = view.node_selector
    classes = [c for c in choice.fungible if compatible(c, selector)]
    if not classes:
        names = " or ".join(c.name for c in choice.fungible)
        where = f" of {view.name}" if view.name else ""
        state.denials.append(
            Denial(
                "node-selector-conflict",
                f'tenant "{tenant.name}": {container.title} may run on {names}, but the '
                f"nodeSelector{where} ({_selector(selector)}) rules out every one of them; "
                "remove that nodeSelector (Kueue picks the flavor) or pick a class with "
                f"{GPU_CLASS_HINT}",
            )
        )
        return
    resource = classes[0].resource
    if resource != PLAIN_GPU:
        changes.append(swap_resource(container, count, resource, state.patch))
        state.moved[container.pointer] = resource
    names = " or ".join(c.name for c in classes)
    record = f"{container.label}: {resource}={count} on {names} (Kueue picks the flavor)"
    state.kept.append(record)
    state.warnings.append(f"{record} (tenant {tenant.name}, {choice.reason})")


def _selector(selector: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in selector.items())


def _memory_hint(view: TemplateView, state: _Mutation) -> int | None:
    value = view.hints.get(GPU_MEMORY_HINT)
    if value is None:
        return None
    memory = _memory_bytes(value) if isinstance(value, str) else None
    if memory is None:
        where = f" of {view.name}" if view.name else ""
        state.warnings.append(
            f'{GPU_MEMORY_HINT} "{value}"{where} is not a memory size (e.g. 8Gi); ignored'
        )
    return memory


@lru_cache(maxsize=1024)
def _memory_bytes(value: str) -> int | None:
    """Whole bytes of a memory hint (rounded up), None when it is not a positive size."""
    try:
        memory = parse_quantity(value)
    except QuantityError:
        return None
    return math.ceil(memory) if memory > 0 else None


def _choose(
    policy: TenantPolicy,
    tenant: Tenant,
    view: TemplateView,
    container: GpuContainer,
    count: int,
    memory: int | None,
) -> _Choice:
    hint = view.hints.get(GPU_CLASS_HINT)
    if isinstance(hint, str) and hint:
        hinted = policy.classes_by_name.get(hint)
        if hinted is not None and tenant.allows(hint):
            return _Choice(hinted, f"{GPU_CLASS_HINT} hint")
        warning = f'{container.label}: {GPU_CLASS_HINT} "{hint}" is not allowed; not rewritten'
        return _Choice(None, warning=warning)
    priority = view.spec.get("priorityClassName")
    passed_best_fit = False
    for number, rule in enumerate(tenant.rewrite, start=1):
        if not _matches(rule.when, count, memory, view.labels, priority):
            continue
        if rule.fungible:
            classes = tuple(policy.classes_by_name[name] for name in rule.classes)
            return _Choice(None, f"rule {number}", fungible=classes)
        target = rule.classes[0]
        if target != BEST_FIT:
            return _Choice(policy.classes_by_name.get(target), f"rule {number}")
        if memory is None:
            # Nothing to fit: the next rule decides (`quotaguard validate` warns when none).
            passed_best_fit = True
            continue
        fit = _best_fit(policy, tenant, memory)
        if fit is not None:
            return _Choice(fit, f"rule {number}: best-fit for {format_bytes(memory)}")
        warning = (
            f"{container.label}: no MIG class of tenant {tenant.name} has "
            f"{format_bytes(memory)}; kept {PLAIN_GPU}"
        )
        return _Choice(None, warning=warning)
    if passed_best_fit:
        warning = (
            f"{container.label}: best-fit needs {GPU_MEMORY_HINT} and no later rule matched; "
            f"kept {PLAIN_GPU}"
        )
        return _Choice(None, warning=warning)
    return _Choice(None)


def _matches(
    when: RewriteCondition,
    count: int,
    memory: int | None,
    labels: Mapping[str, Any],
    priority: object,
) -> bool:
    if when.gpus is not None and when.gpus != count:
        return False
    if when.memory_at_most is not None and (memory is None or memory > when.memory_at_most):
        return False
    if when.memory_at_least is not None and (memory is None or memory < when.memory_at_least):
        return False
    if when.priority_class_names is not None and priority not in when.priority_class_names:
        return False
    return when.match_labels is None or all(
        labels.get(key) == value for key, value in when.match_labels.items()
    )


def _best_fit(policy: TenantPolicy, tenant: Tenant, memory: int) -> GpuClass | None:
    """The smallest allowed MIG class (by slices, then memory) whose memory covers the hint."""
    fitting = [
        c for c in policy.spec.gpu_classes if c.mig and tenant.allows(c.name) and c.memory >= memory
    ]
    return min(fitting, key=lambda c: (c.slices, c.memory), default=None)


def _place(
    tenant: Tenant, view: TemplateView, placement: dict[str, GpuClass], state: _Mutation
) -> None:
    """Merge each class's nodeSelector into the pod's; a contradiction is a denial. A template
    without a nodeSelector of its own (a TrainJob's) is placed by Kueue's flavor instead."""
    if not view.template.placeable:
        return
    current = view.node_selector
    wanted: dict[str, tuple[str, GpuClass]] = {}
    for gpu_class in {c.name: c for c in placement.values()}.values():
        for key, value in gpu_class.node_selector.items():
            have = current.get(key)
            if have is not None and have != value:
                state.denials.append(_conflict(tenant, view, gpu_class, key, value, f"{have}"))
            elif key in wanted and wanted[key][0] != value:
                other = wanted[key][1]
                state.denials.append(
                    Denial(
                        "node-selector-conflict",
                        f'tenant "{tenant.name}": classes "{other.name}" and "{gpu_class.name}" '
                        f"need different nodes ({key}={wanted[key][0]} vs {key}={value}) in one "
                        "pod; request one class per pod",
                    )
                )
            else:
                wanted[key] = (value, gpu_class)
    for key, (value, _) in wanted.items():
        state.patch.set(f"{view.template.spec_pointer}/nodeSelector", key, value)


def _conflict(
    tenant: Tenant, view: TemplateView, gpu_class: GpuClass, key: str, value: str, have: str
) -> Denial:
    where = f" of {view.name}" if view.name else ""
    return Denial(
        "node-selector-conflict",
        f'tenant "{tenant.name}": class "{gpu_class.name}" runs on nodes with {key}={value}, '
        f"but the nodeSelector{where} sets {key}={have}; remove that nodeSelector key "
        f"(quotaguard places the pod) or pick another class with {GPU_CLASS_HINT}",
    )


def _queue(
    policy: TenantPolicy,
    tenant: Tenant,
    reading: Reading,
    state: _Mutation,
) -> None:
    metadata = reading.metadata
    patch = state.patch
    if policy.spec.backend == "kueue":
        for pointer, where in reading.queue_label_metadata():
            if not as_map(where.get("labels")).get(KUEUE_QUEUE_LABEL):
                patch.set(f"{pointer}/labels", KUEUE_QUEUE_LABEL, tenant.local_queue)
        return
    if not as_map(metadata.get("annotations")).get(VOLCANO_QUEUE_ANNOTATION):
        patch.set("/metadata/annotations", VOLCANO_QUEUE_ANNOTATION, tenant.queue)
    for view in reading.views:
        pointer = view.template.metadata_pointer
        annotations = as_map(view.template.metadata.get("annotations"))
        if pointer != "/metadata" and not annotations.get(VOLCANO_QUEUE_ANNOTATION):
            patch.set(f"{pointer}/annotations", VOLCANO_QUEUE_ANNOTATION, tenant.queue)
        if not view.template.placeable:
            continue
        if view.spec.get("schedulerName") in (None, "", DEFAULT_SCHEDULER):
            patch.set(view.template.spec_pointer, "schedulerName", VOLCANO_SCHEDULER)
    if reading.kind_id == "VolcanoJob":
        spec = as_map(reading.obj.get("spec"))
        if not spec.get("queue"):
            patch.set("/spec", "queue", tenant.queue)
        if spec.get("schedulerName") in (None, "", DEFAULT_SCHEDULER):
            patch.set("/spec", "schedulerName", VOLCANO_SCHEDULER)


def _packing_scheduler(policy: TenantPolicy, view: TemplateView, state: _Mutation) -> None:
    """Under Kueue, the GPU pods go to the scheduler profile that packs them
    (`spec.scheduling.schedulerName`), unless the workload names a scheduler of its own."""
    scheduling = policy.spec.scheduling
    if policy.spec.backend != "kueue" or scheduling is None or not scheduling.scheduler_name:
        return
    if view.template.placeable and view.spec.get("schedulerName") in (None, "", DEFAULT_SCHEDULER):
        state.patch.set(view.template.spec_pointer, "schedulerName", scheduling.scheduler_name)


def _stamp_template(
    view: TemplateView,
    tenant: Tenant,
    changes: list[str],
    state: _Mutation,
    *,
    single_template: bool,
) -> None:
    """The provenance of a GPU template (a Pod's is the object's, written once for it) and the
    record of the GPUs it asks for once rewritten."""
    template = view.template
    if not single_template:
        _provenance(template.metadata_pointer, template.metadata, tenant, changes, state)
    record = gpu_ask(view, state.moved)
    state.patch.set(f"{template.metadata_pointer}/annotations", DECIDED_ANNOTATION, record)


def _provenance(
    metadata_pointer: str,
    metadata: Mapping[str, Any],
    tenant: Tenant,
    changes: list[str],
    state: _Mutation,
) -> None:
    pointer = f"{metadata_pointer}/annotations"
    state.patch.set(pointer, TENANT_ANNOTATION, tenant.name)
    if changes:
        earlier = as_map(metadata.get("annotations")).get(REWRITTEN_ANNOTATION)
        record = "; ".join(changes)
        value = f"{earlier}; {record}" if isinstance(earlier, str) and earlier else record
        state.patch.set(pointer, REWRITTEN_ANNOTATION, value)
