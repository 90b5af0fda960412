"""What each fleet arm achieved: the `fleet` object of `simulate`'s JSON and its terminal lines.

Utilisation is over the fleet's capacity time (every worker's whole-GPU equivalents over the
span), from each worker's own figures (`arm_metrics` on the arrivals that ran there). Waits run
from arrival (on the manager, or on the worker it was created on) to placement; still waiting
at the end: the wait so far. Workloads no worker could ever place are left out (`neverFits`).
"Within guarantee": the tenant's fleet usage at the last sample plus the request at most its
fleet guarantee in every class it asks for. Guarantee restore: episodes of a tenant with work
waiting anywhere (manager or workers) and fleet usage below its guarantee, as for one cluster
(`guarantees.restore_episodes`).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from quotaguard.simulate.arm_metrics import ArmMetrics, arm_metrics, percentile
from quotaguard.simulate.arrivals import Arrival
from quotaguard.simulate.fleet_replay import (
    FLEET_ARMS,
    FleetArmName,
    FleetRun,
    FleetSetup,
    distributable,
    fleet_setup,
    run_fleet,
)
from quotaguard.simulate.guarantees import restore_episodes
from quotaguard.simulate.setup import Setup
from quotaguard.simulate.trace import Trace
from quotaguard.simulate.words import format_span, percent

NOTES = (
    "MultiKueue dispatch is modelled as immediate: no network latency, no time for the worker's "
    "copy of the Workload to be created.",
    "Dispatch gives a workload to the first worker, in the trace's order, whose ClusterQueue "
    "admits it (else the first whose nominal quota has room for it); MultiKueue's own "
    "dispatchers (AllAtOnce, Incremental) and their per-workload ordering are not modelled.",
    "The manager's own ClusterQueue admission is not modelled: its quota is the sum of the "
    "workers' (planned) or each tenant's fleet quota (static).",
    "A workload evicted on a worker is requeued on that worker, not sent back to the manager.",
    "The fleet planner sees what waits on the manager and what the workers admitted, as the "
    "fleet controller does: work waiting on a worker it was created on directly is not demand.",
    "A worker whose API server is down (clusters[].down) keeps running what it runs and keeps "
    "its quotas; nothing is dispatched to it or created on it meanwhile.",
)


@dataclass(frozen=True, slots=True)
class FleetFigures:
    arm: str
    utilization: float
    useful_utilization: float
    mean_wait: float
    p50_wait: float
    p95_wait: float
    guaranteed_workloads: int
    guaranteed_p50_wait: float
    guaranteed_p95_wait: float
    restore_episodes: int
    restored_in_interval: int
    restore_p95: float
    waiting: int  # still waiting at the end (on the manager or a worker)
    on_manager: int  # of them, never dispatched
    never_fits: int
    preempted: int
    plans: int
    clusters: Mapping[str, ArmMetrics]


def _fleet_usage(run: FleetRun) -> dict[str, dict[str, list[float]]]:
    """Tenant -> class -> units admitted over all workers, per sample."""
    total: dict[str, dict[str, list[float]]] = {}
    for worker in run.workers.values():
        for tenant, classes in worker.series.usage.items():
            for name, values in classes.items():
                row = total.setdefault(tenant, {}).setdefault(name, [0.0] * len(values))
                for index, value in enumerate(values):
                    row[index] += value
    return total


def _fleet_waiting(run: FleetRun) -> dict[str, dict[str, list[float]]]:
    """Tenant -> class -> units waiting on the manager or a worker, per sample."""
    total: dict[str, dict[str, list[float]]] = {
        tenant: {name: [float(v) for v in values] for name, values in classes.items()}
        for tenant, classes in run.manager_waiting.items()
    }
    for worker in run.workers.values():
        for tenant, classes in worker.series.waiting_units.items():
            for name, values in classes.items():
                row = total.setdefault(tenant, {}).setdefault(name, [0.0] * len(values))
                for index, value in enumerate(values):
                    row[index] += value
    return total


def _fits_somewhere(fleet: FleetSetup, arrival: Arrival) -> bool:
    verdict = arrival.verdict
    return any(
        setup.empty.placeable(verdict.gang_of(request))
        for setup in fleet.workers.values()
        for request in (verdict.options or (verdict.request,))
    )


@dataclass
class _Waits:
    every: list[float] = dataclasses.field(default_factory=list)
    guaranteed: list[float] = dataclasses.field(default_factory=list)  # within the guarantee
    never_fits: int = 0
    waiting: int = 0  # not started by the end


def _waits(
    fleet: FleetSetup, run: FleetRun, usage: Mapping[str, Mapping[str, Sequence[float]]]
) -> _Waits:
    horizon, times = fleet.shared.horizon, _times(run)
    guarantees = {t.name: t.quota for t in fleet.shared.policy.spec.tenants}
    found = _Waits()
    fits: dict[tuple[str, int], bool] = {}
    for arrival in fleet.queued:
        assert arrival.tenant is not None
        key = (arrival.tenant, arrival.entry)
        if key not in fits:
            fits[key] = _fits_somewhere(fleet, arrival)
        if not fits[key]:
            found.never_fits += 1
            continue
        worker = run.ran_on.get(arrival.id)
        start = run.workers[worker].admitted_at.get(arrival.id) if worker else None
        found.waiting += start is None
        wait = (horizon if start is None else start) - arrival.at
        found.every.append(wait)
        sample = bisect.bisect_right(times, arrival.at) - 1
        owed, used = guarantees.get(arrival.tenant, {}), usage.get(arrival.tenant, {})
        if all(
            (used[name][sample] if sample >= 0 and name in used else 0) + units
            <= (owed[name].guaranteed if name in owed else 0)
            for name, units in arrival.verdict.request
        ):
            found.guaranteed.append(wait)
    found.every.sort()
    found.guaranteed.sort()
    return found


def _times(run: FleetRun) -> list[float]:
    return next((w.series.times for w in run.workers.values()), [])


def _restores(fleet: FleetSetup, run: FleetRun) -> tuple[list[float], int]:
    usage, waiting, times = _fleet_usage(run), _fleet_waiting(run), _times(run)
    horizon, interval = fleet.shared.horizon, fleet.shared.interval
    restores, within = [], 0
    for tenant in fleet.shared.policy.spec.tenants:
        for name, quota in tenant.quota.items():
            used, queued = usage.get(tenant.name, {}).get(name), waiting.get(tenant.name, {})
            if not quota.guaranteed or used is None or name not in queued:
                continue
            for seconds, ended in restore_episodes(
                times, used, queued[name], quota.guaranteed, horizon
            ):
                restores.append(seconds)
                within += ended and seconds <= interval + 1e-9
    return sorted(restores), within


def fleet_figures(fleet: FleetSetup, run: FleetRun) -> FleetFigures:
    """One fleet arm's figures (the module docstring says how each is counted)."""
    clusters: dict[str, ArmMetrics] = {}
    for name, setup in fleet.workers.items():
        ran = tuple(a for a in setup.arrivals if run.ran_on.get(a.id) == name)
        clusters[name] = arm_metrics(dataclasses.replace(setup, arrivals=ran), run.workers[name])
    capacity = sum(fleet.workers[n].capacity_gpus for n in clusters) * fleet.shared.horizon
    allocated = sum(m.overall.gpu_seconds for m in clusters.values())
    busy = sum(m.overall.busy_gpu_seconds for m in clusters.values())
    waits = _waits(fleet, run, _fleet_usage(run))
    restores, within = _restores(fleet, run)
    every, guaranteed = waits.every, waits.guaranteed
    return FleetFigures(
        arm=run.arm,
        utilization=allocated / capacity if capacity else 0.0,
        useful_utilization=busy / capacity if capacity else 0.0,
        mean_wait=sum(every) / len(every) if every else 0.0,
        p50_wait=percentile(every, 0.5),
        p95_wait=percentile(every, 0.95),
        guaranteed_workloads=len(guaranteed),
        guaranteed_p50_wait=percentile(guaranteed, 0.5),
        guaranteed_p95_wait=percentile(guaranteed, 0.95),
        restore_episodes=len(restores),
        restored_in_interval=within,
        restore_p95=percentile(restores, 0.95),
        waiting=waits.waiting,
        on_manager=len(run.on_manager),
        never_fits=waits.never_fits,
        preempted=sum(m.overall.preempted for m in clusters.values()),
        plans=run.plans,
        clusters=clusters,
    )


