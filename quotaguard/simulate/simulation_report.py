"""What `quotaguard simulate` prints: the JSON of cli.md, or every arm side by side (and the
bound) in tables, then the verdict.

Every table has one column per arm of the simulation, in `ARMS` order: a new arm shows up
without code here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from quotaguard.quota.showback_report import format_lines
from quotaguard.simulate.arm_metrics import ArmMetrics, Outcome, metrics_json
from quotaguard.simulate.arms import ARMS
from quotaguard.simulate.dra_hours import dra_lines
from quotaguard.simulate.findings import findings, lead
from quotaguard.simulate.preemption import PRESETS, SAMPLE_PRESET, Preemption, preset_name
from quotaguard.simulate.simulation import Simulation
from quotaguard.simulate.verdict import verdict
from quotaguard.simulate.words import (
    HOUR,
    IDLE_LABELS,
    count,
    format_span,
    gpu_hours,
    hours,
    percent,
    table,
    wrap,
)

__all__ = ["format_span", "render_text", "result_json", "verdict"]


def preemption_json(preemption: Preemption) -> dict[str, Any]:
    """The setting every queue ran with, named and spelled as a ClusterQueue spells it."""
    found: dict[str, Any] = {
        "setting": preset_name(preemption) or "custom",
        "reclaimWithinCohort": preemption.reclaim_within_cohort,
        "withinClusterQueue": preemption.within_cluster_queue,
        "borrowWithinCohort": preemption.borrow_within_cohort,
    }
    if preemption.max_priority_threshold is not None:
        found["maxPriorityThreshold"] = preemption.max_priority_threshold
    return found


def result_json(simulation: Simulation) -> dict[str, Any]:
    """Every arm under its own key (`none`, `static`, `pool`, `dynamic`; M as cli.md
    describes it, plus more fields), `reference` (the pool again, for older readers),
    `bound` and the preemption setting."""
    document: dict[str, Any] = {
        arm: metrics_json(metrics) for arm, metrics in simulation.metrics.items()
    }
    if simulation.reference is not None:
        document["reference"] = {"baseline": "pool", **metrics_json(simulation.reference)}
    document["bound"] = {
        "utilization": round(simulation.bound, 4),
        "fluid": round(simulation.fluid_bound, 4),
        "arms": {arm: round(value, 4) for arm, value in simulation.arm_bounds.items()},
    }
    document["preemption"] = preemption_json(simulation.setup.preemption)
    document["scoring"] = simulation.setup.scoring
    if simulation.scoring_comparison is not None:
        document["scoringComparison"] = simulation.scoring_comparison.json()
    document["showback"] = simulation.showback()
    dra = simulation.dra()
    if dra is not None:
        document["dra"] = dra
    return document


STATIC_BASELINES = {
    "guarantees": "each queue's nominal quota = its guarantee, borrowing up to max "
    "(Kueue defaults; capacity above the guarantees is in no queue)",
    "pool": "as pool (--static pool)",
}


def _arm_lines(simulation: Simulation) -> list[str]:
    setup = simulation.setup
    width = max(len(arm) for arm in (*simulation.arms, "bound")) + 1
    lines = []
    for arm in simulation.arms:
        summary = ARMS[arm].summary if arm in ARMS else ""
        if arm == "static":
            summary = STATIC_BASELINES[setup.static_baseline]
        if ARMS.get(arm) is not None and ARMS[arm].controller is not None:
            mode = simulation.policy.spec.rebalance.mode
            applied = "" if mode == "apply" else f"; policy mode {mode}, simulated as apply"
            summary += f" ({format_span(setup.interval)}{applied})"
        lines.append(f"{arm + ':':<{width}} {summary}")
    bound = (
        "the most any arm could reach: demand, capacity and the classes each workload may "
        f"run on; no quotas, no nodes (any GPU for any workload: {percent(simulation.fluid_bound)})"
    )
    lines.append(f"{'bound:':<{width}} {bound}")
    return lines


def headline(simulation: Simulation) -> list[str]:
    setup, trace, policy = simulation.setup, simulation.trace, simulation.policy
    classes = ", ".join(
        f"{row.capacity} {name}" for name, row in setup.capacity.items() if row.capacity
    )
    main = simulation.metrics[simulation.arms[-1]].overall
    return [
        f"quotaguard simulate: policy {policy.name}, trace {trace.source}",
        f"{hours(setup.horizon)} simulated, {count(trace.size)} workloads "
        f"({count(main.denied)} denied by admission), "
        f"{setup.capacity_gpus:.0f} GPU equivalents on {count(len(setup.nodes))} nodes: "
        f"{classes}",
        *_arm_lines(simulation),
        f"preemption, in every arm: {preemption_line(setup.preemption)}",
        *(
            [simulation.scoring_comparison.sentence()]
            if simulation.scoring_comparison is not None
            else []
        ),
    ]


def preemption_line(preemption: Preemption) -> str:
    name = preset_name(preemption)
    sample = PRESETS[SAMPLE_PRESET]
    if not preemption.enabled:
        said = "never — admitted workloads always run to the end"
    else:
        said = (
            f"{name or 'custom'} — {preemption.describe()}; an evicted workload restarts "
            "from its last checkpoint (checkpointEvery) or from the beginning"
        )
    if preemption == sample:
        return f"{said} (as the sample ClusterQueues declare)"
    return f"{said} (the sample ClusterQueues declare {sample.describe()})"


Figure = Callable[[ArmMetrics], str]


def _overall(figure: Callable[[Outcome], str]) -> Figure:
    return lambda metrics: figure(metrics.overall)


SUMMARY: tuple[tuple[str, Figure], ...] = (
    ("GPU utilisation", _overall(lambda o: percent(o.utilization))),
    ("useful utilisation", _overall(lambda o: percent(o.useful_utilization))),
    ("mean wait", _overall(lambda o: format_span(o.mean_wait))),
    ("p95 wait", _overall(lambda o: format_span(o.p95_wait))),
    ("Jain fairness", lambda m: f"{m.jain_fairness:.3f}"),
    ("GPU-hours run", _overall(lambda o: f"{o.gpu_seconds / HOUR:,.0f}")),
    ("still waiting at end", _overall(lambda o: count(o.waiting))),
    ("unplaceable", _overall(lambda o: count(o.unplaceable))),
    ("fragmented GPU-hours", lambda m: gpu_hours(m.fragmented_gpu_seconds)),
    ("preempted", _overall(lambda o: count(o.preempted))),
    ("GPU-hours lost", _overall(lambda o: gpu_hours(o.lost_gpu_seconds))),
    ("denied", _overall(lambda o: count(o.denied))),
    ("guarantees restored in 1 interval", lambda m: percent(m.guarantees.kept)),
    ("p95 guarantee restore", lambda m: format_span(m.guarantees.restore_p95)),
    ("guaranteed work mean wait", lambda m: format_span(m.guarantees.guaranteed_mean_wait)),
    ("guaranteed GPU-hours lent", lambda m: gpu_hours(m.guarantees.lent_gpu_seconds)),
    ("weighted fairness", lambda m: f"{m.guarantees.weighted_fairness:.3f}"),
    ("fair GPU-hours", lambda m: gpu_hours(m.guarantees.fair_gpu_seconds)),
)
BOUNDED = {"GPU utilisation", "useful utilisation"}  # rows the bound caps


def summary_rows(simulation: Simulation) -> list[list[str]]:
    """One row per figure, one column per arm, then the bound."""
    arms = [simulation.metrics[arm] for arm in simulation.arms]
    rows = [["", *simulation.arms, "bound"]]
    for label, figure in SUMMARY:
        cap = percent(simulation.bound) if label in BOUNDED else ""
        rows.append([label, *(figure(metrics) for metrics in arms), cap])
    if any(metrics.layout_changes is not None for metrics in arms):
        rows.append(
            [
                "node layout changes",
                *(
                    "-" if metrics.layout_changes is None else count(metrics.layout_changes)
                    for metrics in arms
                ),
                "",
            ]
        )
    return rows


def idle_rows(simulation: Simulation) -> list[list[str]]:
    """Where the GPU-hours not kept busy went, one column per arm."""
    arms = [simulation.metrics[arm] for arm in simulation.arms]
    rows = [["idle GPU-hours", *simulation.arms]]
    for kind, label in IDLE_LABELS.items():
        rows.append([label, *(gpu_hours(m.idle.get(kind, 0.0)) for m in arms)])
    rows.append(["total", *(gpu_hours(sum(m.idle.values())) for m in arms)])
    return rows


TENANT: tuple[tuple[str, Callable[[Outcome], str]], ...] = (
    ("utilisation", lambda o: percent(o.utilization)),
    ("mean wait", lambda o: format_span(o.mean_wait)),
    ("p95 wait", lambda o: format_span(o.p95_wait)),
    ("demand served", lambda o: percent(o.served)),
    ("preempted", lambda o: count(o.preempted)),
    ("denied", lambda o: count(o.denied)),
)


def tenant_rows(simulation: Simulation) -> list[list[str]]:
    """Per tenant, one row per figure and one column per arm."""
    arms = [simulation.metrics[arm] for arm in simulation.arms]
    rows = [["tenant", "", *simulation.arms]]
    for name in sorted(arms[0].tenants):
        for index, (label, figure) in enumerate(TENANT):
            rows.append(
                [name if index == 0 else "", label, *(figure(m.tenants[name]) for m in arms)]
            )
    return rows


def finding_lines(simulation: Simulation) -> list[str]:
    """The findings as a bulleted list, wrapped."""
    lines = ["Findings:"]
    for said in findings(simulation):
        wrapped = wrap(said, width=94)
        lines.extend([f"- {wrapped[0]}", *(f"  {line}" for line in wrapped[1:])])
    return lines


def render_text(simulation: Simulation) -> str:
    lines = [*wrap(lead(simulation)), "", *headline(simulation)]
    for rows, left in (
        (summary_rows(simulation), 1),
        (idle_rows(simulation), 1),
        (tenant_rows(simulation), 2),
    ):
        lines.append("")
        lines.extend(table(rows, left=left))
    lines.extend(format_lines(simulation.showback()))
    lines.extend(dra_lines(simulation.dra()))
    lines.append("")
    lines.extend(finding_lines(simulation))
    return "\n".join(lines) + "\n"
