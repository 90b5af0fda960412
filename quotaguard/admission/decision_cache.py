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
namespace, name and request kind, and the endpoint (mutate or validate). The policy in force is
not hashed but held: the kept answers belong to one policy object, and a request under any
other (a reload, a swap) empties the cache first, so no answer outlives its policy. State read
from the cluster (TrainJob runtimes, DRA objects) is never part of a kept answer: the caller
counts those reads (`cluster_reads`), and an answer whose deciding read any is not kept.

Bounded: at most `max_entries` answers and `max_bytes` of them (LRU); an answer over
`MAX_ENTRY_BYTES` is not kept. Thread-safe: large reviews are decided in worker threads.
"""

from __future__ import annotations

import hashlib
import re
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
# Every AdmissionReview answer begins so (`reviews.build_response`, `answers._refusal`).
_BEFORE_UID: Final = b'{"apiVersion":"%s","kind":"%s","response":{"uid":"' % (
    API_VERSION.encode(),
    KIND.encode(),
)
# Printable ASCII but `"` and `\`: written as is by both of `reviews.encode_json`'s encoders, so
# splicing it between kept bytes gives the bytes deciding would. Real uids are UUIDs; any other
# uid is decided every time.
_SPLICEABLE: Final = re.compile(r"[ !#-\[\]-~]+")
_UNREAD_FIELDS: Final = frozenset({"uid", "dryRun", "userInfo", "name"})
_NAMED: Final = ("a name",)  # in the key in place of a name that is spliceable
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
    if not isinstance(uid, str) or _SPLICEABLE.fullmatch(uid) is None:
        return None
    read = {field: value for field, value in request.items() if field not in _UNREAD_FIELDS}
    username = username_of(request.get("userInfo"))
    name = request.get("name")
    named = isinstance(name, str) and _SPLICEABLE.fullmatch(name) is not None
    read["name"] = _NAMED if named else name
    try:
        packed = _pack(
            (operation, document.get("apiVersion"), document.get("kind"), username, read)
        )
    except (TypeError, ValueError, OverflowError):  # a lone surrogate, an int past 64 bits
        return None
    return Key(hashlib.sha256(packed).digest(), uid, name if named else None)


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
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.cluster_reads = cluster_reads
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

    def get(self, policy: object, key: Key) -> KeptAnswer | None:
        with self._lock:
            if policy is not self._policy:
                return None
            kept = self._entries.get(key.digest)
            if kept is not None:
                self._entries.move_to_end(key.digest)
            return kept

    def put(self, policy: object, key: Key, body: bytes, kept: KeptAnswer) -> bool:
        """Keep the answer `body` to the request of `key` decided under `policy` (`kept`: its
        labels; its bytes are taken from `body`). False when it is not kept: a result that is
        not a decision, an answer too large, one whose bytes echo the uid beside its place or
        hold the request's name."""
        if kept.result not in KEPT_RESULTS:
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
            self._entries[key.digest] = KeptAnswer(after, kept.kind, kept.result, kept.denials)
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