def _cluster_json(metrics: ArmMetrics) -> dict[str, Any]:
    """One worker's figures: over its own capacity, of the workloads created or dispatched there."""
    return {
        "utilization": round(metrics.overall.utilization, 4),
        "usefulUtilization": round(metrics.overall.useful_utilization, 4),
        "workloads": metrics.overall.workloads,
    }


def figures_json(figures: FleetFigures) -> dict[str, Any]:
    return {
        "utilization": round(figures.utilization, 4),
        "usefulUtilization": round(figures.useful_utilization, 4),
        "meanWait": round(figures.mean_wait, 1),
        "p50Wait": round(figures.p50_wait, 1),
        "p95Wait": round(figures.p95_wait, 1),
        "guaranteedWait": {
            "workloads": figures.guaranteed_workloads,
            "p50": round(figures.guaranteed_p50_wait, 1),
            "p95": round(figures.guaranteed_p95_wait, 1),
        },
        "guaranteeRestore": {
            "episodes": figures.restore_episodes,
            "withinInterval": figures.restored_in_interval,
            "p95": round(figures.restore_p95, 1),
        },
        "waiting": figures.waiting,
        "onManager": figures.on_manager,
        "neverFits": figures.never_fits,
        "preempted": figures.preempted,
        "plans": figures.plans,
        "clusters": {name: _cluster_json(metrics) for name, metrics in figures.clusters.items()},
    }


