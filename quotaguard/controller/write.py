"""Writing one queue: read, change the spec in memory, replace with the resourceVersion read.

Optimistic concurrency instead of a patch: the resourceGroups list is atomic in Kueue's schema,
so a merge patch would have to carry the whole list anyway, and a replace that names the
resourceVersion it was built from can never overwrite a change someone made in between (409,
read again, rebuild, retry — a bounded number of times). A spec that comes out equal to what is
there is not written at all, so repeated intervals do not cause write storms.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

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


@dataclass(frozen=True)
class SpecRules:
    """How to turn a queue's spec into the one we want, and how to compare and describe it."""

    build: Callable[[Mapping[str, Any]], JsonObject]
    same: Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
    describe: Callable[[Mapping[str, Any], Mapping[str, Any]], list[str]]


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
    stats: dict[str, int] = field(default_factory=dict)

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
        self, name: str, rules: SpecRules, *, template: Mapping[str, Any] | None = None
    ) -> WriteOutcome:
        """Bring queue `name` to what `rules.build` asks for. A missing queue is created from
        `rules.build(template)` when a template is given, else reported as missing."""
        outcome = self._write(name, rules, template=template)
        self.stats[outcome.result] = self.stats.get(outcome.result, 0) + 1
        return outcome

    def _write(
        self, name: str, rules: SpecRules, *, template: Mapping[str, Any] | None
    ) -> WriteOutcome:
        attempt = 0
        try:
            while attempt < self.max_attempts:
                attempt += 1
                if not self.may_write():
                    return WriteOutcome(name, WriteResult.NOT_LEADER, attempts=attempt)
                current = self.get(name)
                if current is None:
                    if template is None:
                        return WriteOutcome(name, WriteResult.MISSING, attempts=attempt)
                    return self._create(name, rules, template, attempt)
                spec = current.get("spec") or {}
                desired = rules.build(spec)
                if rules.same(spec, desired):
                    return WriteOutcome(name, WriteResult.UNCHANGED, attempts=attempt)
                body = {**current, "spec": desired}
                body.pop("status", None)
                if not self.may_write():
                    return WriteOutcome(name, WriteResult.NOT_LEADER, attempts=attempt)
                try:
                    response = self._call(self.custom_api.replace_cluster_custom_object, name, body)
                except Exception as exc:
                    if status_code(exc) == 409:
                        log.info("queue %s changed while we wrote it; reading it again", name)
                        continue
                    raise
                changes = tuple(rules.describe(spec, desired))
                return WriteOutcome(
                    name, WriteResult.UPDATED, changes, _json(response), attempts=attempt
                )
            return WriteOutcome(
                name,
                WriteResult.CONFLICT,
                attempts=attempt,
                detail=f"still conflicting after {attempt} attempts",
            )
        except Exception as exc:
            return WriteOutcome(
                name, WriteResult.ERROR, detail=f"{type(exc).__name__}: {exc}", attempts=attempt
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
            response = self._call(self.custom_api.create_cluster_custom_object, body)
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
        "type": "Normal",
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
