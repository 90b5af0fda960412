"""Answers of identical requests, kept: the pods of one ReplicaSet or Job get the answer the
first of them got, without deciding again.

Replica pods differ only in what admission never reads once decoded (`sparse`): their names,
uids and generateName suffixes are outside the sparse schema, and the request's `uid` is echoed,
not read. So the key is the SHA-256 of everything the engine is given, in canonical bytes
(msgpack keeps types apart: `1`, `1.0`, `true` and `"1"` never share a key), minus only what it
provably never reads:

- `request.uid`: only echoed in the response, spliced into the kept answer on every hit (an
  answer whose bytes echo it anywhere else, e.g. an internal error, is never kept);
- `request.name`, which the API server fills with the generated name of each replica: read only
  to name the object in the denials of `provenance.refused_creation`, written whole into their
  message. The key says only that there is a name; an answer whose bytes hold the name is not
  kept, so every kept answer is one whose deciding never wrote the name, which is the same for
  any name (a name that is empty, not a string or not plain ASCII is in the key as it is);
- `request.dryRun`: admission has no side effects and reads it nowhere;
- `request.userInfo` but its `username` (`owners.username_of`, the one reader);
- the review's fields beside `apiVersion`, `kind` and `request` (`reviews.decode_review`).

Everything else is in the key whole: the object and old object as decoded, the operation,
namespace and request kind, and the endpoint (mutate or validate). The policy in force is
not hashed but held: the kept answers belong to one policy object, and a request under any
other (a reload, a swap) empties the cache first, so no answer outlives its policy. State read
from the cluster (TrainJob runtimes, DRA objects) is never part of a kept answer: the caller
counts those reads (`cluster_reads`), and an answer whose deciding read any is not kept.

Cheap when it cannot help: a miss costs the key (~5 us for an 11 KB Pod, a few percent of
deciding). While the last `WINDOW` lookups found fewer than 1 in 32, only one request in
`sample_when_cold` is looked up (and kept); the first of those that is found looks every request
up again. Replica pods arriving after a run of distinct ones are answered from the cache from
their second or third sampled request on.

Bounded: at most `max_entries` answers and `max_bytes` of them (LRU); an answer over
`MAX_ENTRY_BYTES` is not kept. Thread-safe: large reviews are decided in worker threads.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from quotaguard.admission.owners import username_of
from quotaguard.admission.reviews import API_VERSION, KIND

DEFAULT_MAX_ENTRIES: Final = 4096
DEFAULT_MAX_BYTES: Final = 16 * 1024 * 1024
MAX_ENTRY_BYTES: Final = 64 * 1024
# What one entry costs beside its answer's bytes (key, entry object, dict slot), for the bound.
ENTRY_OVERHEAD_BYTES: Final = 200
# Results whose answer is a function of the key; errors name the uid and are logged each time.
KEPT_RESULTS: Final = frozenset({"allowed", "mutated", "denied"})
WINDOW: Final = 128  # lookups over which the share found is judged
COLD_HITS: Final = WINDOW // 32  # fewer found in a window: look up one request in a few
SAMPLE_WHEN_COLD: Final = 8
# Every AdmissionReview answer begins so (`reviews.build_response`, `answers._refusal`).
_BEFORE_UID: Final = b'{"apiVersion":"%s","kind":"%s","response":{"uid":"' % (
    API_VERSION.encode(),
    KIND.encode(),
)
_UNREAD_FIELDS: Final = frozenset({"uid", "dryRun", "userInfo", "name"})
# The request's fields `sparse` keeps, and those of them in the key by position.
_SPARSE_FIELDS: Final = frozenset(
    {"uid", "kind", "name", "namespace", "operation", "userInfo", "object", "oldObject", "dryRun"}
)
_READ_FIELDS: Final = tuple(sorted(_SPARSE_FIELDS - _UNREAD_FIELDS))
# Marks no JSON value can be (msgpack extension types): a name that is spliceable, a field absent.
_NAMED: Final = msgspec.msgpack.Ext(1, b"")
_ABSENT: Final = msgspec.msgpack.Ext(2, b"")
_pack = msgspec.msgpack.Encoder().encode


def no_cluster_reads() -> int:
    """The count of cluster reads of a review function that reads none."""
    return 0


@dataclass(frozen=True, slots=True)
class Key:
    """A request's key (`digest`), the uid its answer echoes and the request's name when the
    key holds only that there is one (see above)."""

    digest: bytes
    uid: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class KeptAnswer:
    """An answer as kept: its bytes after the uid, and the labels it is counted under."""

    after_uid: bytes
    kind: str
    result: str
    denials: tuple[tuple[str, str], ...]

    def body(self, uid: str) -> bytes:
        return _BEFORE_UID + uid.encode() + self.after_uid


def key_of(operation: str, document: Any) -> Key | None:
    """The key of a decoded review on endpoint `operation`; None when it is not to be cached
    (no request, a uid that cannot be spliced, a value with no canonical bytes)."""
    request = document.get("request") if isinstance(document, dict) else None
    if not isinstance(request, dict):
        return None
    uid = request.get("uid")
    if not isinstance(uid, str) or not spliceable(uid):
        return None
    name = request.get("name")
    named = isinstance(name, str) and spliceable(name)
    if request.keys() <= _SPARSE_FIELDS:  # as `sparse` decodes it: each field in its place
        read: Any = tuple(request.get(field, _ABSENT) for field in _READ_FIELDS)
    else:  # decoded whole: every field but those never read
        read = {field: value for field, value in request.items() if field not in _UNREAD_FIELDS}
    username = username_of(request.get("userInfo"))
    head = (operation, document.get("apiVersion"), document.get("kind"), username)
    try:
        packed = _pack((*head, _NAMED if named else name, read))
    except (TypeError, ValueError, OverflowError):  # a lone surrogate, an int past 64 bits
        return None
    return Key(hashlib.sha256(packed).digest(), uid, name if named else None)


def spliceable(text: str) -> bool:
    """Printable ASCII but `"` and `\\`: written as is by both of `reviews.encode_json`'s
    encoders, so splicing it between kept bytes gives the bytes deciding would (real uids are
    UUIDs; a request with any other uid is decided every time)."""
    return (
        bool(text)
        and text.isascii()
        and text.isprintable()
        and '"' not in text
        and "\\" not in text
    )


class DecisionCache:
    """The kept answers of one policy at a time. `cluster_reads` counts every read of cluster
    state by the review function (it must only grow); answers decided while it moved are not
    kept."""

    def __init__(
        self,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        cluster_reads: Callable[[], int] = no_cluster_reads,
        sample_when_cold: int = SAMPLE_WHEN_COLD,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.cluster_reads = cluster_reads
        self.sample_when_cold = sample_when_cold
        # Approximate under threads, which costs only a lookup more or less.
        self.cold = False
        self._passed = 0  # requests not looked up since the last one that was, while cold
        self._lookups = 0
        self._found = 0
        self._entries: OrderedDict[bytes, KeptAnswer] = OrderedDict()
        self._policy: object = None
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def entries(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        """What the kept answers cost, as counted against `max_bytes`."""
        return self._bytes

    def wanted(self) -> bool:
        """Whether to look the next request up: always, but one in `sample_when_cold` while
        the cache finds next to nothing."""
        if not self.cold:
            return True
        self._passed += 1
        if self._passed < self.sample_when_cold:
            return False
        self._passed = 0
        return True

    def get(self, policy: object, key: Key) -> KeptAnswer | None:
        with self._lock:
            kept = self._entries.get(key.digest) if policy is self._policy else None
            if kept is not None:
                self._entries.move_to_end(key.digest)
        self._count_lookup(kept is not None)
        return kept

    def _count_lookup(self, found: bool) -> None:
        if found and self.cold:
            self.cold = False
            self._lookups = self._found = 0
        self._lookups += 1
        self._found += found
        if self._lookups >= WINDOW:
            self.cold = self._found < COLD_HITS
            self._lookups = self._found = 0

    def put(
        self,
        policy: object,
        key: Key,
        body: bytes,
        labels: tuple[str, str, tuple[tuple[str, str], ...]],
    ) -> bool:
        """Keep the answer `body` to the request of `key` decided under `policy` (`labels`: its
        kind, result and denials). False when it is not kept: a result that is not a decision,
        an answer too large, one whose bytes echo the uid beside its place or hold the
        request's name."""
        kind, result, denials = labels
        if result not in KEPT_RESULTS:
            return False
        before = _BEFORE_UID + key.uid.encode()
        after = body[len(before) :]
        if not body.startswith(before) or key.uid.encode() in after:
            return False
        if key.name is not None and key.name.encode() in after:
            return False
        cost = len(after) + ENTRY_OVERHEAD_BYTES
        if cost > min(MAX_ENTRY_BYTES, self.max_bytes) or self.max_entries <= 0:
            return False
        with self._lock:
            if policy is not self._policy:  # a new policy: nothing kept may answer for it
                self._entries.clear()
                self._bytes = 0
                self._policy = policy
            old = self._entries.pop(key.digest, None)
            if old is not None:
                self._bytes -= len(old.after_uid) + ENTRY_OVERHEAD_BYTES
            self._entries[key.digest] = KeptAnswer(after, kind, result, denials)
            self._bytes += cost
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= len(evicted.after_uid) + ENTRY_OVERHEAD_BYTES
        return True

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self._policy = None