def fleet_json(fleet: FleetSetup, figures: Sequence[FleetFigures]) -> dict[str, Any]:
    """The `fleet` object of the JSON."""
    return {
        "clusters": [
            {
                "name": cluster.name,
                "capacity": distributable(fleet.workers[cluster.name]),
                "gpus": round(fleet.workers[cluster.name].capacity_gpus, 2),
                "down": [{"from": start, "to": end} for start, end in cluster.down],
            }
            for cluster in fleet.clusters
        ],
        "arms": {found.arm: figures_json(found) for found in figures},
        "notes": list(NOTES),
    }


def fleet_lines(fleet: FleetSetup, figures: Sequence[FleetFigures]) -> list[str]:
    """The terminal's fleet section: the workers, then one line per arm."""
    workers = ", ".join(f"{name} {setup.capacity_gpus:g}" for name, setup in fleet.workers.items())
    lines = ["", f"Fleet ({len(fleet.workers)} workers, GPUs: {workers}):"]
    for found in figures:
        per_cluster = " ".join(
            f"{name} {100 * m.overall.utilization:.1f}%" for name, m in found.clusters.items()
        )
        lines.append(
            f"  {found.arm:<8} GPU util {100 * found.utilization:.1f}%, "
            f"useful {100 * found.useful_utilization:.1f}%, "
            f"wait p50 {format_span(found.p50_wait)} p95 {format_span(found.p95_wait)}, "
            f"within guarantee p95 {format_span(found.guaranteed_p95_wait)}, "
            f"waiting at end {found.waiting}; per cluster: {per_cluster}"
        )
    return lines


def fleet_rows(figures: Sequence[FleetFigures]) -> list[list[str]]:
    """The fleet arms side by side, a row per figure (the HTML page's table)."""

    def row(label: str, cell: Callable[[FleetFigures], str]) -> list[str]:
        return [label, *(cell(found) for found in figures)]

    rows = [
        ["", *(found.arm for found in figures)],
        row("GPU utilisation", lambda f: percent(f.utilization)),
        row("useful utilisation", lambda f: percent(f.useful_utilization)),
        row("mean wait", lambda f: format_span(f.mean_wait)),
        row("p50 wait", lambda f: format_span(f.p50_wait)),
        row("p95 wait", lambda f: format_span(f.p95_wait)),
        row("p95 wait within guarantee", lambda f: format_span(f.guaranteed_p95_wait)),
        row("guarantee episodes", lambda f: str(f.restore_episodes)),
        row("p95 guarantee restore", lambda f: format_span(f.restore_p95)),
        row("still waiting at end", lambda f: str(f.waiting)),
        row("of them on the manager", lambda f: str(f.on_manager)),
        row("preempted", lambda f: str(f.preempted)),
        row("fleet plans", lambda f: str(f.plans)),
    ]
    for name in figures[0].clusters if figures else ():
        rows.append(
            [
                f"{name} utilisation",
                *(percent(f.clusters[name].overall.utilization) for f in figures),
            ]
        )
    return rows


def fleet_html(figures: Sequence[FleetFigures]) -> str:
    """The HTML page's fleet section: the table and what is not modelled."""
    rows = fleet_rows(figures)
    head = "".join(f"<th>{escape(cell)}</th>" for cell in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in line) + "</tr>" for line in rows[1:]
    )
    notes = "".join(f"<li>{escape(note)}</li>" for note in NOTES)
    return (
        "<h2>The fleet: a static split against the fleet planner</h2>"
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
        f"</table></div><p>Not modelled:</p><ul>{notes}</ul>"
    )


@dataclass(frozen=True, slots=True)
class FleetResult:
    setup: FleetSetup
    runs: Mapping[FleetArmName, FleetRun]
    figures: tuple[FleetFigures, ...]

    def json(self) -> dict[str, Any]:
        return fleet_json(self.setup, self.figures)

    def lines(self) -> list[str]:
        return fleet_lines(self.setup, self.figures)

    def page(self, page: str) -> str:
        """The simulation's HTML page with the fleet's section at its end."""
        end = "</body></html>"
        return page.replace(end, fleet_html(self.figures) + end) if end in page else page


def simulate_fleet(shared: Setup, trace: Trace) -> FleetResult:
    """Both fleet arms over a trace that names clusters (`shared`: the simulation's setup)."""
    fleet = fleet_setup(shared, trace)
    runs = {arm: run_fleet(fleet, arm) for arm in FLEET_ARMS}
    return FleetResult(fleet, runs, tuple(fleet_figures(fleet, run) for run in runs.values()))
