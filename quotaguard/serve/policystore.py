"""The policy in force for a running process, reloaded when its file changes.

In a cluster the file is a mounted ConfigMap: kubelet writes a new timestamped directory and swaps
the `..data` symlink, so the path never changes but what it resolves to does. The store follows
symlinks on every poll and compares (resolved path, inode, size, mtime) and the SHA-256 of the
content; polling every ~2 s is portable where inotify is not, and reading a small file that often
costs nothing. A changed file that does not load is refused: logged with every FILE:LINE:COLUMN
problem, counted, and the last good policy stays in force.

Readers take `store.policy` once per decision and use that object throughout: a policy is
immutable, so a reload never changes a decision half-way.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from quotaguard.kube.documents import POLICY, MiB
from quotaguard.metrics.serve_metrics import (
    POLICY_GENERATION,
    POLICY_RELOAD_FAILURES,
    POLICY_RELOADS,
)
from quotaguard.policy.loader import load_policy_text
from quotaguard.policy.model import TenantPolicy
from quotaguard.policy.problems import LocatedProblem, PolicyInvalid

log = logging.getLogger("quotaguard.policy")

DEFAULT_POLL_INTERVAL = 2.0

PolicyListener = Callable[[TenantPolicy, int], None]


class PolicyNotLoaded(RuntimeError):
    """No policy has been loaded successfully yet."""


@dataclass(frozen=True, slots=True)
class FileStamp:
    """What a poll saw of the policy file: where the path led and what was there."""

    resolved: str
    inode: int
    size: int
    mtime_ns: int
    sha256: str


@dataclass(frozen=True, slots=True)
class _Read:
    stamp: FileStamp
    data: bytes


@dataclass(frozen=True, slots=True)
class _Loaded:
    stamp: FileStamp
    policy: TenantPolicy


@dataclass(frozen=True, slots=True)
class _Refused:
    stamp: FileStamp | None
    reason: str  # "invalid" | "unreadable"
    detail: str
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Unchanged:
    stamp: FileStamp


_Outcome = _Loaded | _Refused | _Unchanged


class PolicyStore:
    """The last good TenantPolicy of one file, its generation, and whether one is loaded at all.

    Usable synchronously (`load`, `reload_if_changed`) and as an asyncio task (`watch`).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._policy: TenantPolicy | None = None
        self._generation = 0
        self._stamp: FileStamp | None = None
        # The content last looked at, good or bad: a refused file is reported once, not per poll.
        self._seen_sha256: str | None = None
        self._last_error: str | None = None
        self._listeners: list[PolicyListener] = []

    # -- reading the state -------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._policy is not None

    @property
    def policy(self) -> TenantPolicy:
        """The policy in force; `PolicyNotLoaded` before the first successful load."""
        if self._policy is None:
            raise PolicyNotLoaded(f"no policy loaded from {self.path} yet")
        return self._policy

    @property
    def generation(self) -> int:
        """0 before the first load, then +1 for every policy put in force."""
        return self._generation

    @property
    def stamp(self) -> FileStamp | None:
        """The file as it was when the policy in force was read."""
        return self._stamp

    @property
    def last_error(self) -> str | None:
        """Why the most recent changed file was refused; None once a good one loads."""
        return self._last_error

    def add_listener(self, listener: PolicyListener) -> None:
        """Call `listener(policy, generation)` after every policy put in force (on the caller's
        thread or event loop); an exception in a listener is logged, never propagated."""
        self._listeners.append(listener)

    # -- loading -----------------------------------------------------------------------------
    def load(self) -> TenantPolicy:
        """Load the file now, whatever was seen before.

        For start-up: raises `OSError` when unreadable and `PolicyInvalid` when wrong, and changes
        nothing then. Counts and logs like a reload when it succeeds.
        """
        read = self._read()
        policy = self._parse(read)
        self._install(_Loaded(read.stamp, policy))
        return policy

    def reload_if_changed(self) -> bool:
        """Poll once; True when a new policy was put in force."""
        return self._apply(self._check())

    async def watch(self, interval: float = DEFAULT_POLL_INTERVAL) -> None:
        """Poll forever (until cancelled). Reading and parsing run in a worker thread so a large
        policy never stalls the event loop; the switch itself happens on the loop."""
        while True:
            await asyncio.sleep(interval)
            try:
                outcome = await asyncio.to_thread(self._check)
                self._apply(outcome)
            except Exception:
                log.exception("policy poll failed", extra={"file": str(self.path)})

    # -- internals ---------------------------------------------------------------------------
    def _read(self) -> _Read:
        resolved = self.path.resolve(strict=True)
        with open(resolved, "rb") as file:
            stat = os.fstat(file.fileno())
            # One byte past the limit is enough for the loader to refuse it as too large.
            data = file.read(POLICY.max_bytes + 1)
        stamp = FileStamp(
            resolved=str(resolved),
            inode=stat.st_ino,
            size=stat.st_size,
            mtime_ns=stat.st_mtime_ns,
            sha256=hashlib.sha256(data).hexdigest(),
        )
        return _Read(stamp, data)

    def _parse(self, read: _Read) -> TenantPolicy:
        # Problems name the configured path, not kubelet's timestamped directory behind it.
        file = str(self.path)
        if len(read.data) > POLICY.max_bytes:
            problem = LocatedProblem(file, 1, 1, (), f"larger than {POLICY.max_bytes // MiB} MiB")
            raise PolicyInvalid([problem], unparsable=True)
        try:
            text = read.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            problem = LocatedProblem(file, 1, 1, (), f"not UTF-8 text: {exc.reason}")
            raise PolicyInvalid([problem]) from exc
        return load_policy_text(text, file)

    def _check(self) -> _Outcome:
        """Read, compare and parse, without touching the store's state (safe in a thread)."""
        try:
            read = self._read()
        except OSError as exc:
            return _Refused(None, "unreadable", f"{type(exc).__name__}: {exc.strerror or exc}")
        in_force = self._stamp.sha256 if self._stamp is not None else None
        if read.stamp.sha256 in (self._seen_sha256, in_force):
            return _Unchanged(read.stamp)
        try:
            return _Loaded(read.stamp, self._parse(read))
        except PolicyInvalid as exc:
            return _Refused(read.stamp, "invalid", "policy refused", _problem_lines(exc))
        except Exception as exc:
            detail = f"policy refused: {type(exc).__name__}: {exc}"[:300]
            return _Refused(read.stamp, "invalid", detail)

    def _apply(self, outcome: _Outcome) -> bool:
        if isinstance(outcome, _Unchanged):
            if self._stamp is not None and outcome.stamp.sha256 == self._stamp.sha256:
                # The content in force, perhaps under a new inode, after a read error or after
                # a refused file was put back: no new generation, no error any more.
                self._stamp = outcome.stamp
                self._seen_sha256 = outcome.stamp.sha256
                self._last_error = None
            return False
        if isinstance(outcome, _Refused):
            self._refuse(outcome)
            return False
        self._install(outcome)
        return True

    def _refuse(self, refused: _Refused) -> None:
        detail = refused.detail
        if refused.stamp is not None:
            self._seen_sha256 = refused.stamp.sha256
        elif detail == self._last_error:
            return  # the same unreadable file, polled again
        self._last_error = detail
        POLICY_RELOAD_FAILURES.labels(reason=refused.reason).inc()
        log.error(
            "%s; keeping generation %d",
            detail,
            self._generation,
            extra={
                "file": str(self.path),
                "reason": refused.reason,
                "problems": list(refused.problems),
                "generation": self._generation,
                "sha256": refused.stamp.sha256 if refused.stamp else None,
            },
        )

    def _install(self, loaded: _Loaded) -> None:
        self._policy = loaded.policy
        self._stamp = loaded.stamp
        self._seen_sha256 = loaded.stamp.sha256
        self._last_error = None
        self._generation += 1
        POLICY_RELOADS.inc()
        POLICY_GENERATION.set(self._generation)
        log.info(
            "policy %s in force (generation %d)",
            loaded.policy.name,
            self._generation,
            extra={
                "file": str(self.path),
                "resolved": loaded.stamp.resolved,
                "sha256": loaded.stamp.sha256,
                "generation": self._generation,
            },
        )
        for listener in list(self._listeners):
            try:
                listener(loaded.policy, self._generation)
            except Exception:
                log.exception("policy listener failed", extra={"generation": self._generation})


def _problem_lines(exc: PolicyInvalid) -> tuple[str, ...]:
    return tuple(str(problem) for problem in exc.errors) or (str(exc),)
