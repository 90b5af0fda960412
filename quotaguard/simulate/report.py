"""What `quotaguard simulate` prints: the JSON of cli.md, or a side-by-side table and a verdict."""

from __future__ import annotations

from typing import Any

from quotaguard.simulate.metrics import ArmMetrics, Outcome, metrics_json
from quotaguard.simulate.preemption import PRESETS, SAMPLE_PRESET, Preemption, preset_name
from quotaguard.simulate.simulation import Simulation

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0


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
    document["bound"] = {"utilization": round(simulation.bound, 4)}
    document["preemption"] = preemption_json(simulation.setup.preemption)
    document["scoring"] = simulation.setup.scoring
    return document


def format_span(seconds: float) -> str:
    """A waiting time people read: 45s, 22m, 3h10m, 1d4h."""
    seconds = max(0.0, seconds)
    if seconds < MINUTE:
        return f"{seconds:.0f}s"
    minutes = round(seconds / MINUTE)
    if minutes < 60:
        return f"{minutes}m"
    if seconds < DAY:
        hours, rest = divmod(minutes, 60)
        return f"{hours}h{rest:02d}m"
    days, rest = divmod(round(seconds / HOUR), 24)
    return f"{days}d{rest}h"


def _hours(seconds: float) -> str:
    return f"{seconds / HOUR:g}h" if seconds % HOUR == 0 else format_span(seconds)


def _signed_span(seconds: float, zero: str = "±0") -> str:
    if abs(seconds) < 1:
        return zero
    return ("+" if seconds > 0 else "-") + format_span(abs(seconds))


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def _points(before: float, after: float, zero: str = "±0") -> str:
    change = 100 * (after - before)
    return zero if abs(change) < 0.05 else f"{change:+.1f} pts"


def _difference(before: float, after: float) -> str:
    change = after - before
    return "±0" if abs(change) < 0.0005 else f"{change:+.3f}"


def _count(value: int) -> str:
    return f"{value:,}"


def _gpu_hours(seconds: float) -> str:
    hours = seconds / HOUR
    return f"{hours:,.0f}" if hours >= 10 else f"{hours:.2g}" if hours else "0"


