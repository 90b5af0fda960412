"""Leader election on a coordination.k8s.io/v1 Lease: only the leader writes queues.

The safety argument: a leader counts its term from the moment *before* it sent its last
successful renewal and steps down `renew_deadline` (10 s) later unless it renewed again. Any
other replica starts counting `leaseDurationSeconds` (15 s) from the moment *after* it saw that
renewal, by its own monotonic clock (wall clocks of two nodes may disagree), and can only take
the Lease with an update carrying the resourceVersion it read. So a new leader exists at the
earliest 5 s after the old one stopped writing, and a stale takeover loses with 409 Conflict.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from quotaguard.kube.client import status_code

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]

LEASE_NAME = "quotaguard-controller"
# Past the expiry by our own clock before trying, so the attempt is not a few microseconds early.
_EXPIRY_SLACK = 0.01
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class LeaseConflict(Exception):
    """The Lease changed (or appeared) since we read it."""


class LeaseStore(Protocol):
    def get(self) -> JsonObject | None: ...

    def create(self, lease: JsonObject) -> JsonObject: ...

    def replace(self, lease: JsonObject) -> JsonObject: ...


class KubeLeaseStore:
    """The Lease object through CoordinationV1Api, read and written as raw JSON."""

    def __init__(self, coordination_api: Any, *, name: str, namespace: str) -> None:
        self.api = coordination_api
        self.name = name
        self.namespace = namespace

    def get(self) -> JsonObject | None:
        try:
            response = self.api.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=5
            )
        except Exception as exc:
            if status_code(exc) == 404:
                return None
            raise
        lease: JsonObject = json.loads(response.data)
        return lease

    def create(self, lease: JsonObject) -> JsonObject:
        return self._write(self.api.create_namespaced_lease, self.namespace, lease)

    def replace(self, lease: JsonObject) -> JsonObject:
        return self._write(self.api.replace_namespaced_lease, self.name, self.namespace, lease)

    def _write(self, call: Callable[..., Any], *args: Any) -> JsonObject:
        """A create or replace; 409 (another holder wrote the Lease first) is LeaseConflict."""
        try:
            response = call(*args, _preload_content=False, _request_timeout=5)
        except Exception as exc:
            if status_code(exc) == 409:
                raise LeaseConflict(str(exc)) from exc
            raise
        written: JsonObject = json.loads(response.data)
        return written


def default_identity() -> str:
    """Pod name (the hostname in a pod) plus a random suffix: a restarted pod is a new holder."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}-{secrets.token_hex(3)}"


def default_namespace() -> str:
    namespace = os.environ.get("POD_NAMESPACE")
    if namespace:
        return namespace
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as handle:
            return handle.read().strip() or "default"
    except OSError:
        return "default"


def micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquires and renews one Lease; `is_leader()` is what every writer asks first."""

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        *,
        name: str = LEASE_NAME,
        namespace: str = "default",
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        renew_period: float = 5.0,
        acquire_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if not renew_period < renew_deadline < lease_duration:
            raise ValueError("need renew_period < renew_deadline < lease_duration")
        self.store = store
        self.identity = identity
        self.name = name
        self.namespace = namespace
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.renew_period = renew_period
        self.acquire_period = acquire_period
        self.clock = clock
        self.wall_clock = wall_clock
        self.on_change = on_change
        self.transitions = 0
        self._holding = False
        self._renewed_at = float("-inf")
        self._observed_version: str | None = None
        self._observed_at = float("-inf")
        self._was_leader = False
        self._expires_at = float("-inf")

    def is_leader(self, margin: float = 0.0) -> bool:
        """Whether we may write now and for the next `margin` seconds."""
        return self._holding and self.clock() - self._renewed_at + margin < self.renew_deadline

    def try_acquire_or_renew(self) -> bool:
        """One election step (blocking I/O); True when we hold the Lease afterwards."""
        started = self.clock()
        try:
            lease = self.store.get()
            if lease is None:
                return self._won(self.store.create(self._new_lease()), started)
            self._observe(lease)
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
            if holder and holder != self.identity:
                self._lose()
                self._expires_at = self._observed_at + duration
                if self._expires_at > self.clock():
                    return False
            return self._won(self.store.replace(self._taken(lease, holder)), started)
        except LeaseConflict:
            self._lose()
            return False
        except Exception as exc:
            # Unreachable API server: keep the term we have; it ends by itself at the deadline.
            log.warning("leader election step failed: %s", exc)
            return self.is_leader()
        finally:
            self._notify()

    def next_step_in(self) -> float:
        """Seconds until the next election step. A standby polls every `acquire_period` to see
        renewals, but wakes exactly when the Lease it watches expires, so a crashed leader is
        replaced `leaseDurationSeconds` after its last renewal was seen, not up to one poll
        later."""
        if self._holding:
            return self.renew_period
        until_expiry = self._expires_at - self.clock()
        if 0 < until_expiry < self.acquire_period:
            return until_expiry + _EXPIRY_SLACK
        return self.acquire_period

    def release(self) -> None:
        """Hand the Lease back on shutdown so the next replica need not wait for it to expire."""
        if not self._holding:
            return
        self._holding = False
        self._notify()
        try:
            lease = self.store.get()
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = dict(lease.get("spec") or {})
            spec.update(holderIdentity=None, leaseDurationSeconds=1)
            self.store.replace({**lease, "spec": spec})
        except Exception as exc:
            log.info("could not release the leader Lease: %s", exc)

    async def run(self, stop: asyncio.Event) -> None:
        # The Lease is read and written with the synchronous kubernetes client: in a thread.
        try:
            while not stop.is_set():
                await asyncio.to_thread(self.try_acquire_or_renew)
                period = self.next_step_in()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=period)
        finally:
            await asyncio.to_thread(self.release)

    # -- internals -------------------------------------------------------------------------

    def _observe(self, lease: JsonObject) -> None:
        version = (lease.get("metadata") or {}).get("resourceVersion")
        if version != self._observed_version:
            self._observed_version = version
            self._observed_at = self.clock()

    def _won(self, lease: JsonObject, started: float) -> bool:
        self._holding = True
        self._renewed_at = started
        self._observe(lease)
        return True

    def _lose(self) -> None:
        self._holding = False

    def _notify(self) -> None:
        leader = self.is_leader()
        if leader != self._was_leader:
            self._was_leader = leader
            if leader:
                self.transitions += 1
            log.info(
                "leadership %s", "acquired" if leader else "lost", extra={"holder": self.identity}
            )
            if self.on_change is not None:
                self.on_change(leader)

    def _new_lease(self) -> JsonObject:
        now = micro_time(self.wall_clock())
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }

    def _taken(self, lease: JsonObject, previous_holder: str) -> JsonObject:
        now = micro_time(self.wall_clock())
        spec = dict(lease.get("spec") or {})
        if previous_holder != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=int(self.lease_duration),
            renewTime=now,
        )
        return {**lease, "spec": spec}
