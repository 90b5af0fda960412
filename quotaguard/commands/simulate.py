"""`quotaguard simulate --policy P --trace T`: replay a workload trace, static against dynamic."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, TextIO

from quotaguard.commands.common import dump, read_policy, stdin_twice
from quotaguard.commands.showback_csv import write_showback_csv

if TYPE_CHECKING:  # the verb's modules load when it runs, not when the CLI starts
    from quotaguard.policy.model import TenantPolicy
    from quotaguard.simulate.fleet_report import FleetResult
    from quotaguard.simulate.placement import Scoring
    from quotaguard.simulate.simulation import Simulation
    from quotaguard.simulate.trace import Trace

PROGRESS_MIN_WORKLOADS = 5000  # shorter traces finish before a bar would be worth drawing
BAR_WIDTH = 30


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "simulate",
        help="replay a workload trace: static quotas against the quota controller",
        description="Replay a workload trace through admission and the quota controller "
        "against a simulated cluster; report utilisation, waiting time and fairness of "
        "static quotas and of dynamic ones side by side.",
    )
    parser.add_argument("-p", "--policy", required=True, metavar="P", help="tenant policy file")
    parser.add_argument(
        "--trace", required=True, metavar="T", help="trace (YAML or JSON), or - for stdin"
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "yaml", "html"),
        default="text",
        help="text, json, yaml, or html (the report with charts, self-contained, on stdout as "
        "plan -o html prints its page)",
    )
    parser.add_argument("--html", metavar="FILE", help="also write the report with charts to FILE")
    parser.add_argument(
        "--static",
        choices=("guarantees", "pool"),
        default="guarantees",
        help="the static arm: nominal quota = guarantee with Kueue's default borrowing and "
        "lending (default), or guarantees plus the rest of the capacity as a cohort pool",
    )
    parser.add_argument(
        "--preemption",
        choices=("never", "reclaim"),
        default="reclaim",
        help="what every ClusterQueue does, in every arm, when it wants back quota it lent: "
        "reclaim evicts borrowers' workloads (reclaimWithinCohort: Any, withinClusterQueue: "
        "LowerPriority, as config/samples/kueue declares; the default), never waits for "
        "them to finish",
    )
    parser.add_argument(
        "--scoring",
        choices=("LeastAllocated", "MostAllocated"),
        default=None,
        help="how the simulated scheduler picks a node among those that fit (kube-scheduler's "
        "NodeResourcesFit strategies): spread (LeastAllocated, the default) or pack "
        "(MostAllocated, the default when the policy sends GPU pods to the packing profile "
        "with spec.scheduling.schedulerName)",
    )
    parser.add_argument(
        "--no-scoring-comparison",
        action="store_true",
        help="skip replaying quotaguard's arm under the other scoring (by default it is run "
        "both spread and packed, and the report recommends one: docs/packing.md)",
    )
    parser.add_argument(
        "--gpu-metrics",
        metavar="FILE",
        help="GPU telemetry (a dcgm-exporter scrape, or the JSON of a Prometheus query_range): "
        "the GPUs it finds faulty are out of the trace's nodes for the whole replay",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="never draw a progress bar on stderr"
    )
    parser.add_argument(
        "--showback-csv",
        metavar="FILE",
        help="also write the showback (GPU-hours allocated, busy and idle, and their cost, per "
        "simulated day, tenant, class and GPU model) as CSV to FILE (- for standard output)",
    )
    parser.set_defaults(run=run)


class ProgressBar:
    """A one-line bar on a terminal: `simulate [#####.....]  48% dynamic`."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        from quotaguard.simulate.arms import ARMS

        self.arms = tuple(ARMS)

    def __call__(self, arm: str, done: float) -> None:
        index = self.arms.index(arm) if arm in self.arms else 0
        overall = (index + min(1.0, done)) / len(self.arms)
        filled = int(BAR_WIDTH * overall)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        self.stream.write(f"\rsimulate [{bar}] {100 * overall:3.0f}% {arm:<9}")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r" + " " * (BAR_WIDTH + 30) + "\r")
        self.stream.flush()


