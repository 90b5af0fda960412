"""Mutation on UPDATE: put back what CREATE decided when an update undoes it.

`kubectl apply` of an unchanged manifest merges it into the stored object. For Pods and Jobs
(strategic merge, client- or server-side) that adds `nvidia.com/gpu: N` back next to the class
CREATE chose; for JobSets and Volcano Jobs (custom resources, whose lists are replaced whole)
a template comes back as written: plain `nvidia.com/gpu`, without the stamps CREATE added. The
API server runs mutating admission before it checks that a running Job's template or a Pod's
spec did not change, so putting CREATE's class back here makes re-applying a no-op instead of a
"field is immutable" error, and keeps a suspended Job's template (what Kueue accounts) on its
class.

Nothing is decided anew. The class is the one the old object holds, so a policy changed since
CREATE does not move a workload to another class mid-life; a container the old object kept on
a whole GPU stays as it is. The classes' nodeSelector keys and the queue and provenance stamps
are put back only where the old object had them and the update dropped them, never changed
(Kueue lets a suspended Job move queues; validation judges that). Nothing is denied: Kueue's
unsuspend and controllers' label updates come through here, and a denial would block them
whatever the failurePolicy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quotaguard.admission.classes import resolve_class
from quotaguard.admission.decision import ALLOWED, Decision
from quotaguard.admission.names import (
    DECIDED_ANNOTATION,
    DEFAULT_SCHEDULER,
    KUEUE_QUEUE_LABEL,
    REWRITTEN_ANNOTATION,
    TENANT_ANNOTATION,
    VOLCANO_QUEUE_ANNOTATION,
    VOLCANO_SCHEDULER,
)
from quotaguard.admission.patch import PatchBuilder
from quotaguard.admission.reading import Reading, reading_of
from quotaguard.admission.swap import swap_resource, whole_gpus
from quotaguard.admission.workload import (
    GpuContainer,
    TemplateView,
    as_map,
    has_gpus,
    owned_by_workload,
)
from quotaguard.kube.podspec import PLAIN_GPU
from quotaguard.policy.model import Tenant, TenantPolicy

# What CREATE writes into metadata, by where it writes it.
_OBJECT_LABELS = (KUEUE_QUEUE_LABEL,)
_STAMPED_ANNOTATIONS = (
    TENANT_ANNOTATION,
    REWRITTEN_ANNOTATION,
    DECIDED_ANNOTATION,
    VOLCANO_QUEUE_ANNOTATION,
)
_UNSET_SCHEDULERS = (None, "", DEFAULT_SCHEDULER)


def restore(
    policy: TenantPolicy,
    obj: Mapping[str, Any],
    namespace: str,
    old_object: Mapping[str, Any] | None,
    *,
    creator_trusted: bool = False,
    reading: Reading | None = None,
    old_reading: Reading | None = None,
) -> Decision:
    """The patch that puts CREATE's classes and stamps back into an updated object (none for
    an object the update left as CREATE made it). `old_object` is the stored object; without
    it (an offline review) a class already next to `nvidia.com/gpu` is the one kept.
    `reading`, `old_reading`: the engine's readings of the two."""
    tenant = policy.tenant_of(namespace)
    if tenant is None:
        return ALLOWED
    read = reading_of(obj, policy.gpu_resources, reading)
    views = read.views
    # A pod of a Job keeps what its template had; its spec cannot change anyway.
    if not has_gpus(views) or owned_by_workload(obj, views, creator_trusted=creator_trusted):
        return ALLOWED
    old_views: dict[str, TemplateView] = {}
    if old_object is not None:
        found = reading_of(old_object, policy.gpu_resources, old_reading, "request.oldObject").views
        old_views = {_template_key(view): view for view in found}
    patch = PatchBuilder(obj)
    changes: list[str] = []
    for view in views:
        old_view = old_views.get(_template_key(view))
        changes += _restore_classes(view, old_view, patch)
        if old_view is not None:
            _restore_placement(policy, tenant, view, old_view, patch)
            _restore_template_stamps(view, old_view, patch, _stamped_schedulers(policy))
    if old_object is not None:
        _restore_object_stamps(read, old_object, patch)
    return _restored(tenant, patch, changes)


def _restore_classes(
    view: TemplateView, old_view: TemplateView | None, patch: PatchBuilder
) -> list[str]:
    """`nvidia.com/gpu` put back into the class each container was created with."""
    old_containers = {(c.init, c.label): c for c in old_view.gpu_containers} if old_view else {}
    changes = []
    for container in view.gpu_containers:
        old_container = old_containers.get((container.init, container.label))
        kept = _kept_class(container, old_container)
        count = whole_gpus(container, PLAIN_GPU) if kept else None
        if kept and count:
            changes.append(swap_resource(container, count, kept, patch))
    return changes


