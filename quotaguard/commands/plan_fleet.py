"""`quotaguard plan --fleet-snapshot DIR`: the fleet's quotas from a directory of snapshots.

DIR holds `manager.yaml` (or `.json`: the manager cluster's ClusterQueues and Workloads) and
one `<cluster>.yaml` per worker (its nodes, pods, ClusterQueues and Workloads). A worker the
policy's fleet names without a file is unreachable: it keeps the quotas it has and leaves the
fleet's capacity. Exit codes as `plan`: 1 when a guarantee had to be scaled or placed short.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from quotaguard.commands.common import dump
from quotaguard.planning.fleet_plan import (
    FleetQuotaRow,
    FleetReport,
    WorkerRead,
    clusters_of,
    plan_fleet,
)
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.cluster import ClusterSnapshot, SnapshotError, load_snapshot

MANAGER = "manager"
SUFFIXES = (".yaml", ".yml", ".json")


def _files(directory: Path) -> dict[str, Path]:
    """Cluster name -> its snapshot file in the directory."""
    found: dict[str, Path] = {}
    for path in sorted(directory.iterdir()):
        if path.suffix in SUFFIXES and path.is_file():
            found.setdefault(path.stem, path)
    return found


def _read(policy: TenantPolicy, directory: Path) -> tuple[ClusterSnapshot, list[WorkerRead]] | str:
    if not directory.is_dir():
        return f"{directory}: not a directory of snapshots (manager.yaml and one per worker)"
    files = _files(directory)
    if MANAGER not in files:
        return f"{directory}: no manager.yaml (the manager cluster's snapshot)"
    resources = policy.gpu_resources
    manager = load_snapshot(files.pop(MANAGER), gpu_resources=resources, require_nodes=False)
    workers = []
    for name in clusters_of(policy, files):
        if name in files:
            snapshot = load_snapshot(files[name], gpu_resources=resources, require_nodes=False)
            workers.append(WorkerRead(name, snapshot))
        else:
            workers.append(WorkerRead(name, None, f"no snapshot {name}.yaml in {directory}"))
    return manager, workers


def _quota_lines(quotas: list[FleetQuotaRow]) -> list[str]:
    lines = [f"  {'TENANT':<16}{'CLASS':<16}{'NOW':>6}{'PLAN':>6}{'USAGE':>7}"]
    for quota in quotas:
        now = "-" if quota["current"] is None else str(quota["current"])
        lines.append(
            f"  {quota['tenant']:<16}{quota['gpuClass']:<16}{now:>6}{quota['nominal']:>6}"
            f"{quota['usage']:>7}"
        )
    return lines


def format_fleet(report: FleetReport) -> str:
    """The fleet, then each cluster, as terminal tables."""
    capacity = ", ".join(f"{n} {c}" for n, c in report["capacity"].items())
    lines = [f"fleet {report['policy']} (mode {report['mode']}): capacity {capacity}", ""]
    lines.append(f"{'TENANT':<16}{'CLASS':<16}{'GUAR':>6}{'MAX':>6}{'DEMAND':>8}{'FLEET':>7}")
    for row in report["tenants"]:
        ceiling = "-" if row["max"] is None else str(row["max"])
        lines.append(
            f"{row['tenant']:<16}{row['gpuClass']:<16}{row['guaranteed']:>6}{ceiling:>6}"
            f"{row['demand']:>8}{row['fleetQuota']:>7}"
        )
    lines += ["", "manager: the sum over the workers that answered"]
    lines += _quota_lines(report["manager"])
    for cluster in report["clusters"]:
        held = ", ".join(f"{n} {c}" for n, c in cluster["capacity"].items())
        state = (
            f"capacity {held}"
            if cluster["reachable"]
            else f"UNREACHABLE ({cluster['reason']}): keeps its quotas"
        )
        lines += ["", f"cluster {cluster['name']}: {state}", *_quota_lines(cluster["quotas"])]
    lines += ["", *(f"problem: {p}" for p in report["problems"])]
    return "\n".join(lines).rstrip() + "\n"


# what `plan` offers for one cluster and not (yet) for a fleet
ONE_CLUSTER_ONLY = (
    ("html", "--html"),
    ("gpu_metrics", "--gpu-metrics"),
    ("prometheus_url", "--prometheus-url"),
    ("showback_csv", "--showback-csv"),
)


def _unsupported(args: argparse.Namespace) -> str | None:
    if args.output not in ("table", "json", "yaml"):
        return f"--fleet-snapshot prints a table, json or yaml, not {args.output}"
    for attribute, flag in ONE_CLUSTER_ONLY:
        if getattr(args, attribute, None):
            return f"{flag} plans one cluster; it does not go with --fleet-snapshot"
    return None


def run_fleet(args: argparse.Namespace, policy: TenantPolicy) -> int:
    if (refused := _unsupported(args)) is not None:
        print(refused, file=sys.stderr)
        return 2
    if policy.spec.fleet is None:
        print(f"{args.policy}: the policy has no spec.fleet", file=sys.stderr)
        return 2
    try:
        read = _read(policy, Path(args.fleet_snapshot))
    except SnapshotError as exc:
        print(exc, file=sys.stderr)
        return 2
    if isinstance(read, str):
        print(read, file=sys.stderr)
        return 2
    manager, workers = read
    report = plan_fleet(policy, manager, workers).report(policy)
    if args.output in ("json", "yaml"):
        sys.stdout.write(dump(report, args.output))
    else:
        sys.stdout.write(format_fleet(report))
    for problem in report["problems"]:
        print(f"{args.policy}: {problem}", file=sys.stderr)
    for name, reason in report["unreachable"].items():
        print(
            f"{args.fleet_snapshot}: warning: cluster {name} unreachable: {reason}", file=sys.stderr
        )
    return 1 if report["problems"] else 0
