"""The GPU-relevant view of a workload object that mutation and validation both read.

Built on `quotaguard.kube.podspec` (the one walker): per pod template, the containers that name a
GPU resource with their raw values (validation must see values the scheduler would refuse),
the hints, labels and where each lives as a JSON Pointer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from types import MappingProxyType
from typing import Any, NoReturn

from quotaguard.admission.names import (
    DECIDED_ANNOTATION,
    DEFAULT_SCHEDULER,
    REWRITE_HINT,
    TENANT_ANNOTATION,
    VOLCANO_SCHEDULER,
)
from quotaguard.admission.shape import check_kind_object, pointer_where, wrong
from quotaguard.kube.kinds import Kind, kind_of, owned_by_handled_kind
from quotaguard.kube.names import KAI_SHARE_ANNOTATIONS, MIG_PREFIX
from quotaguard.kube.podspec import (
    KNOWN_GPU_RESOURCES,
    TRAINER_CONTAINER,
    PodTemplate,
    is_gpu_resource,
    templates_of_kind,
    ungoverned_gpu_resource,
)
from quotaguard.kube.quantity import QuantityError, parse_gpu_count, parse_quantity

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_CONTAINER_LISTS = ("initContainers", "containers")
# Schedulers that ignore KAI's share annotations: on them the annotations ask for nothing.
_SHARE_BLIND_SCHEDULERS = (DEFAULT_SCHEDULER, VOLCANO_SCHEDULER)


def as_map(value: object) -> Mapping[str, Any]:
    """`value` when it is a map, else an empty one.

    Objects arrive decoded from JSON, so maps are dicts; checking for `dict` rather than the
    `Mapping` ABC is an order of magnitude cheaper, and this runs dozens of times per request.
    """
    return value if isinstance(value, dict) else _EMPTY


# Not frozen: a frozen dataclass pays for object.__setattr__ on every field, per request.
@dataclass(slots=True)
class GpuContainer:
    """A container that names at least one GPU resource in its limits or requests."""

    label: str  # "main", or "workers/main" inside a template with a name
    pointer: str
    resources_pointer: str  # `{pointer}/resources`; a TrainJob's `spec/trainer/resourcesPerNode`
    init: bool
    limits: Mapping[str, Any]  # GPU resources only, values as written
    requests: Mapping[str, Any]
    # GPUs no class counts (HAMi's shares, other vendors' accelerators: see
    # `podspec.ungoverned_gpu_resource`), from limits and requests, values as written
    ungoverned: Mapping[str, Any] = dataclass_field(default_factory=lambda: _EMPTY)
    # A SparkApplication role's `gpu` ({name, quantity}) at `resources_pointer`: the name is
    # what a rewrite changes (see `swap.swap_resource`).
    named: bool = False

    @property
    def resources(self) -> list[str]:
        return list(dict.fromkeys([*self.limits, *self.requests]))

    @property
    def title(self) -> str:
        return f'{"init container" if self.init else "container"} "{self.label}"'


@dataclass(slots=True)
class TemplateView:
    template: PodTemplate
    name: str | None  # the template's name (task, replicated job, leader, worker group, ...)
    gpu_containers: tuple[GpuContainer, ...]
    hints: Mapping[str, Any]  # annotations of the template, over those of the object
    labels: Mapping[str, Any]

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.template.spec

    @property
    def node_selector(self) -> Mapping[str, Any]:
        return as_map(self.template.spec.get("nodeSelector"))

    @property
    def scheduler_shares(self) -> dict[str, Any]:
        """KAI scheduler's GPU-share annotations of the pod template (`gpu-fraction`, ...),
        when a scheduler other than the default or Volcano's would read them."""
        annotations = self.template.metadata.get("annotations")
        if not isinstance(annotations, dict) or not annotations or not self.template.placeable:
            return {}
        found = {k: annotations[k] for k in KAI_SHARE_ANNOTATIONS if k in annotations}
        if found and self.spec.get("schedulerName") in (None, "", *_SHARE_BLIND_SCHEDULERS):
            return {}
        return found

    @property
    def rewrite_enabled(self) -> bool:
        """False when the workload says `quotaguard.dev/rewrite: "false"`."""
        hint = self.hints.get(REWRITE_HINT)
        return not (hint is False or (isinstance(hint, str) and hint.strip().lower() == "false"))


def template_views(
    obj: Mapping[str, Any], gpu_resources: frozenset[str], root: str = "request.object"
) -> list[TemplateView]:
    """One view per pod template of an object of a handled kind (none for other kinds).

    A field the API server could not have decoded raises `ShapeError`, naming it under `root`
    (`request.object` or `request.oldObject`)."""
    return kind_views(obj, kind_of(obj), gpu_resources, root)