def _restored(tenant: Tenant, patch: PatchBuilder, changes: list[str]) -> Decision:
    audit = {"tenant": tenant.name}
    if changes:
        audit["restored"] = "; ".join(changes)
    warnings = tuple(
        f"{change} (tenant {tenant.name}: the class it was created with)" for change in changes
    )
    return Decision(allowed=True, patch=tuple(patch.ops()), warnings=warnings, audit=audit)


def _template_key(view: TemplateView) -> str:
    """A template's identity across an update: its task or replicated job name (custom
    resources' lists may come back reordered), else where it is."""
    return view.name or view.template.spec_pointer


def _kept_class(container: GpuContainer, old: GpuContainer | None) -> str | None:
    """The class to put `nvidia.com/gpu` back into, or None to leave the container alone."""
    resources = container.resources
    if PLAIN_GPU not in resources:
        return None
    if old is not None:
        if PLAIN_GPU in old.resources:
            return None  # CREATE kept the whole GPU (or never saw it): not decided here
        classes = old.resources
    else:
        classes = [resource for resource in resources if resource != PLAIN_GPU]
    if len(classes) != 1 or not set(resources) <= {PLAIN_GPU, classes[0]}:
        return None  # two classes: nothing CREATE would have made
    return classes[0]


def _restore_placement(
    policy: TenantPolicy,
    tenant: Tenant,
    view: TemplateView,
    old_view: TemplateView,
    patch: PatchBuilder,
) -> None:
    """The nodeSelector keys of the old template's classes that the update dropped (a custom
    resource's template replaced by the manifest's); a key the update sets is left as it is."""
    if not view.template.placeable:
        return
    old_selector = old_view.node_selector
    selector = view.node_selector
    for container in old_view.gpu_containers:
        for resource in container.resources:
            gpu_class = resolve_class(policy, tenant, resource, old_selector)
            for key, value in gpu_class.node_selector.items() if gpu_class else ():
                if old_selector.get(key) == value and key not in selector:
                    patch.set(f"{view.template.spec_pointer}/nodeSelector", key, value)


def _stamped_schedulers(policy: TenantPolicy) -> tuple[str, ...]:
    """The schedulers CREATE sets on pod templates: Volcano's, and the packing profile."""
    scheduling = policy.spec.scheduling
    packing = scheduling.scheduler_name if scheduling is not None else None
    return (VOLCANO_SCHEDULER, packing) if packing else (VOLCANO_SCHEDULER,)


def _restore_template_stamps(
    view: TemplateView,
    old_view: TemplateView,
    patch: PatchBuilder,
    schedulers: tuple[str, ...],
) -> None:
    template = view.template
    if template.metadata_pointer != "/metadata":  # a Pod's metadata is the object's
        _restore_keys(
            f"{template.metadata_pointer}/annotations",
            as_map(template.metadata.get("annotations")),
            as_map(old_view.template.metadata.get("annotations")),
            _STAMPED_ANNOTATIONS,
            patch,
        )
    if template.placeable:
        _restore_scheduler(template.spec_pointer, view.spec, old_view.spec, patch, schedulers)


def _restore_object_stamps(
    reading: Reading, old_object: Mapping[str, Any], patch: PatchBuilder
) -> None:
    obj, kind = reading.obj, reading.kind
    metadata = reading.metadata
    old_metadata = as_map(old_object.get("metadata"))
    _restore_keys(
        "/metadata/annotations",
        as_map(metadata.get("annotations")),
        as_map(old_metadata.get("annotations")),
        _STAMPED_ANNOTATIONS,
        patch,
    )
    places = reading.queue_label_metadata()
    old_places = dict(kind.queue_label_metadata(old_object)) if kind else {}
    for pointer, where in places:
        _restore_keys(
            f"{pointer}/labels",
            as_map(where.get("labels")),
            as_map(old_places.get(pointer, {}).get("labels")),
            _OBJECT_LABELS,
            patch,
        )
    if reading.kind_id == "VolcanoJob":
        spec, old_spec = as_map(obj.get("spec")), as_map(old_object.get("spec"))
        _restore_keys("/spec", spec, old_spec, ("queue",), patch)
        _restore_scheduler("/spec", spec, old_spec, patch)


def _restore_keys(
    pointer: str,
    values: Mapping[str, Any],
    old_values: Mapping[str, Any],
    keys: tuple[str, ...],
    patch: PatchBuilder,
) -> None:
    for key in keys:
        old = old_values.get(key)
        if isinstance(old, str) and old and not values.get(key):
            patch.set(pointer, key, old)


def _restore_scheduler(
    pointer: str,
    spec: Mapping[str, Any],
    old_spec: Mapping[str, Any],
    patch: PatchBuilder,
    schedulers: tuple[str, ...] = (VOLCANO_SCHEDULER,),
) -> None:
    """The scheduler CREATE set, where the update fell back to the default."""
    unset = spec.get("schedulerName") in _UNSET_SCHEDULERS
    old = old_spec.get("schedulerName")
    if unset and isinstance(old, str) and old in schedulers:
        patch.set(pointer, "schedulerName", old)
