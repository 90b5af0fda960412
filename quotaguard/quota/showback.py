"""Showback: who held the GPUs, who kept them busy, and what that cost.

Per tenant, class and GPU model, per day, in whole-GPU equivalents x hours (a MIG slice counts
slices/7 of a GPU, a shared unit its share of one):

* `allocated`: held by the tenant's running pods;
* `busy`: of that, kept busy, weighted by the GPUs' activity (DCGM; the simulator's `uses`);
* `idle`: allocated but not kept busy (`allocated - busy` where activity is known);
* `unobserved`: allocated with no activity known (no telemetry for the pod);

so `allocated = busy + idle + unobserved`. The cost is allocated GPU-hours x the policy's price
per GPU-hour of the class or GPU model (`spec.showback.pricePerGPUHour`); `idleCost` the same
for the idle hours.

Pure, one data path for the controller, `plan` and the simulator:

    holdings (what is allocated now) -> rates_of -> accumulate(totals, rates, start, seconds)

Days are whole multiples of 86400 s from the clock's zero: UTC days for the controller (epoch
seconds), simulated days for a trace (seconds from its start).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from quotaguard.policy.model import GpuClass, TenantPolicy
from quotaguard.policy.prices import model_of
from quotaguard.quota.cluster import ClusterSnapshot
from quotaguard.quota.demand import Activity, bound_pod_units

DAY = 86400.0
HOUR = 3600.0

Key = tuple[str, str, str]  # (tenant, class, GPU model)


@dataclass(frozen=True, slots=True)
class Holding:
    """GPUs one tenant holds now, of one class on one GPU model."""

    tenant: str
    class_name: str
    model: str
    gpus: float  # whole-GPU equivalents
    busy: float | None  # of those, kept busy; None when no activity is known


@dataclass(frozen=True, slots=True)
class Hours:
    """GPU-hours (or, as a rate, GPUs: GPU-hours per hour)."""

    allocated: float = 0.0
    busy: float = 0.0
    idle: float = 0.0
    unobserved: float = 0.0

    def __add__(self, other: Hours) -> Hours:
        return Hours(
            self.allocated + other.allocated,
            self.busy + other.busy,
            self.idle + other.idle,
            self.unobserved + other.unobserved,
        )

    def scaled(self, factor: float) -> Hours:
        return Hours(
            self.allocated * factor,
            self.busy * factor,
            self.idle * factor,
            self.unobserved * factor,
        )


# day index (floor(seconds / DAY)) -> (tenant, class, model) -> GPU-hours
Totals = Mapping[int, Mapping[Key, Hours]]


def rates_of(holdings: Iterable[Holding]) -> dict[Key, Hours]:
    """GPUs held now per tenant, class and model: the GPU-hours of one hour at this rate."""
    rates: dict[Key, Hours] = {}
    for holding in holdings:
        gpus = holding.gpus if math.isfinite(holding.gpus) else 0.0
        if gpus <= 0:
            continue
        if holding.busy is None or not math.isfinite(holding.busy):
            rate = Hours(allocated=gpus, unobserved=gpus)
        else:
            busy = min(gpus, max(0.0, holding.busy))
            rate = Hours(allocated=gpus, busy=busy, idle=gpus - busy)
        key = (holding.tenant, holding.class_name, holding.model)
        rates[key] = rates.get(key, Hours()) + rate
    return rates


def _day_parts(start: float, seconds: float) -> Iterator[tuple[int, float]]:
    """(day, seconds of it) for the span [start, start + seconds), cut at day boundaries."""
    end = start + seconds
    at = start
    while at < end:
        day = math.floor(at / DAY)
        cut = min(end, (day + 1) * DAY)
        if cut <= at:  # float rounding at a boundary: count the rest in the next day
            cut = min(end, math.nextafter(at, math.inf))
        yield day, cut - at
        at = cut


def accumulate(
    totals: Totals, rates: Mapping[Key, Hours], *, start: float, seconds: float
) -> dict[int, Mapping[Key, Hours]]:
    """`totals` plus `rates` held for `seconds` from `start`, split at day boundaries.

    A new mapping: `totals` is left as it is (the days not touched are shared, not copied)."""
    result: dict[int, Mapping[Key, Hours]] = dict(totals)
    if not (seconds > 0 and math.isfinite(seconds) and math.isfinite(start)) or not rates:
        return result
    for day, part in _day_parts(start, seconds):
        rows = dict(result.get(day, {}))
        for key, rate in rates.items():
            rows[key] = rows.get(key, Hours()) + rate.scaled(part / HOUR)
        result[day] = rows
    return result


def summed(totals: Totals) -> dict[Key, Hours]:
    """Every day's hours added up, per tenant, class and model."""
    found: dict[Key, Hours] = {}
    for rows in totals.values():
        for key, hours in rows.items():
            found[key] = found.get(key, Hours()) + hours
    return found


