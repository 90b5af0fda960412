"""The paragraph under the tables: what quotaguard adds over no quotaguard and over a
hand-written pool, where the idle GPU-hours went, then who gains, what preemption did and
what to act on.

`none`, `static` and `pool` are the baselines; every other arm of the simulation (in `ARMS`
order) is one of quotaguard's, told in the same words, so a new arm needs no code here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from quotaguard.simulate.arm_metrics import ArmMetrics, Outcome
from quotaguard.simulate.simulation import Simulation
from quotaguard.simulate.words import (
    HOUR,
    IDLE_LABELS,
    MINUTE,
    count,
    format_span,
    gpu_hours,
    percent,
    points,
)

BASELINES = ("none", "static", "pool")


def quotaguard_arms(simulation: Simulation) -> list[str]:
    """The arms that are quotaguard's quota control (not a baseline), in ARMS order."""
    return [arm for arm in simulation.arms if arm not in BASELINES]


def distinct_arms(simulation: Simulation) -> list[tuple[str, str]]:
    """quotaguard's arms, each with how to name it: an arm whose figures are all those of an
    earlier one is named with it ("dynamic and geometry arms, the same figures") and not
    again."""
    found: list[tuple[str, list[str]]] = []
    for arm in quotaguard_arms(simulation):
        metrics = simulation.metrics[arm]
        twin = next(
            (
                names
                for first, names in found
                if simulation.metrics[first].overall == metrics.overall
                and simulation.metrics[first].guarantees == metrics.guarantees
            ),
            None,
        )
        if twin is None:
            found.append((arm, [arm]))
        else:
            twin.append(arm)
    return [
        (
            arm,
            f"{arm} arm"
            if len(names) == 1
            else f"{', '.join(names[:-1])} and {names[-1]} arms (the same figures)",
        )
        for arm, names in found
    ]


def main_arm(simulation: Simulation) -> str:
    """The arm the verdict tells about in detail: the last of quotaguard's (the most it
    does), or the last arm run."""
    return (quotaguard_arms(simulation) or list(simulation.arms))[-1]


def _better_wait(before: float, after: float) -> bool:
    return before > after * 1.1 and before - after > MINUTE


def _over_none(none: Outcome, arm: str, outcome: Outcome) -> str:
    extra = (outcome.gpu_seconds - none.gpu_seconds) / HOUR
    more = f"{extra:,.0f} more" if extra >= 0 else f"{-extra:,.0f} fewer"
    return (
        f"{percent(outcome.utilization)} in the {arm} "
        f"({points(none.utilization, outcome.utilization)}, {more} GPU-hours of work run; "
        f"useful utilisation {percent(none.useful_utilization)} → "
        f"{percent(outcome.useful_utilization)}; p95 wait {format_span(none.p95_wait)} → "
        f"{format_span(outcome.p95_wait)})"
    )


def over_none(simulation: Simulation) -> Iterator[str]:
    """What quotaguard adds over the same cluster without it."""
    none = simulation.metrics.get("none")
    ours = quotaguard_arms(simulation)
    if none is None or not ours:
        return
    said = [
        _over_none(none.overall, name, simulation.metrics[arm].overall)
        for arm, name in distinct_arms(simulation)
    ]
    yield (
        "Against no quotaguard (pods as written, whole GPUs; queues at their guarantees: "
        f"{percent(none.overall.utilization)} GPU utilisation), quotaguard reaches "
        + "; and ".join(said)
        + "."
    )


def versus_pool(pool: Outcome, outcome: Outcome) -> tuple[list[str], list[str]]:
    """What an arm gains and costs against the static pool, in words."""
    gains: list[str] = []
    costs: list[str] = []
    change = outcome.utilization - pool.utilization
    if abs(change) >= 0.01:
        (gains if change > 0 else costs).append(
            f"{points(pool.utilization, outcome.utilization)} utilisation"
        )
    for label, before, after in (
        ("p95 wait", pool.p95_wait, outcome.p95_wait),
        ("mean wait", pool.mean_wait, outcome.mean_wait),
    ):
        if _better_wait(before, after):
            gains.append(f"a {label} of {format_span(after)} instead of {format_span(before)}")
        elif _better_wait(after, before):
            costs.append(f"a {label} of {format_span(after)} instead of {format_span(before)}")
    lost = gpu_hours(abs(outcome.lost_gpu_seconds - pool.lost_gpu_seconds))
    if outcome.preempted > pool.preempted:
        costs.append(
            f"{count(outcome.preempted - pool.preempted)} more preemptions ({lost} GPU-hours "
            "more work thrown away)"
        )
    elif outcome.preempted < pool.preempted:
        gains.append(
            f"{count(pool.preempted - outcome.preempted)} fewer preemptions ({lost} GPU-hours "
            "less work thrown away)"
        )
    return gains, costs


