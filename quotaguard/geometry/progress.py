"""One node's layout change as plain data, and its transitions (pure: state and view in, state and
the node update out). The controller keeps the state on the node itself, in the annotation
`quotaguard.dev/layout-change`, so a new leader picks up where the last one stopped.

    start ──cordon──> draining ──GPU pods gone: relabel──> applying ──success + allocatable──> done
                        │ drainTimeout (or a pod on an idle-only node): uncordon, give up
                        │                     │ state failed, or changeTimeout
                        v                     v
                     (given up)            failed ──backoff──> applying the other layout
                                           (cordoned, out of capacity; source and target alternate)

mig-manager never evicts pods and needs the GPUs idle, so nothing here evicts either: a busy
node is only cordoned and waited for.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

from quotaguard.policy.migconfig import MIG_CONFIG_LABEL, MIG_STATE_LABEL

PROGRESS_ANNOTATION = "quotaguard.dev/layout-change"
CHANGED_AT_ANNOTATION = "quotaguard.dev/layout-changed-at"
BACKOFF_BASE = 300.0
BACKOFF_CAP = 3600.0

Phase = Literal["draining", "applying", "failed"]
Outcome = Literal["started", "relabelled", "succeeded", "rolled-back", "failed", "given-up"]


@dataclass(frozen=True, slots=True)
class Progress:
    source: str | None  # the layout before the change
    target: str
    phase: Phase
    since: float  # when the phase began
    cordoned: bool  # cordoned by quotaguard: uncordoned when done
    applying: str = ""  # the layout asked for now: the target, or the source when rolling back
    attempts: int = 0  # relabels so far
    retry_at: float | None = None
    detail: str = ""

    def to_annotation(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_annotation(text: str | None) -> Progress | None:
        """The progress an annotation holds; None when absent or unreadable (someone edited
        it): the node is then treated as not changing."""
        if not text:
            return None
        try:
            raw = json.loads(text)
            progress = Progress(**raw)
        except (ValueError, TypeError):
            return None
        if progress.phase not in ("draining", "applying", "failed"):
            return None
        return progress


@dataclass(frozen=True, slots=True)
class Observed:
    """What the controller sees of the node this interval."""

    unschedulable: bool
    gpu_pods: int  # active pods holding GPUs on the node
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]  # GPU resources only


@dataclass(frozen=True, slots=True)
class Limits:
    drain: Literal["wait", "idle-only"]
    drain_timeout: float
    change_timeout: float


@dataclass(frozen=True, slots=True)
class Update:
    """What to write to the node: labels (None removes one), the cordon, the progress
    annotation (None: leave, `clear`: remove), the time of the last completed change, an
    Event and the outcome for the metrics. An empty Update writes nothing."""

    labels: Mapping[str, str | None] = field(default_factory=dict)
    unschedulable: bool | None = None
    progress: Progress | None = None
    clear: bool = False
    changed_at: float | None = None
    event: tuple[str, str, str] | None = None  # reason, message, type (Normal | Warning)
    outcome: Outcome | None = None

    @property
    def empty(self) -> bool:
        return self == Update()


LabelsOf = Mapping[str, Mapping[str, str | None]]  # layout name -> the labels that ask for it


def backoff(attempts: int) -> float:
    return min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** max(0, attempts - 1))


def start(source: str | None, target: str, observed: Observed, now: float) -> Update:
    """Begin a change: cordon (unless already unschedulable by quotaguard's own earlier hand)."""
    progress = Progress(source, target, "draining", now, cordoned=not observed.unschedulable)
    message = f"changing layout {source or 'unknown'} -> {target}: cordoned, waiting for GPU pods"
    return Update(
        unschedulable=True if progress.cordoned else None,
        progress=progress,
        event=("LayoutChangeStarted", message, "Normal"),
        outcome="started",
    )


def _relabel(progress: Progress, layout: str, labels_of: LabelsOf, now: float) -> Update:
    changed = replace(
        progress,
        phase="applying",
        since=now,
        applying=layout,
        attempts=progress.attempts + 1,
        retry_at=None,
    )
    return Update(labels=dict(labels_of.get(layout, {})), progress=changed, outcome="relabelled")


def _finish(
    progress: Progress, now: float, *, reason: str, message: str, outcome: Outcome
) -> Update:
    return Update(
        unschedulable=False if progress.cordoned else None,
        clear=True,
        changed_at=now if outcome in ("succeeded", "rolled-back") else None,
        event=(reason, message, "Normal" if outcome == "succeeded" else "Warning"),
        outcome=outcome,
    )


def applied(observed: Observed, layout: str, expected: Mapping[str, int]) -> bool:
    """The layout is in place: mig-manager reports success for it (or, for a layout it does not
    handle, nothing is pending) and the node offers exactly what the layout gives."""
    labels = observed.labels
    state = labels.get(MIG_STATE_LABEL)
    if labels.get(MIG_CONFIG_LABEL) == layout and state != "success":
        return False
    if state in ("pending", "rebooting", "failed"):
        return False
    offered = {r: n for r, n in observed.allocatable.items() if n}
    return offered == {r: n for r, n in expected.items() if n}


def step(
    progress: Progress,
    observed: Observed,
    *,
    limits: Limits,
    labels_of: LabelsOf,
    expected: Mapping[str, Mapping[str, int]],
    now: float,
) -> Update:
    """The next move of a change in progress. `expected`: layout -> the GPU resources the node
    offers in it (target and source)."""
    if progress.phase == "draining":
        return _draining(progress, observed, limits, labels_of, now)
    if progress.phase == "applying":
        return _applying(progress, observed, limits, expected, now)
    return _failed(progress, labels_of, now)


def _draining(
    progress: Progress, observed: Observed, limits: Limits, labels_of: LabelsOf, now: float
) -> Update:
    if observed.gpu_pods == 0:
        return _relabel(progress, progress.target, labels_of, now)
    if limits.drain == "idle-only" or now - progress.since >= limits.drain_timeout:
        why = (
            "a GPU pod started before the cordon (drain idle-only)"
            if limits.drain == "idle-only"
            else f"GPU pods still running after drainTimeout {limits.drain_timeout:g}s"
        )
        return _finish(
            progress,
            now,
            reason="LayoutChangeAbandoned",
            message=f"layout {progress.target} not applied: {why}; uncordoned",
            outcome="given-up",
        )
    return Update()


def _applying(
    progress: Progress,
    observed: Observed,
    limits: Limits,
    expected: Mapping[str, Mapping[str, int]],
    now: float,
) -> Update:
    layout = progress.applying or progress.target
    state = observed.labels.get(MIG_STATE_LABEL)
    if applied(observed, layout, expected.get(layout, {})):
        if layout == progress.target:
            return _finish(
                progress,
                now,
                reason="LayoutChanged",
                message=f"layout {progress.source or 'unknown'} -> {layout} applied",
                outcome="succeeded",
            )
        return _finish(
            progress,
            now,
            reason="LayoutRolledBack",
            message=f"layout {progress.target} failed; back on {layout}",
            outcome="rolled-back",
        )
    timed_out = now - progress.since >= limits.change_timeout
    if state != "failed" and not timed_out:
        return Update()
    why = (
        "mig-manager reports failed"
        if state == "failed"
        else f"not applied within changeTimeout {limits.change_timeout:g}s"
    )
    wait = backoff(progress.attempts)
    failed = replace(progress, phase="failed", since=now, retry_at=now + wait, detail=why)
    message = (
        f"layout {layout} on this node: {why}; kept cordoned and out of capacity, "
        f"retrying in {wait:g}s"
    )
    return Update(
        progress=failed, event=("LayoutChangeFailed", message, "Warning"), outcome="failed"
    )


def _failed(progress: Progress, labels_of: LabelsOf, now: float) -> Update:
    """After the backoff, ask for the other layout of the pair (a relabel is what makes
    mig-manager try again); the first retry rolls back to where the node came from."""
    if progress.retry_at is not None and now < progress.retry_at:
        return Update()
    last = progress.applying or progress.target
    other = progress.source if last == progress.target else progress.target
    if other is None or other not in labels_of:
        other = progress.target
    return _relabel(progress, other, labels_of, now)


def changed_at(annotations: Mapping[str, str]) -> float | None:
    value = annotations.get(CHANGED_AT_ANNOTATION)
    try:
        moment = float(value) if value is not None else None
    except ValueError:
        return None
    return moment if moment is not None and math.isfinite(moment) else None
