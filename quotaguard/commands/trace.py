"""`quotaguard trace from-prometheus --url URL --start S --end E --policy P -o trace.yaml`: a
`simulate` trace built from the cluster's own history in Prometheus (kube-state-metrics and
DCGM), so a team replays its own workloads instead of writing a trace by hand.

Exit 0 with the trace written, 1 when the range holds nothing to replay (no GPU pod or node),
2 for a usage or input error (bad times, an unreadable policy, Prometheus unreachable or
refusing the queries).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from datetime import datetime
from typing import Any

from quotaguard.commands.common import HelpWithDefaults, read_policy

DEFAULT_STEP = "60s"
MAX_STEPS = 10_000_000  # a range this many steps long is a typo in --step


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "trace",
        help="build a simulate trace from a cluster's history (Prometheus)",
        description="Build a trace for `quotaguard simulate` from a cluster's own history.",
    )
    sources = parser.add_subparsers(dest="source", required=True)
    prometheus = sources.add_parser(
        "from-prometheus",
        formatter_class=HelpWithDefaults,
        help="pods and nodes from kube-state-metrics, GPU activity from DCGM",
        description="Read kube-state-metrics (GPU requests, pod creation, Running phase and "
        "completion, node allocatable and GPU model) and DCGM_FI_DEV_GPU_UTIL (as `uses`) "
        "over a range from Prometheus, and write them as a simulate trace: one workload per "
        "GPU pod of a namespace a tenant of the policy owns. The queries are in "
        "docs/simulate.md.",
    )
    prometheus.add_argument("--url", required=True, help="the Prometheus server, http(s)://...")
    prometheus.add_argument(
        "--start",
        required=True,
        help="the range's start: RFC 3339 (2026-12-01T00:00:00Z), Unix seconds, or a duration "
        "before --end (7d, 24h)",
    )
    prometheus.add_argument(
        "--end", default="now", help="the range's end: RFC 3339, Unix seconds, or now"
    )
    prometheus.add_argument(
        "--step", default=DEFAULT_STEP, help="the resolution of the range queries (a duration)"
    )
    prometheus.add_argument(
        "-p", "--policy", required=True, metavar="P", help="tenant policy: namespaces to tenants"
    )
    prometheus.add_argument(
        "-o",
        "--output",
        default="-",
        metavar="FILE",
        help="where to write the trace (- for standard output; a name ending in .json: JSON)",
    )
    prometheus.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for each answer"
    )
    prometheus.set_defaults(run=run)


def _seconds(text: str) -> float:
    """A duration as `simulate` reads them, and days (`7d`)."""
    from quotaguard.kube.quantity import parse_duration

    if text.endswith("d") and text[:-1].replace(".", "", 1).isdigit():
        return float(text[:-1]) * 86400
    return parse_duration(text)


class _NoZone(ValueError):
    """A time without a zone: which one was meant is a guess quotaguard does not make."""


def _instant(text: str, now: float) -> float:
    if text == "now":
        return now
    try:
        return float(text)
    except ValueError:
        pass
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise _NoZone(f"{text}: give a time zone (Z or +01:00)")
    return moment.timestamp()


def _range(args: argparse.Namespace) -> Any:
    """The range the flags ask for; ValueError saying what is wrong."""
    from quotaguard.kube.quantity import QuantityError
    from quotaguard.simulate.cluster_history import Range

    try:
        end = _instant(args.end, time.time())
    except ValueError as exc:
        raise ValueError(f"--end: {exc}") from None
    try:
        start = _instant(args.start, end)
    except _NoZone as exc:
        raise ValueError(f"--start: {exc}") from None
    except ValueError:
        try:
            start = end - _seconds(args.start)
        except QuantityError:
            raise ValueError(
                f"--start: not a time or a duration: {args.start!r} "
                "(use e.g. 2026-12-01T00:00:00Z, 1764547200 or 7d)"
            ) from None
    try:
        step = _seconds(args.step)
    except QuantityError as exc:
        raise ValueError(f"--step: {exc}") from None
    if not step > 0:
        raise ValueError(f"--step: must be positive: {args.step}")
    if not (math.isfinite(start) and math.isfinite(end)) or start >= end:
        raise ValueError("--start must be before --end")
    if (end - start) / step > MAX_STEPS:
        raise ValueError(f"--step {args.step} makes more than {MAX_STEPS:,} steps of the range")
    return Range(start, end, step)


def run(args: argparse.Namespace) -> int:
    from quotaguard.simulate.cluster_history import HistoryError, history_trace, read_history
    from quotaguard.telemetry.metrics_sources import PrometheusClient, TelemetryError

    try:
        span = _range(args)
    except ValueError as exc:
        print(f"quotaguard trace from-prometheus: {exc}", file=sys.stderr)
        return 2
    policy = read_policy(args.policy)
    if isinstance(policy, int):
        return policy
    try:
        client = PrometheusClient(args.url, timeout=args.timeout)
        history = read_history(client, policy, span)
        document, skipped = history_trace(history, policy, span, source=client.url)
    except TelemetryError as exc:
        print(f"quotaguard trace from-prometheus: {exc}", file=sys.stderr)
        return 2
    except HistoryError as exc:
        print(f"quotaguard trace from-prometheus: {args.url}: {exc}", file=sys.stderr)
        return 1
    for namespace, pods in sorted(skipped.no_tenant.items()):
        print(
            f"skipped {pods} GPU pods of namespace {namespace}: no tenant owns it", file=sys.stderr
        )
    if skipped.never_ran:
        print(f"skipped {skipped.never_ran} GPU pods never Running in the range", file=sys.stderr)
    return _write(document, args.output)


def _write(document: dict[str, Any], output: str) -> int:
    import json

    import yaml

    if output.endswith(".json"):
        text = json.dumps(document, indent=1) + "\n"
    else:
        text = yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=200)
    if output == "-":
        sys.stdout.write(text)
        return 0
    try:
        with open(output, "w", encoding="utf-8") as file:
            file.write(text)
    except OSError as exc:
        from quotaguard.kube.documents import read_error

        print(f"{output}: cannot write: {read_error(exc)}", file=sys.stderr)
        return 2
    workloads, nodes = len(document["workloads"]), len(document["nodes"])
    print(f"{output}: {workloads} workloads on {nodes} nodes", file=sys.stderr)
    return 0