def kind_views(
    obj: Mapping[str, Any], kind: Kind | None, gpu_resources: frozenset[str], root: str
) -> list[TemplateView]:
    """`template_views` of an object whose kind is known (`kind_of(obj)`): see `reading`."""
    check_kind_object(obj, kind, root)
    templates = templates_of_kind(obj, kind)
    if not templates:
        return []
    object_annotations = as_map(as_map(obj.get("metadata")).get("annotations"))
    views = []
    for template in templates:
        name = template.name
        annotations = as_map(template.metadata.get("annotations"))
        hints = (
            annotations
            if template.metadata_pointer == "/metadata" or not object_annotations
            else {**object_annotations, **annotations}
        )
        views.append(
            TemplateView(
                template=template,
                name=name,
                gpu_containers=tuple(
                    _gpu_containers(template, name, gpu_resources, root)
                    if template.resources_pointer is None
                    else _trainer_container(
                        template, template.resources_pointer, gpu_resources, root
                    )
                ),
                hints=hints,
                labels=as_map(template.metadata.get("labels")),
            )
        )
    return views


def _gpu_containers(
    template: PodTemplate, template_name: str | None, gpu_resources: frozenset[str], root: str
) -> list[GpuContainer]:
    # The container lists are walked here rather than with podspec.containers, which skips
    # entries of the wrong type: admission must refuse them (see shape). It also runs for every
    # request, so pointers and labels are built for the GPU containers only.
    found = []
    spec = template.spec
    for field in _CONTAINER_LISTS:
        entries = spec.get(field)
        if entries is None:
            continue
        if not isinstance(entries, list):
            wrong(pointer_where(root, template.spec_pointer, field), "a list", entries)
        for index, container in enumerate(entries):
            if not isinstance(container, dict):
                if container is not None:
                    _odd(root, template, field, index, "a map", container)
                continue
            gpu = _gpu_container(
                container, template, template_name, gpu_resources, (root, field, index)
            )
            if gpu is not None:
                found.append(gpu)
    return found


def _gpu_container(
    container: Mapping[str, Any],
    template: PodTemplate,
    template_name: str | None,
    gpu_resources: frozenset[str],
    at: tuple[str, str, int],
) -> GpuContainer | None:
    """The container at `at` (root, container list, index), when it asks for a GPU resource."""
    root, field, index = at
    resources = container.get("resources")
    if not isinstance(resources, dict):
        if resources is not None:
            _odd(root, template, field, index, "a map", resources, "resources")
        return None
    limits = _gpu_entries(resources.get("limits"), gpu_resources)
    requests = _gpu_entries(resources.get("requests"), gpu_resources)
    if limits is None or requests is None:
        section = "limits" if limits is None else "requests"
        _odd(root, template, field, index, "a map", resources[section], "resources", section)
    ungoverned = _ungoverned(resources, gpu_resources)
    if not limits and not requests and not ungoverned:
        return None
    name = container.get("name")
    if not isinstance(name, str):
        if name is not None:
            _odd(root, template, field, index, "a string", name, "name")
        name = "?"
    where = template.container_pointer(field, index)
    named = where == template.named_gpu_pointer
    return GpuContainer(
        label=f"{template_name}/{name}" if template_name else name,
        pointer=where,
        resources_pointer=where if named else f"{where}/resources",
        named=named,
        init=field == "initContainers",
        limits=limits,
        requests=requests,
        ungoverned=ungoverned,
    )


def _trainer_container(
    template: PodTemplate, pointer: str, gpu_resources: frozenset[str], root: str
) -> list[GpuContainer]:
    """A TrainJob's `resourcesPerNode`: the one container of each trainer node."""
    resources = template.spec["containers"][0]["resources"]
    if not isinstance(resources, dict):
        wrong(pointer_where(root, pointer), "a map", resources)
    limits = _gpu_entries(resources.get("limits"), gpu_resources)
    requests = _gpu_entries(resources.get("requests"), gpu_resources)
    if limits is None or requests is None:
        section = "limits" if limits is None else "requests"
        wrong(pointer_where(root, pointer, section), "a map", resources[section])
    ungoverned = _ungoverned(resources, gpu_resources)
    if not limits and not requests and not ungoverned:
        return []
    return [GpuContainer(TRAINER_CONTAINER, pointer, pointer, False, limits, requests, ungoverned)]


def _odd(
    root: str,
    template: PodTemplate,
    field: str,
    index: int,
    expected: str,
    value: object,
    *below: str,
) -> NoReturn:
    """Raise `ShapeError` for the container at `field[index]` of `template`, or a field below."""
    wrong(pointer_where(root, template.container_pointer(field, index), *below), expected, value)


def _zero(value: object) -> bool:
    """`0`, `"0"` (or any quantity that is zero): Kubernetes accepts it and charts set it, and
    it asks for no GPU."""
    if type(value) is int:
        return value == 0
    if type(value) is not str:
        return False
    if value.isdigit():
        return not value.strip("0")
    try:
        return parse_quantity(value) == 0
    except QuantityError:
        return False


