"""One simulation: trace -> admission -> both arms -> metrics, and what a reader should notice.

`simulate` is the one entry point the command, the benchmark and the tests use.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from quotaguard.policy.model import TenantPolicy
from quotaguard.simulate.arrivals import AdmissionCache, arrivals
from quotaguard.simulate.engine import ArmName, ArmRun, Setup, StaticBaseline, run_arm, setup
from quotaguard.simulate.metrics import ArmMetrics, arm_metrics
from quotaguard.simulate.preemption import PRESETS, SAMPLE_PRESET, Preemption
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
    runs: Mapping[ArmName, ArmRun]
    metrics: Mapping[ArmName, ArmMetrics]
    # the static arm with the other baseline, to tell what hand-written quotas could do
    reference: ArmMetrics | None
    cache: AdmissionCache

    @property
    def static(self) -> ArmMetrics:
        return self.metrics["static"]

    @property
    def dynamic(self) -> ArmMetrics:
        return self.metrics["dynamic"]

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
                idle = [
                    row.distributable - total
                    for used, pending, total in zip(usage, waiting, used_all, strict=True)
                    if pending > 0 and used >= quota.max and row.distributable > total
                ]
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


def simulate(
    policy: TenantPolicy,
    trace: Trace,
    *,
    static_baseline: StaticBaseline = "guarantees",
    preemption: Preemption = PRESETS[SAMPLE_PRESET],
    reference: bool = True,
    progress: Progress | None = None,
) -> Simulation:
    """Run admission on the trace once, then the static and dynamic arms (and, with
    `reference`, the static arm with the other baseline), all with the same `preemption` on
    every queue."""
    cache = AdmissionCache()
    shared = setup(
        policy,
        trace,
        arrivals(policy, trace, cache=cache),
        static_baseline=static_baseline,
        preemption=preemption,
    )
    runs: dict[ArmName, ArmRun] = {}
    for arm in ("static", "dynamic"):
        report = (lambda done, arm=arm: progress(arm, done)) if progress else None
        runs[arm] = run_arm(shared, arm, progress=report)
    metrics = {arm: arm_metrics(shared, run) for arm, run in runs.items()}
    other: ArmMetrics | None = None
    if reference:
        baseline: StaticBaseline = "pool" if static_baseline == "guarantees" else "guarantees"
        alternative = Setup(
            policy=shared.policy,
            arrivals=shared.arrivals,
            capacity=shared.capacity,
            horizon=shared.horizon,
            interval=shared.interval,
            static_baseline=baseline,
            preemption=preemption,
        )
        reference_progress = (lambda done: progress("reference", done)) if progress else None
        other = arm_metrics(
            alternative, run_arm(alternative, "static", progress=reference_progress)
        )
    return Simulation(policy, trace, shared, runs, metrics, other, cache)
