"""One simulation: trace -> admission -> every arm -> metrics, and what a reader should notice.

`simulate` is the one entry point the command, the benchmark and the tests use.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quotaguard.policy.model import TenantPolicy
from quotaguard.simulate.arm_metrics import ArmMetrics, arm_metrics
from quotaguard.simulate.arm_replay import ArmName, ArmRun, Setup, StaticBaseline, run_arm, setup
from quotaguard.simulate.arm_showback import simulation_showback
from quotaguard.simulate.arms import ARMS
from quotaguard.simulate.arrivals import AdmissionCache, arrivals
from quotaguard.simulate.bound import bound_utilization
from quotaguard.simulate.dra_hours import dra_json
from quotaguard.simulate.placement import Scoring
from quotaguard.simulate.preemption import PRESETS, SAMPLE_PRESET, Preemption
from quotaguard.simulate.scoring_comparison import ScoringComparison, compare_scoring
from quotaguard.simulate.trace import Trace

# (arm being run, fraction of that arm done)
Progress = Callable[[str, float], None]


@dataclass(frozen=True, slots=True)
class Capped:
    """A tenant that had work waiting for a class while its queue was at its max."""

    tenant: str
    class_name: str
    max: int
    seconds: float  # sampled time spent so
    idle_units: float  # mean distributable units of the class nobody used meanwhile


@dataclass(frozen=True, slots=True)
class Simulation:
    policy: TenantPolicy
    trace: Trace
    setup: Setup
    runs: Mapping[ArmName, ArmRun]  # in ARMS order
    metrics: Mapping[ArmName, ArmMetrics]
    cache: AdmissionCache
    bound: float = 1.0  # the most utilisation any arm could reach (bound.py)
    fluid_bound: float = 1.0  # the same if any GPU could serve any workload
    # per arm, the bound of the arms that run the pods as it does (written or admitted)
    arm_bounds: Mapping[ArmName, float] = field(default_factory=dict)
    # quotaguard's arm under the other scheduler scoring too (spread against pack)
    scoring_comparison: ScoringComparison | None = None

    @property
    def arms(self) -> tuple[ArmName, ...]:
        return tuple(self.metrics)

    @property
    def static(self) -> ArmMetrics:
        return self.metrics["static"]

    @property
    def dynamic(self) -> ArmMetrics:
        return self.metrics["dynamic"]

    @property
    def reference(self) -> ArmMetrics | None:
        """The hand-written pool: what dynamic quotas are weighed against."""
        return self.metrics.get("pool")

    def showback(self) -> dict[str, Any]:
        """The `showback` object of the JSON (simulate/arm_showback.py says which arm)."""
        return simulation_showback(
            self.policy, {arm: run.showback for arm, run in self.runs.items()}
        )

    def dra(self) -> dict[str, Any] | None:
        """The `dra` object of the JSON (simulate/dra_hours.py); None without DRA workloads."""
        return dra_json(self.setup, self.runs)

    def denial_rules(self) -> list[tuple[str, int]]:
        """Denied workloads by rule, most frequent first."""
        counts: Counter[str] = Counter()
        for arrival in self.setup.arrivals:
            if arrival.at < self.setup.horizon and not arrival.verdict.allowed:
                for rule in (arrival.verdict.rules or "denied").split(","):
                    counts[rule] += 1
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))

    def capped(self, arm: ArmName = "dynamic") -> list[Capped]:
        """Where a tenant's max, not capacity, kept its work waiting (longest first): samples
        with work of the tenant waiting for a class, its queue at its max, and distributable
        units of the class idle."""
        series = self.runs[arm].series
        found = []
        for class_name, row in self.setup.capacity.items():
            rows = [usage[class_name] for usage in series.usage.values() if class_name in usage]
            used_all = [sum(column) for column in zip(*rows, strict=True)]
            for tenant in self.policy.spec.tenants:
                quota = tenant.quota.get(class_name)
                usage = series.usage.get(tenant.name, {}).get(class_name)
                waiting = series.waiting_units.get(tenant.name, {}).get(class_name)
                if quota is None or quota.max is None or usage is None or waiting is None:
                    continue
                idle = _idle_at_max(quota.max, row.distributable, usage, waiting, used_all)
                if idle:
                    found.append(
                        Capped(
                            tenant=tenant.name,
                            class_name=class_name,
                            max=quota.max,
                            seconds=len(idle) * self.setup.interval,
                            idle_units=sum(idle) / len(idle),
                        )
                    )
        return sorted(found, key=lambda c: (-c.seconds, c.tenant, c.class_name))


def _idle_at_max(
    ceiling: int,
    distributable: int,
    usage: Sequence[float],
    waiting: Sequence[float],
    used_all: Sequence[float],
) -> list[float]:
    """Per sample with work waiting and the queue at its max: the class's idle units."""
    return [
        distributable - total
        for used, pending, total in zip(usage, waiting, used_all, strict=True)
        if pending > 0 and used >= ceiling and distributable > total
    ]


def simulate(
    policy: TenantPolicy,
    trace: Trace,
    *,
    static_baseline: StaticBaseline = "guarantees",
    preemption: Preemption = PRESETS[SAMPLE_PRESET],
    arms: Sequence[ArmName] = tuple(ARMS),
    scoring: Scoring = "LeastAllocated",
    progress: Progress | None = None,
    compare_scorings: bool = False,
) -> Simulation:
    """Run admission on the trace once, then every arm (in `ARMS` order), all with the same
    `preemption` on every queue and the same scheduler `scoring`; `compare_scorings` replays
    quotaguard's arm under the other scoring too (scoring_comparison.py)."""
    cache = AdmissionCache()
    shared = setup(
        policy,
        trace,
        arrivals(policy, trace, cache=cache),
        static_baseline=static_baseline,
        preemption=preemption,
        scoring=scoring,
    )
    runs: dict[ArmName, ArmRun] = {}
    for arm in (name for name in ARMS if name in arms):
        report = (lambda done, arm=arm: progress(arm, done)) if progress else None
        runs[arm] = run_arm(shared, arm, progress=report)
    metrics = {arm: arm_metrics(shared, run) for arm, run in runs.items()}
    bound = bound_utilization(shared, runs)
    comparison = compare_scoring(shared, runs, metrics) if compare_scorings else None
    return Simulation(
        policy,
        trace,
        shared,
        runs,
        metrics,
        cache,
        bound=bound.utilization,
        fluid_bound=bound.fluid,
        arm_bounds=bound.arms,
        scoring_comparison=comparison,
    )