def _table(rows: list[list[str]], *, right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def _arrow(before: str, after: str) -> str:
    return before if before == after else f"{before} → {after}"


def headline(simulation: Simulation) -> list[str]:
    setup, trace, policy = simulation.setup, simulation.trace, simulation.policy
    classes = ", ".join(
        f"{row.capacity} {name}" for name, row in setup.capacity.items() if row.capacity
    )
    denied = simulation.static.overall.denied
    baseline = {
        "guarantees": "each queue's nominal quota = its guarantee, borrowing up to max "
        "(Kueue defaults; capacity above the guarantees is in no queue)",
        "pool": "guarantees never lent, the rest of the capacity a cohort pool any queue "
        "borrows from up to its max",
    }[setup.static_baseline]
    mode = policy.spec.rebalance.mode
    applied = "" if mode == "apply" else f" (policy mode {mode}; simulated as apply)"
    return [
        f"quotaguard simulate: policy {policy.name}, trace {trace.source}",
        f"{_hours(setup.horizon)} simulated, {_count(trace.size)} workloads "
        f"({_count(denied)} denied by admission), "
        f"{setup.capacity_gpus:.0f} GPU equivalents: {classes}",
        f"static:  {baseline}",
        f"dynamic: the quota controller re-plans every {format_span(setup.interval)}{applied}",
        f"preemption, in every arm: {preemption_line(setup.preemption)}",
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


def summary_rows(static: ArmMetrics, dynamic: ArmMetrics) -> list[list[str]]:
    a, b = static.overall, dynamic.overall
    return [
        ["", "static", "dynamic", "change"],
        ["GPU utilisation", _percent(a.utilization), _percent(b.utilization),
         _points(a.utilization, b.utilization)],
        ["mean wait", format_span(a.mean_wait), format_span(b.mean_wait),
         _signed_span(b.mean_wait - a.mean_wait)],
        ["p95 wait", format_span(a.p95_wait), format_span(b.p95_wait),
         _signed_span(b.p95_wait - a.p95_wait)],
        ["Jain fairness", f"{static.jain_fairness:.3f}", f"{dynamic.jain_fairness:.3f}",
         _difference(static.jain_fairness, dynamic.jain_fairness)],
        ["GPU-hours run", f"{a.gpu_seconds / HOUR:,.0f}", f"{b.gpu_seconds / HOUR:,.0f}",
         f"{(b.gpu_seconds - a.gpu_seconds) / HOUR:+,.0f}"],
        ["still waiting at end", _count(a.waiting), _count(b.waiting),
         f"{b.waiting - a.waiting:+,}"],
        ["preempted", _count(a.preempted), _count(b.preempted),
         f"{b.preempted - a.preempted:+,}" if b.preempted != a.preempted else "±0"],
        ["GPU-hours lost", _gpu_hours(a.lost_gpu_seconds), _gpu_hours(b.lost_gpu_seconds),
         _signed_hours(b.lost_gpu_seconds - a.lost_gpu_seconds)],
        ["denied", _count(a.denied), _count(b.denied), ""],
    ]  # fmt: skip


def _signed_hours(seconds: float) -> str:
    if abs(seconds) < 0.005 * HOUR:
        return "±0"
    return ("+" if seconds > 0 else "-") + _gpu_hours(abs(seconds))


def tenant_rows(static: ArmMetrics, dynamic: ArmMetrics) -> list[list[str]]:
    rows = [
        ["tenant", "utilisation", "mean wait", "p95 wait", "demand served", "preempted", "denied"]
    ]
    for name in sorted(static.tenants):
        a, b = static.tenants[name], dynamic.tenants[name]
        rows.append(
            [
                name,
                _arrow(_percent(a.utilization), _percent(b.utilization)),
                _arrow(format_span(a.mean_wait), format_span(b.mean_wait)),
                _arrow(format_span(a.p95_wait), format_span(b.p95_wait)),
                _arrow(_percent(a.served), _percent(b.served)),
                _arrow(_count(a.preempted), _count(b.preempted)),
                _count(a.denied),
            ]
        )
    return rows


def _worse(a: Outcome, b: Outcome) -> bool:
    return b.mean_wait > a.mean_wait * 1.1 and b.mean_wait - a.mean_wait > MINUTE


def _better(a: Outcome, b: Outcome) -> bool:
    return a.mean_wait > b.mean_wait * 1.1 and a.mean_wait - b.mean_wait > MINUTE


def verdict(simulation: Simulation) -> str:
    """One paragraph: what changes, who gains, who pays, what the static setup could do, and
    what to act on."""
    static, dynamic = simulation.static, simulation.dynamic
    a, b = static.overall, dynamic.overall
    sentences = []
    extra = (b.gpu_seconds - a.gpu_seconds) / HOUR
    if b.utilization - a.utilization >= 0.01:
        first = (
            f"Dynamic quotas raise GPU utilisation from {_percent(a.utilization)} to "
            f"{_percent(b.utilization)} ({extra:,.0f} more GPU-hours of work run)"
        )
    elif a.utilization - b.utilization >= 0.01:
        first = (
            f"Dynamic quotas lower GPU utilisation from {_percent(a.utilization)} to "
            f"{_percent(b.utilization)} ({-extra:,.0f} GPU-hours less work run)"
        )
    else:
        first = (
            f"GPU utilisation is about the same in both arms ({_percent(a.utilization)} "
            f"static, {_percent(b.utilization)} dynamic)"
        )
    if abs(b.p95_wait - a.p95_wait) < MINUTE:
        first += f"; the p95 wait stays at {format_span(b.p95_wait)}"
    else:
        verb = "falls" if b.p95_wait < a.p95_wait else "rises"
        first += (
            f"; the p95 wait {verb} from {format_span(a.p95_wait)} to {format_span(b.p95_wait)}"
        )
    sentences.append(first + ".")
    gains = [n for n in sorted(static.tenants) if _better(static.tenants[n], dynamic.tenants[n])]
    losses = [n for n in sorted(static.tenants) if _worse(static.tenants[n], dynamic.tenants[n])]

    def change(name: str) -> str:
        x, y = static.tenants[name], dynamic.tenants[name]
        return f"{name} (mean wait {format_span(x.mean_wait)} → {format_span(y.mean_wait)})"

    if gains:
        sentences.append(f"Waiting shrinks for {', '.join(change(n) for n in gains)}.")
    if losses:
        sentences.append(f"It grows for {', '.join(change(n) for n in losses)}.")
    if not gains and not losses:
        sentences.append("No tenant's mean wait changes by more than 10%.")
    reference = simulation.reference
    if reference is not None:
        r = reference.overall
        if simulation.setup.static_baseline == "guarantees":
            sentences.append(
                "For an honest comparison: hand-written quotas that keep the same guarantees "
                "and put the rest of the capacity in a shared cohort pool would reach "
                f"{_percent(r.utilization)} utilisation with a p95 wait of "
                f"{format_span(r.p95_wait)}; against that, dynamic quotas change "
                f"utilisation by {_points(r.utilization, b.utilization, 'nothing')} and the p95 "
                f"wait by {_signed_span(b.p95_wait - r.p95_wait, 'nothing')}, so "
                + (
                    "most of the gain comes from lending the capacity above the guarantees "
                    "at all, and what the controller adds is mostly who waits."
                    if abs(b.utilization - r.utilization) < 0.01
                    else "the controller adds to what a hand-written pool gives."
                )
            )
        else:
            sentences.append(
                "Quotas set to the guarantees alone would reach only "
                f"{_percent(r.utilization)} utilisation (p95 wait {format_span(r.p95_wait)})."
            )
    sentences.extend(preemption_sentences(simulation))
    for capped in simulation.capped()[:2]:
        sentences.append(
            f"{capped.tenant} had {capped.class_name} work waiting for "
            f"{format_span(capped.seconds)} while at its max of {capped.max}, with "
            f"{capped.idle_units:.0f} distributable {capped.class_name} idle on average "
            "meanwhile: raising that max would put them to work."
        )
    rules = simulation.denial_rules()
    if rules:
        listed = ", ".join(f"{rule} x{count}" for rule, count in rules[:3])
        sentences.append(
            f"{_count(a.denied)} workloads were denied by admission ({listed}); they would "
            "be refused in the cluster too, so fix them where they are written."
        )
    if a.waiting or b.waiting:
        sentences.append(
            f"Workloads still waiting at the end ({_count(a.waiting)} static, "
            f"{_count(b.waiting)} dynamic) count with the wait they had so far."
        )
    if a.never_fits or b.never_fits:
        sentences.append(
            f"Workloads that can never be admitted ({_count(a.never_fits)} static, "
            f"{_count(b.never_fits)} dynamic: bigger than their queue could ever be admitted "
            "with in that arm, by its max, by what the cohort can lend it, or by the cluster) "
            "are left out of waiting times."
        )
    return " ".join(sentences)


def _evictions(outcome: Outcome) -> str:
    if not outcome.preempted:
        return "no workload"
    return (
        f"{_count(outcome.preempted)} workload{'s' if outcome.preempted > 1 else ''} "
        f"({_gpu_hours(outcome.lost_gpu_seconds)} GPU-hours of work thrown away)"
    )


def _victims(metrics: ArmMetrics) -> str:
    found = sorted(
        ((row.preempted, name) for name, row in metrics.tenants.items() if row.preempted),
        reverse=True,
    )
    return ", ".join(f"{name} {count}" for count, name in found)


def _versus_pool(pool: Outcome, dynamic: Outcome) -> tuple[list[str], list[str]]:
    """What dynamic quotas gain and cost against the static pool, in words."""
    gains: list[str] = []
    costs: list[str] = []
    change = dynamic.utilization - pool.utilization
    if abs(change) >= 0.01:
        (gains if change > 0 else costs).append(
            f"{_points(pool.utilization, dynamic.utilization)} utilisation"
        )
    for label, before, after in (
        ("p95 wait", pool.p95_wait, dynamic.p95_wait),
        ("mean wait", pool.mean_wait, dynamic.mean_wait),
    ):
        if _better_wait(before, after):
            gains.append(f"a {label} of {format_span(after)} instead of {format_span(before)}")
        elif _better_wait(after, before):
            costs.append(f"a {label} of {format_span(after)} instead of {format_span(before)}")
    lost = _gpu_hours(abs(dynamic.lost_gpu_seconds - pool.lost_gpu_seconds))
    if dynamic.preempted > pool.preempted:
        costs.append(
            f"{_count(dynamic.preempted - pool.preempted)} more preemptions ({lost} GPU-hours "
            "more work thrown away)"
        )
    elif dynamic.preempted < pool.preempted:
        gains.append(
            f"{_count(pool.preempted - dynamic.preempted)} fewer preemptions ({lost} GPU-hours "
            "less work thrown away)"
        )
    return gains, costs


def _better_wait(before: float, after: float) -> bool:
    return before > after * 1.1 and before - after > MINUTE


def preemption_sentences(simulation: Simulation) -> list[str]:
    """What preemption did in each arm and, with it, what dynamic quotas add over a pool."""
    setup = simulation.setup
    static, dynamic = simulation.static, simulation.dynamic
    a, b = static.overall, dynamic.overall
    if not setup.preemption.enabled:
        return [
            "Preemption is off: quota lent to another queue comes back only as the borrower's "
            "workloads finish."
        ]
    sentences = [
        f"Preemption ({setup.preemption.describe()}) evicted {_evictions(a)} in the static "
        f"arm and {_evictions(b)} in the dynamic arm"
        + (f" (victims: {_victims(dynamic)})" if b.preempted else "")
        + "."
    ]
    if setup.static_baseline == "pool":
        pool = a
    elif simulation.reference is not None:
        pool = simulation.reference.overall
        sentences.append(f"The static pool evicted {_evictions(pool)}.")
    else:
        return sentences
    gains, costs = _versus_pool(pool, b)
    explain = ""
    if b.preempted > pool.preempted and pool.preempted == 0:
        explain = (
            " A pool's capacity above the guarantees belongs to no queue, so nobody reclaims "
            "it; the controller hands it to the queues as nominal quota that follows demand, "
            "and when demand moves, the queue it moved to takes it back by eviction."
        )
    sentences.append(
        "So, with preemption on, what dynamic quotas add over a static pool is "
        + (" and ".join(gains) if gains else "nothing measurable")
        + ", at the cost of "
        + (" and ".join(costs) if costs else "nothing measurable")
        + "."
        + explain
    )
    if any("wait" in said for said in gains + costs):
        sentences.append(
            "Waiting times of one trace move by chance as much as by policy: replay a few "
            "days before acting on a difference in waits alone."
        )
    return sentences


def _wrap(text: str, width: int = 96) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


def render_text(simulation: Simulation) -> str:
    static, dynamic = simulation.static, simulation.dynamic
    lines = headline(simulation)
    lines.append("")
    lines.extend(_table(summary_rows(static, dynamic), right={1, 2, 3}))
    lines.append("")
    lines.extend(_table(tenant_rows(static, dynamic), right={5}))
    lines.append("")
    lines.extend(_wrap(verdict(simulation)))
    return "\n".join(lines) + "\n"
