"""A fake API server behind fake kubernetes client objects (the seam the controller calls).

Objects live in memory with increasing resourceVersions; lists paginate; watches return the
events after a resourceVersion (or 410 once history was compacted); writes check
resourceVersions like the real server. Failures are injected per call.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

from kubernetes.client.exceptions import ApiException

from quotaguard.controller.kube_clients import KubeClients

Json = dict[str, Any]


class FakeResponse:
    """What the client returns with _preload_content=False: .data, .stream(), close."""

    def __init__(
        self,
        data: bytes = b"",
        chunks: list[bytes] | None = None,
        fail_after: BaseException | None = None,
    ) -> None:
        self.data = data
        self.chunks = chunks if chunks is not None else [data]
        self.fail_after = fail_after
        self.closed = False

    def stream(self, amt: int | None = None, decode_content: bool | None = None) -> Iterator[bytes]:
        for chunk in self.chunks:
            if self.closed:
                return
            yield chunk
        if self.fail_after is not None:
            raise self.fail_after

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass

    def shutdown(self) -> None:
        self.closed = True


def api_error(status: int, reason: str = "") -> ApiException:
    return ApiException(status=status, reason=reason or str(status))


def _key(obj: Json) -> tuple[str | None, str]:
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace"), metadata["name"]


class FakeApiServer:
    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.version = 100
        self.objects: dict[str, dict[tuple[str | None, str], Json]] = {}
        self.log: dict[str, list[tuple[int, str, Json]]] = {}
        self.compacted: dict[str, int] = {}
        self.groups: dict[str, list[str]] = {}
        # "group/version" -> the resources it lists (GET /apis/<group>/<version>)
        self.resources: dict[str, list[str]] = {}
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.fail: dict[str, list[BaseException]] = {}  # verb or "verb path" -> errors to raise
        self.down = False
        self.conflicts_before_apply = 0
        # called with the queue name before each apply until it returns True (a rival write)
        self.before_apply: Callable[[str], bool] | None = None
        # (path, name) -> {spec field: (manager, operation)}: who owns each top spec field
        self.owners: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}
        self.events: list[Json] = []
        self.watch_wait = 0.02

    # -- state ---------------------------------------------------------------------------------
    def put(self, path: str, obj: Json) -> Json:
        with self.lock:
            self.version += 1
            stored = copy.deepcopy(obj)
            stored.setdefault("metadata", {})["resourceVersion"] = str(self.version)
            store = self.objects.setdefault(path, {})
            event = "MODIFIED" if _key(stored) in store else "ADDED"
            store[_key(stored)] = stored
            self.log.setdefault(path, []).append((self.version, event, copy.deepcopy(stored)))
            self.lock.notify_all()
            return copy.deepcopy(stored)

    def delete(self, path: str, name: str, namespace: str | None = None) -> None:
        with self.lock:
            self.version += 1
            stored = self.objects[path].pop((namespace, name))
            stored["metadata"]["resourceVersion"] = str(self.version)
            self.log[path].append((self.version, "DELETED", stored))
            self.lock.notify_all()

    def get(self, path: str, name: str, namespace: str | None = None) -> Json | None:
        with self.lock:
            found = self.objects.get(path, {}).get((namespace, name))
            return copy.deepcopy(found) if found else None

    def compact(self, path: str) -> None:
        """Forget history: watching from an older resourceVersion now answers 410."""
        with self.lock:
            self.compacted[path] = self.version

    def bookmark(self, path: str) -> None:
        with self.lock:
            self.version += 1
            obj = {"kind": "Bookmark", "metadata": {"resourceVersion": str(self.version)}}
            self.log.setdefault(path, []).append((self.version, "BOOKMARK", obj))
            self.lock.notify_all()

    def writes(self, verb: str = "apply") -> list[tuple[str, str, dict[str, Any]]]:
        return [call for call in self.calls if call[0] == verb]

    # -- verbs ---------------------------------------------------------------------------------
    def _enter(self, verb: str, path: str, kwargs: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append((verb, path, kwargs))
        if self.down:
            raise ConnectionRefusedError("connection refused")
        for key in (f"{verb} {path}", verb):
            errors = self.fail.get(key)
            if errors:
                raise errors.pop(0)

    def list_or_watch(self, path: str, **kwargs: Any) -> FakeResponse:
        if kwargs.get("watch"):
            return self._watch(path, kwargs)
        self._enter("list", path, kwargs)
        with self.lock:
            items = sorted(self.objects.get(path, {}).values(), key=lambda o: _key(o)[1])
            start = int(kwargs.get("_continue") or 0)
            limit = kwargs.get("limit") or len(items) or 1
            page = items[start : start + limit]
            metadata: Json = {"resourceVersion": str(self.version)}
            if start + limit < len(items):
                metadata["continue"] = str(start + limit)
            body = {"kind": "List", "metadata": metadata, "items": page}
        return FakeResponse(json.dumps(body).encode())

    def _watch(self, path: str, kwargs: dict[str, Any]) -> FakeResponse:
        self._enter("watch", path, kwargs)
        since = int(kwargs.get("resource_version") or 0)
        with self.lock:
            if since < self.compacted.get(path, 0):
                raise api_error(410, "Gone")
            if not any(v > since for v, _, _ in self.log.get(path, [])):
                self.lock.wait(self.watch_wait)
            events = [(v, t, o) for v, t, o in self.log.get(path, []) if v > since]
        lines = [
            json.dumps({"type": t, "object": o}, separators=(",", ":")).encode() + b"\n"
            for _, t, o in events
        ]
        # split every line across two chunks: readers must reassemble objects
        chunks = [
            part for line in lines for part in (line[: len(line) // 2], line[len(line) // 2 :])
        ]
        return FakeResponse(chunks=chunks)

    def custom_get(self, path: str, name: str, kwargs: dict[str, Any]) -> FakeResponse:
        self._enter("get", path, kwargs)
        found = self.get(path, name)
        if found is None:
            raise api_error(404, "NotFound")
        return FakeResponse(json.dumps(found).encode())

    def custom_apply(
        self, path: str, name: str, body: Json, kwargs: dict[str, Any]
    ) -> FakeResponse:
        """Server-side apply, at the granularity of top spec fields: a field another manager
        owns and the apply changes is a conflict unless forced; the resourceVersion given is a
        precondition."""
        self._enter("apply", path, {**kwargs, "body": copy.deepcopy(body)})
        assert kwargs.get("_content_type") == "application/apply-patch+yaml"
        manager = kwargs["field_manager"]
        if self.before_apply is not None and self.before_apply(name):
            self.before_apply = None
        with self.lock:
            if self.conflicts_before_apply > 0:
                self.conflicts_before_apply -= 1
                raise api_error(409, "Conflict")
            found = self.objects.get(path, {}).get((None, name))
            if found is None:
                raise api_error(404, "NotFound")
            wanted = body["metadata"].get("resourceVersion")
            if wanted is not None and wanted != found["metadata"]["resourceVersion"]:
                raise api_error(409, "Conflict")
            owners = self.owners.setdefault((path, name), {})
            spec = found.setdefault("spec", {})
            conflicts = [
                (field, owners[field][0])
                for field, value in body["spec"].items()
                if field in owners and owners[field][0] != manager and spec.get(field) != value
            ]
            if conflicts and not kwargs.get("force"):
                error = api_error(409, "Conflict")
                error.body = json.dumps(
                    {
                        "kind": "Status",
                        "reason": "Conflict",
                        "details": {
                            "causes": [
                                {
                                    "reason": "FieldManagerConflict",
                                    "message": f'conflict with "{owner}" using kueue/v1beta2',
                                    "field": f".spec.{field}",
                                }
                                for field, owner in conflicts
                            ]
                        },
                    }
                )
                raise error
            for field, value in body["spec"].items():
                old = spec.get(field)
                spec[field] = (
                    {**old, **value} if isinstance(old, dict) and isinstance(value, dict) else value
                )
                owners[field] = (manager, "Apply")
            found["metadata"]["managedFields"] = [
                {"manager": m, "operation": op} for m, op in sorted(set(owners.values()))
            ]
            return FakeResponse(json.dumps(self.put(path, found)).encode())

    def custom_create(self, path: str, body: Json, kwargs: dict[str, Any]) -> FakeResponse:
        self._enter("create", path, {**kwargs, "body": copy.deepcopy(body)})
        if self.get(path, body["metadata"]["name"], body["metadata"].get("namespace")):
            raise api_error(409, "AlreadyExists")
        return FakeResponse(json.dumps(self.put(path, body)).encode())


class FakeCore:
    def __init__(self, server: FakeApiServer) -> None:
        self.server = server

    def list_node(self, **kwargs: Any) -> FakeResponse:
        return self.server.list_or_watch("v1/nodes", **kwargs)

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> FakeResponse:
        return self.server.list_or_watch("v1/pods", **kwargs)

    def read_namespaced_config_map(self, name: str, namespace: str, **kwargs: Any) -> Any:
        """As the client gives it: an object with `.data` (404 when there is none)."""
        self.server._enter("get", "v1/configmaps", kwargs)
        found = self.server.get("v1/configmaps", name, namespace)
        if found is None:
            raise api_error(404, "NotFound")
        return SimpleNamespace(data=found.get("data"))

    def patch_node(self, name: str, body: Json, **kwargs: Any) -> FakeResponse:
        """A merge patch of metadata (None removes a key) and spec, guarded by the
        resourceVersion it carries."""
        self.server._enter("patch", "v1/nodes", {**kwargs, "body": copy.deepcopy(body)})
        with self.server.lock:
            found = self.server.get("v1/nodes", name)
            if found is None:
                raise api_error(404, "NotFound")
            metadata = body.get("metadata") or {}
            wanted = metadata.get("resourceVersion")
            if wanted is not None and wanted != found["metadata"]["resourceVersion"]:
                raise api_error(409, "Conflict")
            for key in ("labels", "annotations"):
                merged = {**(found["metadata"].get(key) or {}), **(metadata.get(key) or {})}
                found["metadata"][key] = {k: v for k, v in merged.items() if v is not None}
            found.setdefault("spec", {}).update(body.get("spec") or {})
            return FakeResponse(json.dumps(self.server.put("v1/nodes", found)).encode())

    def create_namespaced_event(self, namespace: str, body: Json, **kwargs: Any) -> FakeResponse:
        self.server._enter("event", "v1/events", kwargs)
        self.server.events.append(copy.deepcopy(body))
        return FakeResponse(json.dumps(body).encode())


class FakeCustom:
    def __init__(self, server: FakeApiServer) -> None:
        self.server = server

    def get_api_resources(self, group: str, version: str, **kwargs: Any) -> FakeResponse:
        self.server._enter("discovery", f"/apis/{group}/{version}", kwargs)
        if version not in self.server.groups.get(group, []):
            raise api_error(404, "NotFound")
        names = self.server.resources.get(f"{group}/{version}", [])
        body = {"kind": "APIResourceList", "resources": [{"name": n} for n in names]}
        return FakeResponse(json.dumps(body).encode())

    def list_cluster_custom_object(
        self, group: str, version: str, plural: str, **kwargs: Any
    ) -> FakeResponse:
        return self.server.list_or_watch(f"{group}/{version}/{plural}", **kwargs)

    def get_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, **kwargs: Any
    ) -> FakeResponse:
        return self.server.custom_get(f"{group}/{version}/{plural}", name, kwargs)

    def patch_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, body: Json, **kwargs: Any
    ) -> FakeResponse:
        return self.server.custom_apply(f"{group}/{version}/{plural}", name, body, kwargs)

    def create_cluster_custom_object(
        self, group: str, version: str, plural: str, body: Json, **kwargs: Any
    ) -> FakeResponse:
        return self.server.custom_create(f"{group}/{version}/{plural}", body, kwargs)

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: Json, **kwargs: Any
    ) -> FakeResponse:
        return self.server.custom_create(f"{group}/{version}/{plural}", body, kwargs)


class FakeApis:
    def __init__(self, server: FakeApiServer) -> None:
        self.server = server

    def get_api_versions(self, **kwargs: Any) -> FakeResponse:
        self.server._enter("discovery", "/apis", kwargs)
        groups = [
            {
                "name": name,
                "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
            }
            for name, versions in self.server.groups.items()
        ]
        return FakeResponse(json.dumps({"kind": "APIGroupList", "groups": groups}).encode())


class FakeLeaseStore:
    """An in-memory Lease with resourceVersion checks, shared by several electors."""

    def __init__(self) -> None:
        self.lease: Json | None = None
        self.version = 0
        self.before_write: Callable[[], None] | None = None

    def get(self) -> Json | None:
        return copy.deepcopy(self.lease)

    def _store(self, lease: Json) -> Json:
        self.version += 1
        stored = copy.deepcopy(lease)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.lease = stored
        return copy.deepcopy(stored)

    def create(self, lease: Json) -> Json:
        from quotaguard.controller.leader import LeaseConflict

        self._hook()
        if self.lease is not None:
            raise LeaseConflict("exists")
        return self._store(lease)

    def replace(self, lease: Json) -> Json:
        from quotaguard.controller.leader import LeaseConflict

        self._hook()
        assert self.lease is not None
        if lease["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise LeaseConflict("changed")
        return self._store(lease)

    def _hook(self) -> None:
        hook, self.before_write = self.before_write, None
        if hook is not None:
            hook()


def fake_clients(server: FakeApiServer) -> KubeClients:
    return KubeClients(
        core=FakeCore(server), custom=FakeCustom(server), coordination=None, apis=FakeApis(server)
    )