def _without_faulty_gpus(policy: Any, trace: Any, path: str, name: str) -> Any:
    """The trace with the GPUs `path` finds faulty taken off its nodes (said on stderr);
    unreadable telemetry is a warning and the trace is replayed as it is."""
    import dataclasses

    from quotaguard.policy.model import GpuHealth
    from quotaguard.quota.class_capacity import without_faulty_gpus
    from quotaguard.telemetry.health import judge_health
    from quotaguard.telemetry.metrics_sources import MetricsFile, TelemetryError

    settings: GpuHealth = policy.spec.rebalance.gpu_health
    try:
        metrics = MetricsFile(path).gpu_metrics(policy.spec.rebalance)
    except TelemetryError as exc:
        print(f"warning: {exc}; replaying without GPU telemetry", file=sys.stderr)
        return trace
    # No quiet period across a replay: what is faulty in the file stays out throughout.
    verdict, _ = judge_health(metrics, nodes=[n.name for n in trace.nodes], settings=settings)
    for kind, count in verdict.warnings.items():
        print(f"{name}: warning: {count} series skipped: {kind}", file=sys.stderr)
    for gpu in verdict.faulty:
        print(
            f"{name}: {gpu.node} GPU {gpu.gpu} out of the inventory: {gpu.reason}", file=sys.stderr
        )
    nodes = without_faulty_gpus(policy, trace.nodes, verdict.faulty)
    return dataclasses.replace(trace, nodes=nodes)


def _inputs(args: argparse.Namespace) -> tuple[Any, Any] | int:
    """The policy and the trace (without the GPUs the telemetry finds faulty), or the exit
    code after saying why they cannot be had."""
    from quotaguard.kube.documents import source_name
    from quotaguard.simulate.trace import TraceInvalid, load_trace

    if (stdin := stdin_twice(args, ("policy", "trace", "gpu_metrics"))) is not None:
        return stdin
    policy = read_policy(args.policy)
    if isinstance(policy, int):
        return policy
    try:
        trace = load_trace(args.trace, gpu_resources=policy.gpu_resources)
    except TraceInvalid as exc:
        for line in exc.problems:
            print(line, file=sys.stderr)
        return 2
    if trace.clusters and policy.spec.backend != "kueue":
        print(
            f"{source_name(args.trace)}: the trace names clusters (a MultiKueue fleet); the "
            f"policy's backend must be kueue, not {policy.spec.backend}",
            file=sys.stderr,
        )
        return 2
    if args.gpu_metrics:
        trace = _without_faulty_gpus(policy, trace, args.gpu_metrics, source_name(args.gpu_metrics))
    return policy, trace


def _policy_scoring(policy: TenantPolicy) -> Scoring:
    """Pack when the policy's webhook sends GPU pods to the packing profile (Kueue only)."""
    scheduling = policy.spec.scheduling
    packs = scheduling is not None and bool(scheduling.scheduler_name)
    return "MostAllocated" if packs and policy.spec.backend == "kueue" else "LeastAllocated"


def _page(page: str, fleet: FleetResult | None) -> str:
    return page if fleet is None else fleet.page(page)


def _simulation(args: argparse.Namespace, policy: TenantPolicy, trace: Trace) -> Simulation:
    """The simulation of every arm, with a progress bar on a terminal for a long trace."""
    from quotaguard.simulate.preemption import PRESETS
    from quotaguard.simulate.simulation import simulate

    bar = None
    if not args.no_progress and sys.stderr.isatty() and trace.size >= PROGRESS_MIN_WORKLOADS:
        bar = ProgressBar(sys.stderr)
    try:
        return simulate(
            policy,
            trace,
            static_baseline=args.static,
            preemption=PRESETS[args.preemption],
            scoring=args.scoring or _policy_scoring(policy),
            progress=bar,
            compare_scorings=not args.no_scoring_comparison,
        )
    finally:
        if bar is not None:
            bar.close()


def _print(args: argparse.Namespace, simulation: Simulation, fleet: FleetResult | None) -> None:
    from quotaguard.simulate.simulation_report import render_text, result_json

    if args.output in ("json", "yaml"):
        found = result_json(simulation)
        if fleet is not None:
            found["fleet"] = fleet.json()
        sys.stdout.write(dump(found, args.output))
    elif args.output == "html":
        from quotaguard.simulate.simulation_page import render_html

        sys.stdout.write(_page(render_html(simulation), fleet))
    else:
        sys.stdout.write(render_text(simulation))
        if fleet is not None:
            sys.stdout.write("\n".join(fleet.lines()) + "\n")
        if args.html:
            print(f"\nReport with charts: {args.html}")


def run(args: argparse.Namespace) -> int:
    read = _inputs(args)
    if isinstance(read, int):
        return read
    policy, trace = read
    simulation = _simulation(args, policy, trace)
    fleet = None
    if trace.clusters:
        from quotaguard.simulate.fleet_report import simulate_fleet

        fleet = simulate_fleet(simulation.setup, trace)
    if args.html:
        from quotaguard.simulate.simulation_page import render_html

        try:
            with open(args.html, "w", encoding="utf-8") as out:
                out.write(_page(render_html(simulation), fleet))
        except OSError as exc:
            print(f"{args.html}: cannot write: {exc.strerror or exc}", file=sys.stderr)
            return 2
    _print(args, simulation, fleet)
    if args.showback_csv:
        return write_showback_csv(args.showback_csv, simulation.showback())
    return 0
