"""Exponential backoff with jitter, for retrying a failing API server without hammering it."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delays that double from `base` up to `cap`; each is drawn from its upper half.

    Half-jitter keeps a floor under every delay (a broken API server is not retried in a tight
    loop) while spreading replicas and watches that failed at the same moment.
    """

    base: float = 0.5
    cap: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    failures: int = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * 2.0 ** min(self.failures, 30))
        self.failures += 1
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.failures = 0
