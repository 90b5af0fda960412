"""A Kueue cohort's configuration as the queue model takes it: each ClusterQueue's quotas per
GPU class (nominal, borrowing and lending limits), fair-sharing weight, queueing strategy and
preemption, and the quota the cohort itself holds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from quotaguard.simulate.preemption import NEVER, Preemption

Strategy = Literal["BestEffortFIFO", "StrictFIFO"]
INFINITE = float("inf")


@dataclass(frozen=True, slots=True)
class Quota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @property
    def own(self) -> int:
        """The part of nominal that is never lent."""
        if self.lending_limit is None:
            return 0
        return max(0, self.nominal - self.lending_limit)

    @property
    def lendable(self) -> int:
        return self.nominal - self.own

    @property
    def ceiling(self) -> float:
        return INFINITE if self.borrowing_limit is None else self.nominal + self.borrowing_limit


@dataclass(frozen=True, slots=True)
class QueueConfig:
    name: str
    quotas: Mapping[str, Quota]  # class -> quota; a class not listed cannot be used
    weight: float = 1.0
    strategy: Strategy = "BestEffortFIFO"
    preemption: Preemption = NEVER
    # flavorFungibility.whenCanBorrow: TryNextFlavor (False: MayStopSearch, Kueue's default)
    borrow_next: bool = False


@dataclass(frozen=True, slots=True)
class CohortConfig:
    queues: tuple[QueueConfig, ...]
    # class -> resource name, to take the dominant share over resources (as Kueue does)
    resources: Mapping[str, str]
    # class -> quota the cohort itself holds, lendable to every queue
    pool: Mapping[str, int] = field(default_factory=dict)


def most_admissible(cohort: CohortConfig, queue_name: str, class_name: str) -> float:
    """The most units of a class a queue could ever be admitted with under this configuration,
    whatever the other queues use: no more than its nominal plus its borrowing limit, and no
    more than its nominal plus all the cohort could lend it (the other queues' lendable
    quota and the cohort's pool). Quota only, not the cluster."""
    own = next((q for q in cohort.queues if q.name == queue_name), None)
    quota = own.quotas.get(class_name) if own is not None else None
    if quota is None:
        return 0
    others = sum(
        q.quotas[class_name].lendable
        for q in cohort.queues
        if q.name != queue_name and class_name in q.quotas
    )
    return min(quota.ceiling, quota.nominal + others + cohort.pool.get(class_name, 0))