def over_pool(simulation: Simulation) -> Iterator[str]:
    """What quotaguard adds over the best a hand-written configuration does."""
    pool = simulation.metrics.get("pool")
    if pool is None:
        return
    for arm, name in distinct_arms(simulation):
        outcome = simulation.metrics[arm].overall
        gains, costs = versus_pool(pool.overall, outcome)
        sentence = (
            "Against hand-written quotas that keep the guarantees and put the rest of the "
            f"capacity in a shared cohort pool ({percent(pool.overall.utilization)}), the "
            f"{name} {'adds' if name.endswith('arm') else 'add'} "
            + (" and ".join(gains) if gains else "nothing measurable")
            + ", at the cost of "
            + (" and ".join(costs) if costs else "nothing measurable")
            + "."
        )
        if abs(outcome.utilization - pool.overall.utilization) < 0.01:
            sentence += (
                " So most of what it adds over no quotaguard a hand-written pool adds too; "
                "what the controller changes is mostly who waits."
            )
        yield sentence


def bound(simulation: Simulation) -> Iterator[str]:
    arm = main_arm(simulation)
    reached = simulation.metrics[arm].overall.utilization
    own = simulation.arm_bounds.get(arm, simulation.bound)
    share = f", {100 * reached / own:.0f}% of what its pods allow" if own else ""
    yield (
        f"No arm could pass {percent(simulation.bound)} on this trace (the bound: demand, "
        "capacity and the classes each workload may run on; no quotas, no nodes); the "
        f"{arm} arm reaches {percent(reached)}{share}."
    )


IDLE_WORDS = {
    "fragmented": "fragmentation (a waiting workload fitted the idle total but no node)",
    "wrongSize": "wrong slice sizes (idle slices, shared or whole GPUs no waiting work asks for)",
    "heldIdle": "held but idle (allocated, not kept busy: uses below 1)",
    "noDemand": "no demand (nothing waiting)",
    "waiting": "work queued for the class but over its quota or bigger than what was idle",
}


def _idle_parts(metrics: ArmMetrics, words: dict[str, str]) -> tuple[float, str]:
    total = sum(metrics.idle.values())
    parts = [f"{gpu_hours(metrics.idle.get(kind, 0.0))} {words[kind]}" for kind in IDLE_LABELS]
    return total, ", ".join(parts)


def idle(simulation: Simulation) -> Iterator[str]:
    """Where the GPU-hours not kept busy went, in quotaguard's arm and without it."""
    arm = main_arm(simulation)
    total, parts = _idle_parts(simulation.metrics[arm], IDLE_WORDS)
    yield f"The {gpu_hours(total)} GPU-hours not kept busy in the {arm} arm went to {parts}."
    none = simulation.metrics.get("none")
    if none is not None and arm != "none":
        total, parts = _idle_parts(none, IDLE_LABELS)
        yield f"Without quotaguard, {gpu_hours(total)} went to {parts}."


def _wait_change(before: Outcome, after: Outcome) -> str:
    return f"mean wait {format_span(before.mean_wait)} → {format_span(after.mean_wait)}"


def tenants(simulation: Simulation) -> Iterator[str]:
    """Whose waiting quotaguard's arm shortens or lengthens, against the first baseline."""
    arm = main_arm(simulation)
    base = next((name for name in BASELINES if name in simulation.metrics), None)
    if base is None or base == arm:
        return
    before, after = simulation.metrics[base].tenants, simulation.metrics[arm].tenants
    names = sorted(before.keys() & after.keys())
    gains = [n for n in names if _better_wait(before[n].mean_wait, after[n].mean_wait)]
    losses = [n for n in names if _better_wait(after[n].mean_wait, before[n].mean_wait)]
    for verb, found in (("shrinks", gains), ("grows", losses)):
        if found:
            listed = ", ".join(f"{n} ({_wait_change(before[n], after[n])})" for n in found)
            yield f"Against {base}, waiting in the {arm} arm {verb} for {listed}."
    if not gains and not losses:
        yield f"Against {base}, no tenant's mean wait in the {arm} arm changes by more than 10%."


