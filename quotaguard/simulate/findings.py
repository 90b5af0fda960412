"""What a reader should take away first: one sentence (utilisation before and after quotaguard
against the bound, and the biggest idle reason left), then a short list of findings.

The findings are the verdict's parts (verdict.py), one item each, with what the tenants'
guarantees were worth in quotaguard's arms against the pool (guarantees.py) after the
comparison with the pool.
"""

from __future__ import annotations

from collections.abc import Iterator

from quotaguard.simulate.arm_metrics import ArmMetrics
from quotaguard.simulate.guarantees import GuaranteeFigures
from quotaguard.simulate.simulation import Simulation
from quotaguard.simulate.verdict import (
    BASELINES,
    PARTS,
    distinct_arms,
    main_arm,
    quotaguard_arms,
)
from quotaguard.simulate.words import IDLE_LABELS, format_span, gpu_hours, percent

SAME_SHARE = 0.0005  # utilisation figures closer than this (0.05 points) show as one


def coinciding(simulation: Simulation) -> dict[str, tuple[str, ...]]:
    """Per arm, the arms whose GPU and useful utilisation are the same as its own (itself
    included, in ARMS order)."""
    figures = {
        arm: (metrics.overall.utilization, metrics.overall.useful_utilization)
        for arm, metrics in simulation.metrics.items()
    }
    return {
        arm: tuple(
            other
            for other, theirs in figures.items()
            if all(abs(a - b) < SAME_SHARE for a, b in zip(mine, theirs, strict=True))
        )
        for arm, mine in figures.items()
    }


def arm_group(simulation: Simulation, arm: str) -> str:
    """The arm's name, or its name and those it coincides with: "pool = dynamic"."""
    return " = ".join(coinciding(simulation)[arm])


def biggest_idle(metrics: ArmMetrics) -> tuple[str, float]:
    """The idle reason with the most GPU-seconds, and them."""
    kind = max(IDLE_LABELS, key=lambda name: metrics.idle.get(name, 0.0))
    return kind, metrics.idle.get(kind, 0.0)


def best_arm(simulation: Simulation) -> str:
    """quotaguard's arm with the highest GPU utilisation (the last arm when it has none)."""
    ours = quotaguard_arms(simulation) or list(simulation.arms)
    return max(ours, key=lambda arm: simulation.metrics[arm].overall.utilization)


def lead(simulation: Simulation) -> str:
    """The one sentence the page and the terminal open with."""
    arm = main_arm(simulation)
    after = simulation.metrics[arm].overall
    none = simulation.metrics.get("none")
    kind, seconds = biggest_idle(simulation.metrics[arm])
    share = f"{100 * after.utilization / simulation.bound:.0f}%" if simulation.bound else "all"
    before = (
        ""
        if none is None or arm == "none"
        else f" against {percent(none.overall.utilization)} without it"
        f" (kept busy: {percent(none.overall.useful_utilization)} → "
        f"{percent(after.useful_utilization)})"
    )
    return (
        f"With quotaguard ({arm_group(simulation, arm)}) GPU utilisation is "
        f"{percent(after.utilization)}{before}, {share} of the {percent(simulation.bound)} "
        f"no arm could pass; the biggest idle reason left is {IDLE_LABELS[kind]} "
        f"({gpu_hours(seconds)} GPU-hours)."
    )


def _close(ours: float, theirs: float, *, floor: float) -> bool:
    return abs(ours - theirs) <= max(floor, 0.05 * max(abs(ours), abs(theirs)))


def _versus(
    label: str, ours: float, theirs: float, shown: str, *, floor: float, higher_is_better: bool
) -> tuple[str, str]:
    """(the comparison in words, "better" / "worse" / "same")."""
    if _close(ours, theirs, floor=floor):
        return f"{label} {shown}", "same"
    better = (ours > theirs) == higher_is_better
    return f"{label} {shown}", "better" if better else "worse"


