"""Writing one queue: build the spec in memory from the cached queue, server-side apply the
fields we own.

The apply (field manager `quotaguard`, see `controller.apply`) carries only what quotaguard
sets, so other managers' fields stay as they are and stay theirs; it also names the
resourceVersion it was built from, because Kueue's resourceGroups list is atomic and is
rebuilt from what was read: a change made in between is never overwritten. The first attempt
is built from the watch cache's copy of the queue (no read at all); a 409 means the copy was
older than the queue, or another manager owns a field: the queue is read again, the spec
rebuilt and the apply retried, a bounded number of times. A field another manager applied is
not taken over (unless `rebalance.forceConflicts`): the write ends as a conflict naming fields
and managers, decided on a fresh read (the cache keeps no managedFields). A spec that comes out
equal to what is there is not written at all, so repeated intervals do not cause write storms.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from quotaguard.controller.server_side_apply import (
    APPLY_CONTENT_TYPE,
    FIELD_MANAGER,
    FieldConflict,
    apply_body,
    conflict_detail,
    field_conflicts,
    may_force,
)
from quotaguard.kube.client import status_code
from quotaguard.kube.values import utc_timestamp

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]


class WriteResult(StrEnum):
    """How one queue write ended (the `result` label of quotaguard_queue_writes)."""

    UPDATED = "updated"
    CREATED = "created"
    UNCHANGED = "unchanged"
    MISSING = "missing"
    CONFLICT = "conflict"
    ERROR = "error"
    NOT_LEADER = "not_leader"

    @property
    def wrote(self) -> bool:
        return self in (WriteResult.UPDATED, WriteResult.CREATED)

    @property
    def failed(self) -> bool:
        """The queue may not hold what the plan wants: raising others now could overcommit."""
        return self in (WriteResult.CONFLICT, WriteResult.ERROR, WriteResult.NOT_LEADER)


WRITE_RESULTS = tuple(result.value for result in WriteResult)
EVENT_NAMESPACE = "default"  # where Events about cluster-scoped objects go
COMPONENT = "quotaguard-controller"


@dataclass(frozen=True)
class QueueApi:
    """Where one kind of cluster-scoped queue lives in the API."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


@dataclass(frozen=True)
class WriteOutcome:
    queue: str
    result: WriteResult
    changes: tuple[str, ...] = ()
    written: JsonObject | None = None
    detail: str | None = None
    attempts: int = 0
    conflicts: tuple[FieldConflict, ...] = ()  # fields another manager applied (not written)
    seen: JsonObject | None = None  # the queue as read, for an Event about a conflict


@dataclass(frozen=True)
class SpecRules:
    """How to turn a queue's spec into the one we want, and how to compare and describe it."""

    build: Callable[[Mapping[str, Any]], JsonObject]
    same: Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
    describe: Callable[[Mapping[str, Any], Mapping[str, Any]], list[str]]
    # the part of a built spec quotaguard owns: what it applies
    owned: Callable[[Mapping[str, Any]], JsonObject]


def _json(response: Any) -> JsonObject:
    if isinstance(response, dict):
        return response
    body: JsonObject = json.loads(response.data)
    return body