def _evictions(outcome: Outcome) -> str:
    if not outcome.preempted:
        return "no workload"
    return (
        f"{count(outcome.preempted)} workload{'s' if outcome.preempted > 1 else ''} "
        f"({gpu_hours(outcome.lost_gpu_seconds)} GPU-hours of work thrown away)"
    )


def _victims(metrics: ArmMetrics) -> str:
    found = sorted(
        ((row.preempted, name) for name, row in metrics.tenants.items() if row.preempted),
        reverse=True,
    )
    return ", ".join(f"{name} {n}" for n, name in found)


def preemption(simulation: Simulation) -> Iterator[str]:
    """What preemption did in each arm."""
    setting = simulation.setup.preemption
    if not setting.enabled:
        yield (
            "Preemption is off: quota lent to another queue comes back only as the borrower's "
            "workloads finish."
        )
        return
    arm = main_arm(simulation)
    per_arm = ", ".join(
        f"{_evictions(metrics.overall)} in the {name} arm"
        for name, metrics in simulation.metrics.items()
    )
    victims = _victims(simulation.metrics[arm])
    yield (
        f"Preemption ({setting.describe()}) evicted {per_arm}"
        + (f" (victims in the {arm} arm: {victims})" if victims else "")
        + "."
    )
    pool = simulation.metrics.get("pool")
    ours = simulation.metrics[arm].overall
    if pool is not None and ours.preempted > pool.overall.preempted == 0:
        yield (
            "A pool's capacity above the guarantees belongs to no queue, so nobody reclaims "
            "it; the controller hands it to the queues as nominal quota that follows demand, "
            "and when demand moves, the queue it moved to takes it back by eviction."
        )


def chance(simulation: Simulation) -> Iterator[str]:
    pool = simulation.metrics.get("pool")
    if pool is None:
        return
    for arm in quotaguard_arms(simulation):
        gains, costs = versus_pool(pool.overall, simulation.metrics[arm].overall)
        if any("wait" in said for said in gains + costs):
            yield (
                "Waiting times of one trace move by chance as much as by policy: replay a few "
                "days before acting on a difference in waits alone."
            )
            return


def capped(simulation: Simulation) -> Iterator[str]:
    arm = main_arm(simulation)
    if arm not in quotaguard_arms(simulation):
        return
    for found in simulation.capped(arm)[:2]:
        yield (
            f"{found.tenant} had {found.class_name} work waiting for "
            f"{format_span(found.seconds)} while at its max of {found.max}, with "
            f"{found.idle_units:.0f} distributable {found.class_name} idle on average "
            "meanwhile: raising that max would put them to work."
        )


def denials(simulation: Simulation) -> Iterator[str]:
    rules = simulation.denial_rules()
    if rules:
        denied = simulation.metrics[main_arm(simulation)].overall.denied
        listed = ", ".join(f"{rule} x{n}" for rule, n in rules[:3])
        yield (
            f"{count(denied)} workloads were denied by admission ({listed}); they would "
            "be refused in the cluster too, so fix them where they are written."
        )


def _per_arm(simulation: Simulation, figure: Callable[[Outcome], int]) -> str:
    return ", ".join(
        f"{count(figure(metrics.overall))} {name}" for name, metrics in simulation.metrics.items()
    )


def leftovers(simulation: Simulation) -> Iterator[str]:
    outcomes = [metrics.overall for metrics in simulation.metrics.values()]
    if any(outcome.waiting for outcome in outcomes):
        yield (
            f"Workloads still waiting at the end ({_per_arm(simulation, lambda o: o.waiting)}) "
            "count with the wait they had so far."
        )
    if any(outcome.never_fits for outcome in outcomes):
        yield (
            "Workloads that can never be admitted "
            f"({_per_arm(simulation, lambda o: o.never_fits)}: bigger than their queue could "
            "ever be admitted with in that arm, by its max, by what the cohort can lend it, "
            "or by the cluster) are left out of waiting times."
        )


PARTS: tuple[Callable[[Simulation], Iterator[str]], ...] = (
    over_none,
    over_pool,
    bound,
    idle,
    tenants,
    preemption,
    chance,
    capped,
    denials,
    leftovers,
)


def verdict(simulation: Simulation) -> str:
    """One paragraph: what quotaguard adds over none and over pool, where the idle GPU-hours
    went, who gains, what preemption did, and what to act on."""
    return " ".join(sentence for part in PARTS for sentence in part(simulation))
