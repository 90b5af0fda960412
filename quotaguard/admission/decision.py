"""What admission decided about one object: allowed or denied, and the patch that goes with it.

Denials are values, not exceptions: a bad object is an answer (403), a bad request is a
`BadReview` (400). The two never mix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Required, TypedDict

DENIED_CODE = 403

Rule = Literal[
    "gpu-value",  # a GPU amount that is not a positive whole number
    "requests-only",  # a GPU resource set in requests but not in limits
    "requests-limits",  # requests != limits for a GPU resource
    "class-not-allowed",  # a class (or class hint) the tenant does not allow, or no class at all
    "max-gpus-per-pod",  # more whole-GPU equivalents than the tenant's maxGPUsPerPod
    "shared-units",  # more than one unit of a shared (time-sliced) class in one container
    "two-classes",  # two GPU classes in one container
    "queue-isolation",  # a queue that belongs to another tenant
    "queue-not-allowed",  # a queue no tenant owns (default, the parent) and not in extraQueues
    "scheduler-not-allowed",  # a schedulerName other than the backend's or allowedSchedulers
    "unmatched-namespace",  # GPUs in a namespace no tenant owns, with unmatchedNamespaces: deny
    "owner-not-controller",  # owned by a kind Kueue manages, created by other than its controller
    "undecided-template",  # GPU requests quotaguard did not decide (an update, a new ReplicaSet)
    "node-selector-conflict",  # the pod's nodeSelector contradicts its class's nodeSelector
    "gpu-not-governed",  # a GPU no class counts: HAMi shares, another vendor's, KAI annotations
    "runtime-unreadable",  # a TrainJob's runtime admission cannot read
    "claim-unresolved",  # a DRA claim whose template, claim or DeviceClass cannot be found
    "kueue-hold-lifted",  # Kueue's gate or suspend lifted off a GPU workload by other than Kueue
]


class PatchOp(TypedDict, total=False):
    """One RFC 6902 operation (admission only emits add, remove and replace)."""

    op: Required[Literal["add", "remove", "replace"]]
    path: Required[str]
    value: Any


@dataclass(frozen=True, slots=True)
class Denial:
    """One reason an object is refused; `message` says what was asked, what is allowed and
    what to do."""

    rule: Rule
    message: str


_NO_AUDIT: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool = True
    patch: tuple[PatchOp, ...] = ()
    warnings: tuple[str, ...] = ()
    denials: tuple[Denial, ...] = ()
    audit: Mapping[str, str] = field(default_factory=lambda: _NO_AUDIT)

    @property
    def code(self) -> int:
        return 200 if self.allowed else DENIED_CODE

    @property
    def message(self) -> str:
        """Every denial in one message, so a user fixes all of them in one go."""
        if len(self.denials) == 1:
            return self.denials[0].message
        messages = [d.message for d in self.denials]
        # One tenant prefix for all of them, not one per clause.
        who = messages[0][: messages[0].find(": ") + 2] if messages[0].startswith("tenant ") else ""
        if who and all(m.startswith(who) for m in messages):
            messages = [m[len(who) :] for m in messages]
        return who + " ".join(f"({n}) {m}" for n, m in enumerate(messages, start=1))

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(denial.rule for denial in self.denials)


ALLOWED = Decision()


def deny(
    denials: list[Denial] | tuple[Denial, ...],
    *,
    warnings: tuple[str, ...] = (),
    audit: Mapping[str, str] = _NO_AUDIT,
) -> Decision:
    unique = tuple(dict.fromkeys(denials))  # two templates can break a rule the same way
    rules = ",".join(dict.fromkeys(denial.rule for denial in unique))
    return Decision(
        allowed=False,
        denials=unique,
        warnings=warnings,
        audit={**audit, "denied": rules},
    )


def combine(mutation: Decision, validation: Decision) -> Decision:
    """Mutation then validation of the mutated object, as the API server would run them."""
    if not mutation.allowed:
        return mutation
    return Decision(
        allowed=validation.allowed,
        patch=mutation.patch if validation.allowed else (),
        warnings=mutation.warnings + validation.warnings,
        denials=validation.denials,
        audit={**mutation.audit, **validation.audit},
    )
