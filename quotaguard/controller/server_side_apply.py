"""Server-side apply of a queue's owned fields, and what to do when another manager owns one.

quotaguard applies (field manager `quotaguard`) only the fields it sets; the API server records
it as their owner in `metadata.managedFields`, so other managers' fields stay theirs and Argo CD
or Flux can tell whose a field is. An apply that would change a field another manager owns is
refused with a 409 naming each conflicting field and manager. What then (pure):

- the manager has server-side applied this queue itself (`operation: Apply`: Argo CD or Flux
  with server-side apply, `kubectl apply --server-side`, Helm 4): its fields are a declared
  intent and are never taken over, unless `rebalance.forceConflicts` says so; the write is
  reported as a conflict (Event, metric, log, the report row);
- the manager only ever wrote with plain updates (`kubectl create`, client-side `kubectl
  apply`, `kubectl edit`, quotaguard's own create): no intent is declared; its fields are taken
  over (a forced apply), as Kubernetes asks of controllers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

JsonObject = dict[str, Any]
FIELD_MANAGER = "quotaguard"
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
_CONFLICT_MESSAGE = re.compile(r'conflict with "(?P<manager>[^"]+)"')


@dataclass(frozen=True, order=True)
class FieldConflict:
    """One field of the queue another manager owns, as the API server named them."""

    field: str
    manager: str

    def __str__(self) -> str:
        return f"{self.field} (owned by {self.manager})"


def apply_body(
    *, api_version: str, kind: str, name: str, resource_version: str | None, spec: JsonObject
) -> JsonObject:
    """The apply configuration: only the owned `spec` fields, and the resourceVersion the spec
    was built from (a precondition: a list copied from the queue, such as Kueue's atomic
    resourceGroups, must not overwrite a change made since it was read)."""
    metadata: JsonObject = {"name": name}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def field_conflicts(error_body: object) -> tuple[FieldConflict, ...]:
    """The field-manager conflicts of a 409 Status (none: the 409 is a resourceVersion one)."""
    status = _status(error_body)
    causes = (status.get("details") or {}).get("causes") or ()
    found = []
    for cause in causes:
        if not isinstance(cause, dict) or cause.get("reason") != "FieldManagerConflict":
            continue
        match = _CONFLICT_MESSAGE.search(str(cause.get("message", "")))
        manager = match.group("manager") if match else "unknown"
        found.append(FieldConflict(str(cause.get("field", "")), manager))
    return tuple(sorted(set(found)))  # the server lists them in no fixed order


def _status(error_body: object) -> Mapping[str, Any]:
    if isinstance(error_body, bytes):
        error_body = error_body.decode("utf-8", "replace")
    if isinstance(error_body, str):
        try:
            error_body = json.loads(error_body)
        except ValueError:
            return {}
    return error_body if isinstance(error_body, Mapping) else {}


def appliers(managed_fields: object, *, ours: str = FIELD_MANAGER) -> frozenset[str]:
    """The managers other than us that have server-side applied the object."""
    entries = managed_fields if isinstance(managed_fields, list) else ()
    return frozenset(
        str(entry.get("manager"))
        for entry in entries
        if isinstance(entry, dict)
        and entry.get("operation") == "Apply"
        and entry.get("manager") != ours
    )


def may_force(
    conflicts: Iterable[FieldConflict], managed_fields: object, *, force_conflicts: bool
) -> bool:
    """Whether to apply again with force: always when the policy says so, else only when no
    conflicting manager has declared its fields by applying them."""
    if force_conflicts:
        return True
    declared = appliers(managed_fields)
    return not any(conflict.manager in declared for conflict in conflicts)


def conflict_detail(conflicts: Iterable[FieldConflict], managed_fields: object) -> str:
    """What a conflict Event, log line and outcome say: every conflicting field, its owners,
    and which of them applied it (why it was not taken over)."""
    conflicts = tuple(conflicts)
    declared = sorted({c.manager for c in conflicts} & appliers(managed_fields))
    fields = "; ".join(str(conflict) for conflict in conflicts)
    return (
        f"not written: {fields}; applied by {', '.join(declared) or 'another manager'}"
        " (rebalance.forceConflicts: true takes them over)"
    )
