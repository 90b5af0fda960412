"""An object as admission reads it, once per request.

Its kind is looked up once, and its pod templates with their GPU containers are checked
(`shape`) and resolved (`workload.TemplateView`) on first use, then kept: mutation, validation,
restoration and the provenance checks of one request take the same `Reading` instead of each
walking the object again. Lazily, because an object of an exempt namespace or of no tenant is
never walked at all (nor refused for a field of the wrong type: the API server decoded it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quotaguard.admission.workload import TemplateView, as_map, kind_views
from quotaguard.kube.kinds import Kind, kind_of


class Reading:
    """`obj` (`root` names it in errors: `request.object` or `request.oldObject`), its kind
    and, once asked for, its template views for the policy's `gpu_resources`."""

    __slots__ = ("_gpu_resources", "_views", "kind", "obj", "root")

    def __init__(
        self, obj: Mapping[str, Any], gpu_resources: frozenset[str], root: str = "request.object"
    ) -> None:
        self.obj = obj
        self.kind: Kind | None = kind_of(obj)
        self.root = root
        self._gpu_resources = gpu_resources
        self._views: list[TemplateView] | None = None

    @property
    def kind_id(self) -> str | None:
        """`Pod`, `Job`, `VolcanoJob`, ...; None for kinds admission does not handle."""
        return self.kind.id if self.kind is not None else None

    @property
    def views(self) -> list[TemplateView]:
        """One view per pod template; a field of the wrong type raises `ShapeError`."""
        if self._views is None:
            self._views = kind_views(self.obj, self.kind, self._gpu_resources, self.root)
        return self._views

    @property
    def metadata(self) -> Mapping[str, Any]:
        return as_map(self.obj.get("metadata"))

    def queue_label_metadata(self) -> list[tuple[str, Mapping[str, Any]]]:
        """(JSON Pointer, metadata) of every place the Kueue queue label goes (none for kinds
        admission does not handle)."""
        return self.kind.queue_label_metadata(self.obj) if self.kind is not None else []


def reading_of(
    obj: Mapping[str, Any],
    gpu_resources: frozenset[str],
    given: Reading | None,
    root: str = "request.object",
) -> Reading:
    """`given` when it reads `obj`, else a new reading of it (for callers that have none)."""
    if given is not None and given.obj is obj:
        return given
    return Reading(obj, gpu_resources, root)
