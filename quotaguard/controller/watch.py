"""List-then-watch of one Kubernetes resource into an in-memory cache of plain dicts.

The responses are read raw (`_preload_content=False`) and decoded with `json.loads`: the
client's model deserialisation costs far too much for tens of thousands of pods. Each object is
trimmed to the fields the planner reads before it is cached, and a cheap byte test on each watch
line skips objects that can never be kept (pods without GPUs) without decoding them.

`synced` is the controller's staleness signal: false until the first list is in, and false again
from any error until a fresh list has replaced the cache.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from quotaguard.controller.backoff import Backoff
from quotaguard.kube.client import status_code

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]
Trim = Callable[[JsonObject], JsonObject | None]


def _is_change(line: bytes) -> bool:
    """An ADDED/MODIFIED/DELETED event (the API server writes `type` first); anything else, or
    a line we cannot tell, is decoded."""
    head = line[:40]
    return b'"type"' in head and b"BOOKMARK" not in head and b"ERROR" not in head


class RawResponse(Protocol):
    """What the kubernetes client returns with `_preload_content=False` (urllib3 response)."""

    @property
    def data(self) -> bytes: ...

    def stream(
        self, amt: int | None = ..., decode_content: bool | None = ...
    ) -> Iterator[bytes]: ...

    def close(self) -> None: ...

    def release_conn(self) -> None: ...


ListCall = Callable[..., RawResponse]


@dataclass(frozen=True)
class ResourceKind:
    """One resource to watch: how to list it, what to keep of each object.

    `list_call` is a list method of the kubernetes client (or a partial of the custom objects
    API); it takes the usual keyword arguments (`watch`, `resource_version`, `limit`, ...).
    `keep_line`, when given, is a byte test a watch line must pass to be decoded at all; it may
    only reject objects that `trim` would drop too.
    """

    name: str
    list_call: ListCall
    trim: Trim
    keep_line: Callable[[bytes], bool] | None = None
    # Server-side filter for list and watch (an object leaving it is reported as DELETED).
    field_selector: str | None = None


class Gone(Exception):
    """The resourceVersion we watch from is too old (HTTP 410): re-list."""


class WatchFailed(Exception):
    """The watch stream reported an error event other than 410."""


@dataclass
class WatchStats:
    lists: int = 0
    watches: int = 0
    events: int = 0
    skipped_lines: int = 0
    gone: int = 0
    errors: int = 0
    last_error: str | None = None


@dataclass
class WatchSettings:
    page_size: int = 500
    # Server-side end of one watch request; the watch resumes from the last resourceVersion.
    watch_timeout_seconds: int = 290
    connect_timeout: float = 10.0
    list_timeout: float = 120.0
    backoff: Backoff = field(default_factory=Backoff)


def object_key(obj: JsonObject) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = str(metadata.get("name", ""))
    return f"{namespace}/{name}" if namespace else name


class Watch:
    """Keeps the cache of one resource current; `run` blocks, so give it a thread of its own."""

    def __init__(self, kind: ResourceKind, settings: WatchSettings | None = None) -> None:
        self.kind = kind
        self.settings = settings or WatchSettings()
        self.stats = WatchStats()
        self.resource_version: str | None = None
        self._objects: dict[str, JsonObject] = {}
        self._synced = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: RawResponse | None = None
        self._thread: threading.Thread | None = None

    # -- what the controller reads ---------------------------------------------------------

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def synced(self) -> bool:
        return self._synced

    def objects(self) -> list[JsonObject]:
        """The cached objects now; they are replaced, never mutated, so sharing them is safe."""
        with self._lock:
            return list(self._objects.values())

    def upsert(self, obj: JsonObject) -> None:
        """Put an object we just wrote into the cache, unless the watch already has a newer one.

        The next interval then plans from what we wrote even if its watch event is late.
        """
        trimmed = self.kind.trim(obj)
        key = object_key(obj)
        with self._lock:
            cached = self._objects.get(key)
            if cached is not None and _newer(cached, obj):
                return
            if trimmed is None:
                self._objects.pop(key, None)
            else:
                self._objects[key] = trimmed

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Run in a daemon thread: a long watch must not occupy the shared executor.

        A thread and not a task: the watch streams through the synchronous kubernetes client
        (blocking reads for minutes); the loop only reads `objects()`, under the lock."""
        self._thread = threading.Thread(target=self.run, name=f"watch-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, join_timeout: float = 5.0) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            _interrupt(response)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(join_timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        need_list = True
        gone_in_a_row = 0
        backoff = self.settings.backoff
        while not self._stop.is_set():
            try:
                if need_list:
                    self.list_once()
                    need_list = False
                if self.watch_once():
                    backoff.reset()
                    gone_in_a_row = 0
            except Gone:
                self._synced = False
                need_list = True
                self.stats.gone += 1
                gone_in_a_row += 1
                log.info("watch %s: resourceVersion too old, re-listing", self.name)
                if gone_in_a_row > 1:
                    self._stop.wait(backoff.next_delay())
            except Exception as exc:
                if self._stop.is_set():
                    break
                self._synced = False
                need_list = True
                self.stats.errors += 1
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                delay = backoff.next_delay()
                log.warning(
                    "watch %s failed, retrying in %.1fs: %s",
                    self.name,
                    delay,
                    self.stats.last_error,
                    extra={"resource": self.name, "retryIn": round(delay, 2)},
                )
                self._stop.wait(delay)
        self._synced = False

    # -- one list, one watch request -----------------------------------------------------------

    def list_once(self) -> None:
        """Replace the cache with a fresh, paginated list; afterwards the watch is synced."""
        objects: dict[str, JsonObject] = {}
        continue_token: str | None = None
        resource_version = ""
        while True:
            kwargs: dict[str, Any] = {
                "limit": self.settings.page_size,
                "_preload_content": False,
                "_request_timeout": (self.settings.connect_timeout, self.settings.list_timeout),
            }
            if continue_token:
                kwargs["_continue"] = continue_token
            if self.kind.field_selector:
                kwargs["field_selector"] = self.kind.field_selector
            text = self._read(kwargs)
            with collector_paused():
                metadata = self._keep_page(text, objects)
            continue_token = metadata.get("continue") or None
            if not continue_token:
                resource_version = str(metadata.get("resourceVersion", ""))
                break
        with self._lock:
            self._objects = objects
            self.resource_version = resource_version
        self.stats.lists += 1
        self._synced = True

    def watch_once(self) -> bool:
        """Follow one watch request until the server ends it; True when it ended normally."""
        settings = self.settings
        kwargs: dict[str, Any] = {
            "watch": True,
            "allow_watch_bookmarks": True,
            "resource_version": self.resource_version,
            "timeout_seconds": settings.watch_timeout_seconds,
            "_preload_content": False,
            "_request_timeout": (settings.connect_timeout, settings.watch_timeout_seconds + 30),
        }
        if self.kind.field_selector:
            kwargs["field_selector"] = self.kind.field_selector
        response = self._open(kwargs)
        self._response = response
        self.stats.watches += 1
        try:
            if self._stop.is_set():
                return False
            for line in _lines(response):
                if self._stop.is_set():
                    return False
                self._apply_line(line)
        finally:
            self._response = None
            _close(response)
        return True

    def _apply_line(self, line: bytes) -> None:
        keep_line = self.kind.keep_line
        if keep_line is not None and _is_change(line) and not keep_line(line):
            # Not decoded, so its resourceVersion is not recorded: resuming from an older one
            # replays only events that change nothing.
            self.stats.skipped_lines += 1
            return
        event = json.loads(line.decode("utf-8", "replace"))
        event_type = event.get("type")
        obj = event.get("object") or {}
        if event_type == "ERROR":
            if obj.get("code") == 410:
                raise Gone(obj.get("message", "410 Gone"))
            raise WatchFailed(f"{obj.get('code')}: {obj.get('message', obj)}")
        resource_version = (obj.get("metadata") or {}).get("resourceVersion")
        self.stats.events += 1
        if event_type != "BOOKMARK":
            key = object_key(obj)
            trimmed = None if event_type == "DELETED" else self.kind.trim(obj)
            with self._lock:
                if trimmed is None:
                    self._objects.pop(key, None)
                else:
                    self._objects[key] = trimmed
        if resource_version:
            self.resource_version = str(resource_version)

    def _open(self, kwargs: dict[str, Any]) -> RawResponse:
        try:
            return self.kind.list_call(**kwargs)
        except Exception as exc:
            if status_code(exc) == 410:
                raise Gone(str(exc)) from exc
            raise

    def _read(self, kwargs: dict[str, Any]) -> str:
        response = self._open(kwargs)
        try:
            # decoding first is faster than json.loads(bytes), which detects the encoding
            return response.data.decode("utf-8", "replace")
        finally:
            _close(response)

    def _keep_page(self, text: str, objects: dict[str, JsonObject]) -> JsonObject:
        """Decode one list page and put its trimmed objects into `objects`; the page's
        metadata. The page itself is freed on return."""
        body = json.loads(text)
        for raw in body.get("items") or ():
            trimmed = self.kind.trim(raw)
            if trimmed is not None:
                objects[object_key(raw)] = trimmed
        metadata: JsonObject = body.get("metadata") or {}
        return metadata


# One pause at a time, so that one watch thread cannot re-enable the collector while another
# is inside its pause. (json.loads holds the GIL throughout, so waiting here costs little.)
_COLLECTOR_PAUSE = threading.Lock()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a list page is decoded, trimmed and freed (or
    while an interval is planned: see `interval_planning.plan_interval`).

    A page of 500 pods is ~150,000 containers that all live until the page is dropped, so
    with the collector on, decoding one page triggers collections over and over, full ones
    included that walk the whole cache built so far: on a 100,000-pod list that was most of
    the CPU time. A page has no reference cycles; it is freed by reference counting when
    `_keep_page` returns, still inside the pause, so the collector never has to see it.
    """
    with _COLLECTOR_PAUSE:
        enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if enabled:
                gc.enable()


def _newer(cached: JsonObject, incoming: JsonObject) -> bool:
    """Whether the cached object is newer than `incoming` (resourceVersions compared as ints).

    resourceVersions are opaque by contract, but etcd-backed servers hand out increasing
    integers; when they are not integers we let the incoming object win.
    """
    try:
        have = int((cached.get("metadata") or {}).get("resourceVersion", ""))
        got = int((incoming.get("metadata") or {}).get("resourceVersion", ""))
    except ValueError:
        return False
    return have > got


def _lines(response: RawResponse) -> Iterator[bytes]:
    """Newline-delimited lines of a watch stream; an object may span many chunks."""
    pieces: list[bytes] = []
    for chunk in response.stream(None, False):
        data = chunk if isinstance(chunk, bytes) else chunk.encode()
        if b"\n" not in data:
            pieces.append(data)
            continue
        pieces.append(data)
        *complete, tail = b"".join(pieces).split(b"\n")
        pieces = [tail] if tail else []
        for line in complete:
            if line.strip():
                yield line
    rest = b"".join(pieces)
    if rest.strip():
        yield rest


def _close(response: RawResponse) -> None:
    try:
        response.close()
        response.release_conn()
    except Exception:  # closing is best effort; the connection is dropped either way
        pass


def _interrupt(response: RawResponse) -> None:
    """Unblock a thread reading the stream: shut the socket down under it."""
    try:
        shutdown = getattr(response, "shutdown", None)
        if callable(shutdown):
            shutdown()
            return
        connection = getattr(response, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
        else:
            response.close()
    except Exception:
        pass


def wait_synced(watches: list[Watch], timeout: float) -> bool:
    """Block until every watch is synced (for tests and start-up); False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(w.synced for w in watches):
            return True
        time.sleep(0.01)
    return all(w.synced for w in watches)