@dataclass(frozen=True, slots=True)
class Cost:
    price: float | None  # per whole GPU-hour
    cost: float | None  # allocated GPU-hours x price
    idle_cost: float | None  # idle GPU-hours x price


def cost_of(hours: Hours, price: float | None) -> Cost:
    if price is None:
        return Cost(None, None, None)
    return Cost(price, hours.allocated * price, hours.idle * price)


# -- what is held now ------------------------------------------------------------------------


def holdings_of(
    policy: TenantPolicy, snapshot: ClusterSnapshot, activity: Activity | None = None
) -> list[Holding]:
    """GPUs each tenant's bound pods hold, by class and the GPU model of their node, with the
    activity telemetry gives (`activity`: None or empty, no telemetry): per tenant, class and
    model, one holding of the pods telemetry saw and one of those it did not.

    Summed as the pods are walked (a cluster of 50,000 pods has a few hundred keys), and each
    node's model read once."""
    models: dict[str, str] = {}
    activity = activity or {}
    # (tenant, class, model) -> [units seen, units seen x percent busy, units not seen]
    sums: dict[Key, list[float]] = {}
    classes: dict[str, GpuClass] = {}
    labels = {node.name: node.labels for node in snapshot.nodes}
    for tenant, gpu_class, pod, units in bound_pod_units(policy, snapshot):
        node = pod.node_name or ""
        model = models.get(node)
        if model is None:
            model = models[node] = model_of(labels.get(node, {}))
        key = (tenant, gpu_class.name, model)
        found = sums.get(key)
        if found is None:
            found = sums[key] = [0.0, 0.0, 0.0]
            classes[gpu_class.name] = gpu_class
        seen = activity.get((pod.namespace, pod.name))
        if seen is None:
            found[2] += units
        else:
            found[0] += units
            found[1] += units * seen.mean_percent
    held = []
    for (tenant, class_name, model), (observed, busy, unobserved) in sums.items():
        share = float(classes[class_name].gpu_equivalent)
        if observed:
            held.append(Holding(tenant, class_name, model, observed * share, busy * share / 100))
        if unobserved:
            held.append(Holding(tenant, class_name, model, unobserved * share, None))
    return held


# -- the controller's running account ------------------------------------------------------

KEEP_DAYS = 31  # days the controller's report keeps (its metrics count since it started)


@dataclass(frozen=True, slots=True)
class Ledger:
    """GPU-hours the controller has counted: per day (the last KEEP_DAYS) and since it started
    (for the metrics, which must never go down)."""

    days: Totals = field(default_factory=dict)
    since_start: Mapping[Key, Hours] = field(default_factory=dict)
    started: float | None = None  # first step
    at: float | None = None  # last step


def advance(ledger: Ledger, holdings: Iterable[Holding], now: float, *, max_gap: float) -> Ledger:
    """The ledger after one more look at what is held: the allocations seen `now` count for
    the time since the last look, at most `max_gap` (a controller that was stopped, or could
    not see the cluster, does not bill the gap); the first look counts nothing."""
    rates = rates_of(holdings)
    if ledger.at is None or not math.isfinite(now):
        return Ledger(ledger.days, ledger.since_start, now, now)
    seconds = min(max(0.0, now - ledger.at), max(0.0, max_gap))
    days = accumulate(ledger.days, rates, start=now - seconds, seconds=seconds)
    if len(days) > KEEP_DAYS:
        days = {day: days[day] for day in sorted(days)[-KEEP_DAYS:]}
    since_start = dict(ledger.since_start)
    for key, rate in rates.items():
        since_start[key] = since_start.get(key, Hours()) + rate.scaled(seconds / HOUR)
    return Ledger(days, since_start, ledger.started, now)