def _gpu_entries(section: object, gpu_resources: frozenset[str]) -> Mapping[str, Any] | None:
    """The GPU resources of `limits` or `requests` that ask for some (an amount of zero is no
    GPU); None when the section is not a map."""
    if not isinstance(section, dict) or not section:
        return _EMPTY if section is None or isinstance(section, dict) else None
    found: dict[str, Any] | None = None
    for name, value in section.items():
        # is_gpu_resource, inlined: this runs for every resource of every container.
        if (
            name in gpu_resources
            or name in KNOWN_GPU_RESOURCES
            or (
                isinstance(name, str)
                and name.startswith(MIG_PREFIX)
                and is_gpu_resource(name, gpu_resources)
            )
        ) and not _zero(value):
            if found is None:
                found = {}
            found[name] = value
    return found or _EMPTY


def _ungoverned(resources: Mapping[str, Any], gpu_resources: frozenset[str]) -> Mapping[str, Any]:
    """The GPUs of `limits` and `requests` no class counts (see `GpuContainer.ungoverned`);
    the sections are known to be maps or absent. Names without a `/` (cpu, memory) are never
    extended resources, so most containers cost a string search per resource."""
    found: dict[str, Any] | None = None
    for section in ("requests", "limits"):
        for name, value in as_map(resources.get(section)).items():
            if (
                isinstance(name, str)
                and "/" in name
                and ungoverned_gpu_resource(name, gpu_resources)
                and not _zero(value)
            ):
                if found is None:
                    found = {}
                found[name] = value
    return found or _EMPTY


def has_gpus(views: list[TemplateView]) -> bool:
    """Some template asks for a GPU: a GPU resource (counted or not), or a GPU share by
    annotation (`TemplateView.scheduler_shares`)."""
    return any(view.gpu_containers or view.scheduler_shares for view in views)


def gpu_ask(view: TemplateView, moved: Mapping[str, str] = _EMPTY) -> str:
    """The GPU requests of a template, as the decision record holds them:
    `main=nvidia.com/mig-3g.40gb:2,setup=nvidia.com/gpu:1`, sorted. Containers by name (an
    injected container does not shift them), amounts as whole numbers (a custom resource's `8`
    and the `"8"` its controller copies into a Job are one ask; any other value is `?`, which
    validation refuses anyway), limits before requests (a Pod's requests are defaulted from its
    limits). `moved`: container pointer -> the resource
    mutation moves its one GPU request to."""
    entries = []
    for container in view.gpu_containers:
        name = container.label.rpartition("/")[2]
        for resource in container.resources:
            value = container.limits.get(resource, container.requests.get(resource))
            count = parse_gpu_count(value)
            amount = str(count) if count is not None else "?"  # refused by validation
            entries.append(f"{name}={moved.get(container.pointer, resource)}:{amount}")
    return ",".join(sorted(entries))


def template_key(view: TemplateView) -> str:
    """A template's identity across an update: its task or replicated job name (custom
    resources' lists may come back reordered), else where it is."""
    return view.name or view.template.spec_pointer


def changed_views(views: list[TemplateView], old_views: list[TemplateView]) -> list[TemplateView]:
    """The templates of an object that ask for GPUs other than those of the same template of
    the stored object (a template that asked for none, or was not there, included)."""
    old_asks = {template_key(view): gpu_ask(view) for view in old_views}
    return [
        view
        for view in views
        if view.gpu_containers and old_asks.get(template_key(view)) != gpu_ask(view)
    ]


def decision_holds(view: TemplateView) -> bool:
    """The template carries a decision record for exactly the GPUs it asks for."""
    annotations = as_map(view.template.metadata.get("annotations"))
    return annotations.get(DECIDED_ANNOTATION) == gpu_ask(view)


def owned_by_workload(
    obj: Mapping[str, Any], views: list[TemplateView], *, creator_trusted: bool
) -> bool:
    """Made by an object of a handled kind from a template admission decided there: created by
    the controller of its owner's kind (`creator_trusted`, see `quotaguard.admission.owners`),
    owned by an object of a handled kind (see `quotaguard.kube.kinds.OWNER_KINDS`), carrying
    the tenant stamp, and every GPU template carrying the decision record of what it asks for
    now (`decision_holds`). Such an object is not decided again (mutation and restore leave it
    alone; validation still judges it). One made from a template admission never saw (created
    before quotaguard handled its owner's kind, or while the webhook was not reachable), whose
    stamp was written by hand (no record) or left from before its GPUs changed (another record),
    or whose owner reference and stamp anyone could have written, is decided like any other.

    The one owner check of admission."""
    if not creator_trusted or not owned_by_handled_kind(obj):
        return False
    stamped = as_map(as_map(obj.get("metadata")).get("annotations")).get(TENANT_ANNOTATION) or any(
        as_map(view.template.metadata.get("annotations")).get(TENANT_ANNOTATION)
        for view in views
        if view.gpu_containers
    )
    return bool(stamped) and all(decision_holds(view) for view in views if view.gpu_containers)