@dataclass
class QueueWriter:
    """Blocking writes through CustomObjectsApi; call it from a worker thread."""

    custom_api: Any
    queue_api: QueueApi
    may_write: Callable[[], bool] = lambda: True
    max_attempts: int = 5
    request_timeout: float = 10.0
    force_conflicts: bool = False  # rebalance.forceConflicts
    field_manager: str = FIELD_MANAGER

    def get(self, name: str) -> JsonObject | None:
        try:
            response = self._call(self.custom_api.get_cluster_custom_object, name)
        except Exception as exc:
            if status_code(exc) == 404:
                return None
            raise
        return _json(response)

    def _call(self, call: Callable[..., Any], *args: Any) -> Any:
        """One CustomObjectsApi call on this kind of queue, answered as raw JSON."""
        api = self.queue_api
        return call(
            api.group,
            api.version,
            api.plural,
            *args,
            _preload_content=False,
            _request_timeout=self.request_timeout,
        )

    def write(
        self,
        name: str,
        rules: SpecRules,
        *,
        template: Mapping[str, Any] | None = None,
        cached: Mapping[str, Any] | None = None,
    ) -> WriteOutcome:
        """Bring queue `name` to what `rules.build` asks for. `cached`: the queue as the watch
        cache holds it, to build the first attempt from instead of reading it. A missing queue
        is created from `rules.build(template)` when a template is given, else reported as
        missing."""
        attempt = 0
        known = dict(cached) if cached is not None else None
        try:
            while attempt < self.max_attempts:
                attempt += 1
                if not self.may_write():
                    return WriteOutcome(name, WriteResult.NOT_LEADER, attempts=attempt)
                fresh = known is None
                current = self.get(name) if known is None else known
                known = None  # any attempt after this one reads the queue again
                if current is None:
                    if template is None:
                        return WriteOutcome(name, WriteResult.MISSING, attempts=attempt)
                    return self._create(name, rules, template, attempt)
                spec = current.get("spec") or {}
                desired = rules.build(spec)
                if rules.same(spec, desired):
                    return WriteOutcome(name, WriteResult.UNCHANGED, attempts=attempt)
                outcome = self._apply(name, current, rules, desired, attempt, fresh=fresh)
                if outcome is not None:
                    return outcome
                log.info("queue %s changed while we wrote it; reading it again", name)
            return WriteOutcome(
                name,
                WriteResult.CONFLICT,
                attempts=attempt,
                detail=f"still changing under us after {attempt} attempts",
            )
        except Exception as exc:
            return WriteOutcome(
                name, WriteResult.ERROR, detail=f"{type(exc).__name__}: {exc}", attempts=attempt
            )

    def _apply(
        self,
        name: str,
        current: JsonObject,
        rules: SpecRules,
        desired: JsonObject,
        attempt: int,
        *,
        fresh: bool = True,
    ) -> WriteOutcome | None:
        """Apply the owned part of `desired`; None: read the queue again and rebuild (it
        changed since `current` was read, or `current` is a cached copy, not `fresh`, and
        another manager owns a field: whether to take it over is decided on its managedFields,
        which only a read gives)."""
        metadata = current.get("metadata") or {}
        body = apply_body(
            api_version=str(current.get("apiVersion") or self.queue_api.api_version),
            kind=str(current.get("kind") or self.queue_api.kind),
            name=name,
            resource_version=metadata.get("resourceVersion"),
            spec=rules.owned(desired),
        )
        force = self.force_conflicts
        while True:
            if not self.may_write():
                return WriteOutcome(name, WriteResult.NOT_LEADER, attempts=attempt)
            try:
                response = self._send_apply(name, body, force=force)
            except Exception as exc:
                if status_code(exc) != 409:
                    raise
                conflicts = field_conflicts(getattr(exc, "body", None))
                if not conflicts or not fresh:
                    log.debug("apply of %s: 409 %s", name, getattr(exc, "body", None))
                    return None  # resourceVersion, or owners unknown: read again, rebuild
                if force or not may_force(
                    conflicts, metadata.get("managedFields"), force_conflicts=False
                ):
                    return WriteOutcome(
                        name,
                        WriteResult.CONFLICT,
                        attempts=attempt,
                        detail=conflict_detail(conflicts, metadata.get("managedFields")),
                        conflicts=conflicts,
                        seen=current,
                    )
                force = True  # fields of plain writers only: take them over
                continue
            changes = tuple(rules.describe(current.get("spec") or {}, desired))
            return WriteOutcome(
                name, WriteResult.UPDATED, changes, _json(response), attempts=attempt
            )

    def _send_apply(self, name: str, body: JsonObject, *, force: bool) -> Any:
        api = self.queue_api
        return self.custom_api.patch_cluster_custom_object(
            api.group,
            api.version,
            api.plural,
            name,
            body,
            field_manager=self.field_manager,
            force=force,
            _content_type=APPLY_CONTENT_TYPE,
            _preload_content=False,
            _request_timeout=self.request_timeout,
        )

    def _create(
        self, name: str, rules: SpecRules, template: Mapping[str, Any], attempt: int
    ) -> WriteOutcome:
        api = self.queue_api
        desired = rules.build(template)
        body = {
            "apiVersion": api.api_version,
            "kind": api.kind,
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "quotaguard"}},
            "spec": desired,
        }
        try:
            response = self.custom_api.create_cluster_custom_object(
                api.group,
                api.version,
                api.plural,
                body,
                field_manager=self.field_manager,
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        except Exception as exc:
            if status_code(exc) == 409:
                return WriteOutcome(
                    name, WriteResult.CONFLICT, attempts=attempt, detail="created meanwhile"
                )
            raise
        changes = tuple(rules.describe({}, desired))
        return WriteOutcome(name, WriteResult.CREATED, changes, _json(response), attempts=attempt)


def event_body(
    involved: Mapping[str, Any],
    *,
    reason: str,
    message: str,
    instance: str,
    now: datetime | None = None,
    warning: bool = False,
) -> JsonObject:
    """A core/v1 Event about a (cluster-scoped) object."""
    moment = utc_timestamp(now or datetime.now(UTC))
    metadata = involved.get("metadata") or {}
    name = str(metadata.get("name", "unknown"))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": EVENT_NAMESPACE},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "name": name,
            "uid": metadata.get("uid"),
            "resourceVersion": metadata.get("resourceVersion"),
        },
        "reason": reason,
        # the API server refuses messages over 1 KiB
        "message": message if len(message) <= 1024 else message[:1021] + "...",
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": moment,
        "lastTimestamp": moment,
        "count": 1,
    }


def emit_event(core_api: Any, body: JsonObject) -> bool:
    """Create the Event; a failure is logged, never raised (the write itself succeeded)."""
    try:
        core_api.create_namespaced_event(
            EVENT_NAMESPACE, body, _preload_content=False, _request_timeout=5
        )
    except Exception as exc:
        log.warning("could not record event %s: %s", body.get("reason"), exc)
        return False
    return True
