"""What the manifest asked for, before mutation rewrote it: for denials worded in the user's terms.

Validation judges the final object, in which `nvidia.com/gpu: 8` may already be
`nvidia.com/mig-3g.40gb: 8`. The user wrote the former; a denial that quotes only the latter
names a resource they never typed. Mutation records each rewrite in the
`quotaguard.dev/rewritten` annotation (`main: nvidia.com/gpu=8 -> nvidia.com/mig-3g.40gb=8`),
which the pods of a rewritten template inherit; this reads it back. A record that does not
match what the container now asks for (edited by hand, stale) is ignored: the wording then
falls back to the final object, which is never wrong, only less familiar.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from quotaguard.admission.names import REWRITTEN_ANNOTATION
from quotaguard.admission.workload import GpuContainer, TemplateView
from quotaguard.kube.quantity import parse_gpu_count

_RECORD = re.compile(r"^(?P<label>.+): (?P<old>\S+)=(?P<count>\d+) -> (?P<new>\S+)=(?P=count)$")


class Asked(NamedTuple):
    """`resource: count` as the manifest wrote it, and the resource it became (None when not
    rewritten)."""

    resource: str
    amount: int
    became: str | None = None

    def __str__(self) -> str:
        return f"{self.resource}: {self.amount}"


Rewrite = tuple[str, int, str]  # (resource asked, count, resource it became)


def rewrites(hints: Mapping[str, Any]) -> dict[str, Rewrite]:
    """Container label -> what it asked for and became, from the provenance record."""
    record = hints.get(REWRITTEN_ANNOTATION)
    if not isinstance(record, str) or not record:
        return {}
    found: dict[str, Rewrite] = {}
    for entry in record.split("; "):
        match = _RECORD.match(entry)
        if match is not None:
            found[match["label"]] = (match["old"], int(match["count"]), match["new"])
    return found


def asked_for(
    view: TemplateView, container: GpuContainer, resource: str, found: dict[str, Rewrite]
) -> Asked | None:
    """What `container` asked for where it now has `resource` (None for an amount that is not
    a whole number: the value rules word those)."""
    count = parse_gpu_count(container.limits.get(resource))
    if not count:
        return None
    record = found.get(container.label)
    if record is None and view.name is None:
        # A pod of a named template (a JobSet's `workers`) knows its containers by name alone.
        suffix = "/" + container.label
        named = [r for label, r in found.items() if label.endswith(suffix)]
        record = named[0] if len(named) == 1 else None
    if record is not None and record[1:] == (count, resource):
        return Asked(record[0], count, resource)
    return Asked(resource, count)
