"""The DRA objects admission needs, read through the API and kept a while (a `DraLookup`).

A pod's claims name ResourceClaimTemplates and ResourceClaims by name; their specs cannot
change once created, so each is read once on first use (GET) and kept for `ttl` (a deleted and
re-created object is seen again after that); one not found is remembered for `missing_ttl`
only, so a template created just before its workload is found. DeviceClasses are listed whole,
again every `ttl`; until a list succeeds, a DeviceClass outside the policy is judged by name.

Reads run on the caller's thread with a short timeout: admission is synchronous. At most
`reads_per_second` reads start per second (a tenant naming random templates cannot make the
webhook wait on the API server for each): past that, an object not yet kept is taken as not
found (the claim is refused as unresolved; the workload can be created again a moment later).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from quotaguard.kube.client import status_code
from quotaguard.kube.dra import (
    ClaimSpec,
    DeviceClassInfo,
    device_class_info,
    resource_claim_spec,
    template_claim_spec,
)

log = logging.getLogger("quotaguard.webhook")

Read = Callable[[str, str], Any]  # (namespace, name) -> the object as plain JSON, or None


class DraCache:
    def __init__(
        self,
        read_template: Read,
        read_claim: Read,
        list_device_classes: Callable[[], list[Any]],
        *,
        ttl: float = 60.0,
        missing_ttl: float = 2.0,
        reads_per_second: float = 20.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = {"template": read_template, "claim": read_claim}
        self._list_classes = list_device_classes
        self._ttl, self._missing_ttl = ttl, missing_ttl
        self._rate, self._max_entries, self._clock = reads_per_second, max_entries, clock
        self._entries: dict[tuple[str, str, str], tuple[float, ClaimSpec | None]] = {}
        self._classes: dict[str, DeviceClassInfo] | None = None
        self._classes_at = -float("inf")
        self._tokens, self._tokens_at = reads_per_second, clock()
        self._lock = threading.Lock()  # large reviews are decided in worker threads

    def template(self, namespace: str, name: str) -> ClaimSpec | None:
        return self._spec("template", namespace, name)

    def claim(self, namespace: str, name: str) -> ClaimSpec | None:
        return self._spec("claim", namespace, name)

    def device_class(self, name: str) -> DeviceClassInfo | None:
        classes = self._device_classes()
        return None if classes is None else classes.get(name)

    @property
    def knows_device_classes(self) -> bool:
        return self._device_classes() is not None

    def _spec(self, kind: str, namespace: str, name: str) -> ClaimSpec | None:
        key = (kind, namespace, name)
        now = self._clock()
        with self._lock:
            held = self._entries.get(key)
            if held is not None and held[0] > now:
                return held[1]
            if not self._take_token(now):
                return None
        try:
            obj = self._read[kind](namespace, name)
        except Exception as exc:
            log.warning(
                "cannot read a DRA object",
                extra={"kind": kind, "namespace": namespace, "name": name, "error": str(exc)},
            )
            return None
        spec = None
        if isinstance(obj, dict):
            spec = template_claim_spec(obj) if kind == "template" else resource_claim_spec(obj)
        with self._lock:
            if len(self._entries) >= self._max_entries:
                self._entries.clear()
            keep = self._ttl if spec is not None else self._missing_ttl
            self._entries[key] = (now + keep, spec)
        return spec

    def _take_token(self, now: float) -> bool:
        self._tokens = min(self._rate, self._tokens + (now - self._tokens_at) * self._rate)
        self._tokens_at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    def _device_classes(self) -> dict[str, DeviceClassInfo] | None:
        now = self._clock()
        with self._lock:
            if now - self._classes_at < self._ttl:
                return self._classes
            self._classes_at = now  # one list per ttl, even when it fails
        try:
            items = self._list_classes()
        except Exception as exc:
            log.warning("cannot list DeviceClasses", extra={"error": str(exc)})
            return self._classes
        found = {}
        for item in items:
            info = device_class_info(item) if isinstance(item, dict) else None
            if info is not None:
                found[info.name] = info
        with self._lock:
            self._classes = found
        return found


def api_dra_cache(api: Any, *, timeout: float = 1.0) -> DraCache:
    """A DraCache reading through a `kubernetes.client.ApiClient`."""
    from kubernetes import client

    resource = client.ResourceV1Api(api)

    def read(call: Callable[..., Any]) -> Read:
        def get(namespace: str, name: str) -> Any:
            try:
                response = call(name, namespace, _preload_content=False, _request_timeout=timeout)
            except Exception as exc:
                if status_code(exc) == 404:
                    return None
                raise
            return json.loads(response.data)

        return get

    def list_classes() -> list[Any]:
        response: Any = resource.list_device_class(_preload_content=False, _request_timeout=timeout)
        items = json.loads(response.data).get("items")
        return items if isinstance(items, list) else []

    return DraCache(
        read(resource.read_namespaced_resource_claim_template),
        read(resource.read_namespaced_resource_claim),
        list_classes,
    )
