"""Which GPU-hours of a simulation went to DRA workloads, per tenant and class.

A platform team moving from the device plugin to DRA asks how much of each tenant's GPU time
already comes through claims (or through extended resources DRA serves), and on which classes:
what must move, and what quota the DRA resource names need. The figures are the hours of the
arm whose showback the report shows (`arm_showback.showback_arm`), each workload counted from
its last (re)start for as long as it ran within the span, plus the work kept from evicted runs,
as the arm's metrics count them, by the classes admission gave it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quotaguard.simulate.arm_replay import ArmRun, Setup
from quotaguard.simulate.arm_showback import showback_arm
from quotaguard.simulate.arms import ARMS
from quotaguard.simulate.arrivals import Arrival

HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class ClassHours:
    tenant: str
    class_name: str
    gpu_hours: float  # every workload of the tenant on the class
    dra_gpu_hours: float  # of which through DRA


def _ran_seconds(setup: Setup, run: ArmRun, arrival: Arrival) -> float:
    start = run.admitted_at.get(arrival.id)
    kept = run.kept.get(arrival.id, 0.0)
    if start is None:
        return kept
    return kept + max(0.0, min(start + arrival.duration - kept, setup.horizon) - start)


def class_hours(setup: Setup, run: ArmRun) -> list[ClassHours]:
    """GPU-hours per tenant and class of one arm's run, and how many of them were DRA."""
    arm = ARMS.get(run.name)
    classes = setup.policy.classes_by_name
    totals: dict[tuple[str, str], list[float]] = {}
    for arrival in setup.arrivals:
        verdict = arm.verdict(arrival) if arm is not None else arrival.verdict
        if arrival.tenant is None or not verdict.allowed or not verdict.request:
            continue
        seconds = _ran_seconds(setup, run, arrival)
        if seconds <= 0:
            continue
        for name, units in verdict.request:
            gpu_class = classes.get(name)
            if gpu_class is None:
                continue
            hours = units * float(gpu_class.gpu_equivalent) * seconds / HOUR
            found = totals.setdefault((arrival.tenant, name), [0.0, 0.0])
            found[0] += hours
            found[1] += hours if arrival.dra else 0.0
    return [
        ClassHours(tenant, name, all_hours, dra)
        for (tenant, name), (all_hours, dra) in sorted(totals.items())
    ]


def dra_json(setup: Setup, runs: Mapping[str, ArmRun]) -> dict[str, Any] | None:
    """The `dra` object of `simulate -o json`; None when no workload of the trace is DRA."""
    if not any(arrival.dra for arrival in setup.arrivals):
        return None
    arm = showback_arm(setup.policy, tuple(runs))
    rows = class_hours(setup, runs[arm]) if arm is not None else []
    return {
        "arm": arm,
        "gpuHours": round(sum(r.gpu_hours for r in rows), 3),
        "draGPUHours": round(sum(r.dra_gpu_hours for r in rows), 3),
        "workloads": sum(1 for arrival in setup.arrivals if arrival.dra),
        "classes": [
            {
                "tenant": r.tenant,
                "class": r.class_name,
                "gpuHours": round(r.gpu_hours, 3),
                "draGPUHours": round(r.dra_gpu_hours, 3),
            }
            for r in rows
        ],
    }


def dra_lines(found: Mapping[str, Any] | None) -> list[str]:
    """The terminal's lines: the DRA share overall, then per tenant and class."""
    if found is None:
        return []
    lines = [
        "",
        f"GPU-hours through DRA (arm {found['arm']}): {found['draGPUHours']:g} of "
        f"{found['gpuHours']:g}{_share(found['draGPUHours'], found['gpuHours'])}:",
    ]
    for row in found["classes"]:
        lines.append(
            f"  {row['tenant']} {row['class']}: {row['draGPUHours']:g} of {row['gpuHours']:g}"
            f"{_share(row['draGPUHours'], row['gpuHours'])}"
        )
    return lines


def _share(part: float, whole: float) -> str:
    return f" ({part / whole:.0%})" if whole else ""