def guarantee_comparison(ours: GuaranteeFigures, pool: GuaranteeFigures) -> list[tuple[str, str]]:
    """Each guarantee figure of an arm against the pool: (words, better/worse/same)."""
    return [
        _versus(
            "guarantees restored within one interval",
            ours.kept,
            pool.kept,
            f"{percent(ours.kept)} of {ours.episodes} episodes against "
            f"{percent(pool.kept)} of {pool.episodes}",
            floor=0.02,
            higher_is_better=True,
        ),
        _versus(
            "p95 time to restore a guarantee",
            ours.restore_p95,
            pool.restore_p95,
            f"{format_span(ours.restore_p95)} against {format_span(pool.restore_p95)}",
            floor=60.0,
            higher_is_better=False,
        ),
        _versus(
            "mean wait of work within its tenant's guarantee",
            ours.guaranteed_mean_wait,
            pool.guaranteed_mean_wait,
            f"{format_span(ours.guaranteed_mean_wait)} against "
            f"{format_span(pool.guaranteed_mean_wait)}",
            floor=60.0,
            higher_is_better=False,
        ),
        _versus(
            "guaranteed GPU-hours lent while unused",
            ours.lent_gpu_seconds,
            pool.lent_gpu_seconds,
            f"{gpu_hours(ours.lent_gpu_seconds)} against {gpu_hours(pool.lent_gpu_seconds)}",
            floor=3600.0,
            higher_is_better=True,
        ),
        _versus(
            "weighted fairness over a day",
            ours.weighted_fairness,
            pool.weighted_fairness,
            f"{ours.weighted_fairness:.3f} against {pool.weighted_fairness:.3f}",
            floor=0.01,
            higher_is_better=True,
        ),
        _versus(
            "GPU-hours run within the fair shares",
            ours.fair_gpu_seconds,
            pool.fair_gpu_seconds,
            f"{gpu_hours(ours.fair_gpu_seconds)} against {gpu_hours(pool.fair_gpu_seconds)}",
            floor=3600.0,
            higher_is_better=True,
        ),
    ]


def guarantees(simulation: Simulation) -> Iterator[str]:
    """What quotaguard's arms do for the guarantees that the pool does not, said plainly
    either way."""
    pool = simulation.metrics.get("pool")
    if pool is None:
        return
    for arm, name in distinct_arms(simulation):
        compared = guarantee_comparison(simulation.metrics[arm].guarantees, pool.guarantees)
        said = "; ".join(words for words, _ in compared)
        tally = {kind: sum(found == kind for _, found in compared) for kind in ("better", "worse")}
        same = len(compared) - tally["better"] - tally["worse"]
        summary = f"better on {tally['better']} figures, worse on {tally['worse']}"
        if same:
            summary += f", and the pool is as good on {same}"
        yield f"Guarantees in the {name} against the pool ({summary}): {said}."


def findings(simulation: Simulation) -> list[str]:
    """The verdict as a short list: one item per part, the guarantees after the pool."""
    found = []
    for part in PARTS:
        said = " ".join(part(simulation))
        if part.__name__ == "bound":  # said per arm, as shares
            said = _bound_shares(simulation)
        elif part.__name__ == "idle":  # the table is below: the reasons, biggest first
            said = _idle_short(simulation)
        if said:
            found.append(said)
        if part.__name__ == "over_pool":
            found.extend(guarantees(simulation))
    return found


def _idle_line(metrics: ArmMetrics) -> str:
    kinds = sorted(IDLE_LABELS, key=lambda kind: -metrics.idle.get(kind, 0.0))
    return (
        ", ".join(
            f"{gpu_hours(metrics.idle[k])} {IDLE_LABELS[k]}" for k in kinds if metrics.idle.get(k)
        )
        or "none"
    )


def _idle_short(simulation: Simulation) -> str:
    arm = main_arm(simulation)
    metrics = simulation.metrics[arm]
    said = (
        f"GPU-hours not kept busy in the {arm} arm: {gpu_hours(sum(metrics.idle.values()))} "
        f"({_idle_line(metrics)})"
    )
    none = simulation.metrics.get("none")
    if none is not None and arm != "none":
        said += f"; without quotaguard {gpu_hours(sum(none.idle.values()))} ({_idle_line(none)})"
    return said + "."


def _bound_shares(simulation: Simulation) -> str:
    if not simulation.bound:
        return ""
    best = best_arm(simulation)
    groups = coinciding(simulation)
    shares = ", ".join(
        f"{' = '.join(groups[arm])} "
        f"{100 * simulation.metrics[arm].overall.utilization / simulation.bound:.0f}%"
        for arm in simulation.arms
        if groups[arm][0] == arm
    )
    baseline = " (a baseline)" if best in BASELINES else ""
    return (
        f"No arm could pass {percent(simulation.bound)} on this trace (the bound: demand, "
        f"capacity and the classes each workload may run on); share of it reached: {shares}; "
        f"the best of quotaguard's arms is {best}{baseline} at "
        f"{100 * simulation.metrics[best].overall.utilization / simulation.bound:.0f}%."
    )
