"""`quotaguard plan`: quota targets and fair-share weights next to the current queues.

Reads a snapshot file (`kubectl get nodes,pods,clusterqueues,workloads -A -o json`) or lists
the same objects from a cluster once; both feed the same parser and planner.

Exit codes: 0 the plan keeps every invariant; 1 it cannot (a class's guarantees exceed its
distributable capacity, so they were scaled down; the plan is still printed); 2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from quotaguard.commands.common import dump, positive_seconds, read_policy, stdin_twice
from quotaguard.commands.showback_csv import write_showback_csv
from quotaguard.kube.names import KUEUE_GROUP, KUEUE_VERSIONS, VOLCANO_GROUP, VOLCANO_VERSION

if TYPE_CHECKING:
    from quotaguard.planning.cycle import CycleReport

KUEUE = (KUEUE_GROUP, KUEUE_VERSIONS, ("clusterqueues", "workloads"))
VOLCANO = (VOLCANO_GROUP, (VOLCANO_VERSION,), ("queues", "podgroups"))
DRA_KINDS = {
    "resourceslices": "ResourceSlice",
    "deviceclasses": "DeviceClass",
    "resourceclaims": "ResourceClaim",
    "resourceclaimtemplates": "ResourceClaimTemplate",
}


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "plan",
        help="compute quota targets and fair-share weights",
        description="Compute quota targets and fair-share weights from a cluster snapshot "
        "or a live cluster, next to what the queues hold now. Exit 1 when a class's "
        "guarantees exceed its capacity (they are scaled down and reported).",
    )
    parser.add_argument("-p", "--policy", required=True, metavar="P", help="tenant policy file")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--snapshot",
        metavar="FILE",
        help="`kubectl get nodes,pods,clusterqueues,workloads -A -o json` (or -o yaml); - for "
        "stdin",
    )
    source.add_argument(
        "--fleet-snapshot",
        metavar="DIR",
        help="plan the policy's fleet (spec.fleet) from a directory of snapshots: manager.yaml "
        "and one <cluster>.yaml per worker; a worker without one is unreachable",
    )
    source.add_argument(
        "--kubeconfig",
        metavar="K",
        help="read the cluster with this kubeconfig; without --snapshot or --kubeconfig the "
        "cluster is found as kubectl finds it ($KUBECONFIG, ~/.kube/config, in-cluster)",
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml", "csv", "html"),
        default="table",
        help="table, json (the report shape), yaml, csv, or html (the /reports page, "
        "self-contained)",
    )
    parser.add_argument(
        "--html", metavar="FILE", help="also write the /reports page to FILE (as simulate --html)"
    )
    parser.add_argument(
        "--gpu-operator-namespace",
        default="gpu-operator",
        metavar="NS",
        help="where the GPU operator's ConfigMap default-mig-parted-config is (read from the "
        "cluster or found in the snapshot) when the policy's geometry pools name configs it "
        "does not define (default gpu-operator)",
    )
    parser.add_argument(
        "--kueue-namespace",
        default="kueue-system",
        metavar="NS",
        help="where Kueue's ConfigMap kueue-manager-config is (read from the cluster or found in "
        "the snapshot): GPU classes only DRA claims reach are planned under the resource names "
        "of its deviceClassMappings, unless the policy declares dra.kueueResource (default "
        "kueue-system)",
    )
    telemetry = parser.add_mutually_exclusive_group()
    telemetry.add_argument(
        "--gpu-metrics",
        metavar="FILE",
        help="GPU telemetry: a dcgm-exporter scrape (text exposition format) or the JSON of a "
        "Prometheus query_range; faulty GPUs leave capacity, idle pods are reported",
    )
    telemetry.add_argument(
        "--prometheus-url",
        metavar="URL",
        help="read GPU telemetry (dcgm-exporter's series) from this Prometheus server",
    )
    parser.add_argument(
        "--prometheus-timeout",
        type=positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="timeout of the Prometheus query (default 10)",
    )
    parser.add_argument(
        "--showback-csv",
        metavar="FILE",
        help="also write the showback (GPU-hours allocated, busy and idle, and their cost, per "
        "tenant, class and GPU model) as CSV to FILE (- for standard output)",
    )
    parser.set_defaults(run=run)


class _NotServed(Exception):
    """The API server does not serve this resource (404)."""


def _get_json(api: Any, path: str) -> Any:
    """GET a path as plain JSON through the client's auth and TLS settings, without its
    generated models (slow to import and to build)."""
    if hasattr(api, "param_serialize"):  # kubernetes >= 31
        method, url, headers, _, _ = api.param_serialize(
            "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
        )
        response = api.call_api(method, url, headers, _request_timeout=60)
        status, data = response.status, response.read()
    else:
        from kubernetes.client.exceptions import ApiException

        try:
            response = api.call_api(
                path,
                "GET",
                auth_settings=["BearerToken"],
                response_type=None,
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=60,
            )
        except ApiException as exc:
            if exc.status == 404:
                raise _NotServed(path) from exc
            raise
        status, data = 200, response.data
    if status == 404:
        raise _NotServed(path)
    if not 200 <= status < 300:
        raise OSError(f"GET {path}: HTTP {status}: {data[:200]!r}")
    return json.loads(data)


def _list_cluster(api: Any, backend: str, dra: bool = False) -> list[Any]:
    """Every object the planner reads, listed once each, as plain dicts (with `dra`, the
    ResourceSlices, DeviceClasses, claims and templates too, when served)."""
    items: list[Any] = []

    def add(document: Any, kind: str, api_version: str) -> None:
        for item in document.get("items") or []:
            # Lists leave kind and apiVersion off their items.
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", api_version)
            items.append(item)

    add(_get_json(api, "/api/v1/nodes"), "Node", "v1")
    add(_get_json(api, "/api/v1/pods"), "Pod", "v1")
    group, versions, plurals = VOLCANO if backend == "volcano" else KUEUE
    kinds = {
        "clusterqueues": "ClusterQueue",
        "workloads": "Workload",
        "queues": "Queue",
        "podgroups": "PodGroup",
    }
    for plural in plurals:
        for version in versions:
            try:
                document = _get_json(api, f"/apis/{group}/{version}/{plural}")
            except _NotServed:
                continue
            add(document, kinds[plural], f"{group}/{version}")
            break
        else:
            print(f"warning: {group} {plural} are not served by the cluster", file=sys.stderr)
    for plural, kind in DRA_KINDS.items() if dra else ():
        try:
            add(_get_json(api, f"/apis/resource.k8s.io/v1/{plural}"), kind, "resource.k8s.io/v1")
        except _NotServed:
            print(f"warning: resource.k8s.io/v1 {plural} are not served", file=sys.stderr)
    return items


def _with_kueue_mappings(args: argparse.Namespace, policy: Any, api: Any, snapshot: Any) -> Any:
    """The policy with the resources Kueue counts its DRA-only classes under, from Kueue's
    Configuration as the controller reads it; without it, the policy as declared (said)."""
    from quotaguard.kube.names import KUEUE_CONFIG_KEY, KUEUE_CONFIGMAP
    from quotaguard.policy.kueue_dra import device_class_mappings, with_kueue_resources

    if policy.spec.backend != "kueue" or not policy.dra_classes:
        return policy
    namespace = args.kueue_namespace
    where = f"ConfigMap {namespace}/{KUEUE_CONFIGMAP}"
    text: object = None
    if api is None:
        text, where = snapshot.kueue_configs.get(namespace), f"{where} in the snapshot"
    else:
        try:
            found = _get_json(api, f"/api/v1/namespaces/{namespace}/configmaps/{KUEUE_CONFIGMAP}")
            text = ((found or {}).get("data") or {}).get(KUEUE_CONFIG_KEY)
        except Exception as exc:  # the client's many failure types all mean "cannot read"
            where = f"{where} ({str(exc).splitlines()[0]})"
    if not isinstance(text, str):
        print(f"warning: no {where}: DRA classes are planned as declared", file=sys.stderr)
        return policy
    mappings, unread = device_class_mappings(text)
    merged, disagreements = with_kueue_resources(policy, mappings)
    for problem in unread + disagreements:
        print(f"{where}: warning: {problem}", file=sys.stderr)
    return merged


def _gpu_facts(args: argparse.Namespace, policy: Any, snapshot: Any) -> Any:
    """Telemetry judged against the snapshot; unreadable telemetry is a warning, never an
    error: the plan goes on as without it and says so."""
    from quotaguard.kube.documents import source_name
    from quotaguard.telemetry.facts import judge, no_telemetry
    from quotaguard.telemetry.metrics_sources import (
        MetricsFile,
        PrometheusClient,
        TelemetryError,
        TelemetrySource,
    )

    source = source_name(args.gpu_metrics) if args.gpu_metrics else args.prometheus_url
    if source is None:
        return no_telemetry("none given (--gpu-metrics or --prometheus-url)")
    rebalance = policy.spec.rebalance
    try:
        telemetry: TelemetrySource = (
            MetricsFile(args.gpu_metrics)
            if args.gpu_metrics
            else PrometheusClient(args.prometheus_url, timeout=args.prometheus_timeout)
        )
        metrics = telemetry.gpu_metrics(rebalance)
    except TelemetryError as exc:
        print(f"warning: {exc}; planning without GPU telemetry", file=sys.stderr)
        return no_telemetry(str(exc), source)
    if metrics.note:
        print(f"{source}: warning: {metrics.note}", file=sys.stderr)
    facts, _ = judge(
        metrics,
        nodes=[node.name for node in snapshot.nodes],
        rebalance=rebalance,
        pods=[(pod.namespace, pod.name) for pod in snapshot.pods],
    )
    for kind, count in facts.warnings.items():
        print(f"{source}: warning: {count} series skipped: {kind}", file=sys.stderr)
    return facts


def _mig_parted_data(
    args: argparse.Namespace, api: Any, snapshot: Any
) -> tuple[Mapping[str, object] | None, str]:
    """The `data` of the GPU operator's mig-parted ConfigMap, or None, and where it was looked
    for."""
    from quotaguard.kube.names import MIG_PARTED_CONFIG_KEY, MIG_PARTED_CONFIGMAP

    namespace = args.gpu_operator_namespace
    where = f"ConfigMap {namespace}/{MIG_PARTED_CONFIGMAP}"
    if api is None:
        text = snapshot.mig_parted_configs.get(namespace)
        data = {MIG_PARTED_CONFIG_KEY: text} if text is not None else None
        return data, f"{where} in the snapshot"
    try:
        document = _get_json(
            api, f"/api/v1/namespaces/{namespace}/configmaps/{MIG_PARTED_CONFIGMAP}"
        )
    except _NotServed:
        return None, where
    except Exception as exc:  # the client's many failure types all mean "cannot read"
        return None, f"{where} ({str(exc).splitlines()[0]})"
    data = (document or {}).get("data")
    return (data if isinstance(data, Mapping) else None), where


def _with_operator_configs(args: argparse.Namespace, policy: Any, api: Any, snapshot: Any) -> Any:
    """The policy with the GPU operator's definitions of the configs its pools name but do not
    define, as the controller reads them; without them, the built-in configs (said)."""
    from quotaguard.geometry.operatorconfigs import from_configmap, undefined_configs

    wanted = undefined_configs(policy)
    if not wanted:
        return policy
    data, where = _mig_parted_data(args, api, snapshot)
    found = from_configmap(policy, data)
    if found is None:
        print(
            f"warning: no {where}: the configs {', '.join(wanted)} are planned as built in, "
            "if they are",
            file=sys.stderr,
        )
        return policy
    merged, problems = found
    for problem in problems:
        print(f"{where}: warning: {problem}", file=sys.stderr)
    return merged


Reread = Callable[..., Any]  # the snapshot parsed again: reread(gpu_resources=...)


def _read_cluster(args: argparse.Namespace, policy: Any) -> tuple[Any, Any, Reread] | int:
    """The snapshot (of the file, or of the cluster listed once), the API client (None for a
    file) and how to parse it again; the exit code when it cannot be read."""
    from quotaguard.quota.cluster import SnapshotError, load_snapshot, parse_objects

    source = args.snapshot or args.kubeconfig or "the cluster"
    api: Any = None
    reread: Reread
    try:
        if args.snapshot:
            reread = functools.partial(load_snapshot, args.snapshot)
            snapshot = load_snapshot(args.snapshot, gpu_resources=policy.gpu_resources)
        else:
            from quotaguard.kube.client import api_client

            # One retry, then say so: a person is waiting.
            api = api_client(args.kubeconfig, context=args.context, retries=1)
            items = _list_cluster(api, policy.spec.backend, dra=bool(policy.dra_classes))
            reread = functools.partial(parse_objects, items)
            snapshot = parse_objects(items, gpu_resources=policy.gpu_resources)
    except SnapshotError as exc:
        print(exc, file=sys.stderr)
        return 2
    except Exception as exc:  # the client's many failure types all mean "cannot read"
        print(f"{source}: cannot read the cluster: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    for problem in snapshot.problems:
        print(f"{source}: warning: {problem}", file=sys.stderr)
    return snapshot, api, reread


def _with_mapped_resources(
    args: argparse.Namespace, policy: Any, api: Any, snapshot: Any, reread: Reread
) -> tuple[Any, Any]:
    """The policy with Kueue's names for its DRA classes, and the snapshot read with them as
    GPUs (Kueue counts admitted Workloads under them); stdin cannot be read twice."""
    from quotaguard.quota.cluster import SnapshotError

    mapped = _with_kueue_mappings(args, policy, api, snapshot)
    if mapped.gpu_resources != policy.gpu_resources and args.snapshot != "-":
        with contextlib.suppress(SnapshotError):  # changed meanwhile: the first reading
            snapshot = reread(gpu_resources=mapped.gpu_resources)
    return mapped, snapshot


def run(args: argparse.Namespace) -> int:
    if args.fleet_snapshot:
        from quotaguard.commands.plan_fleet import run_fleet

        policy = read_policy(args.policy)
        return policy if isinstance(policy, int) else run_fleet(args, policy)
    return _run_cluster(args)


def _run_cluster(args: argparse.Namespace) -> int:
    from quotaguard.planning.cycle import plan_cycle, seen_in_snapshot
    from quotaguard.quota.showback_report import snapshot_showback

    if (stdin := stdin_twice(args, ("policy", "snapshot", "gpu_metrics"))) is not None:
        return stdin
    policy = read_policy(args.policy)
    if isinstance(policy, int):
        return policy
    read = _read_cluster(args, policy)
    if isinstance(read, int):
        return read
    snapshot, api, reread = read
    policy = _with_operator_configs(args, policy, api, snapshot)
    policy, snapshot = _with_mapped_resources(args, policy, api, snapshot, reread)
    facts = _gpu_facts(args, policy, snapshot)
    # One snapshot is one cycle from nothing: weights follow the usage seen in it.
    cycle = plan_cycle(policy, seen_in_snapshot(policy, snapshot, facts), time.time())
    showback = snapshot_showback(policy, snapshot, facts.activity, at=time.time())
    # the cycle's report and the GPU-hours of the snapshot's hour (quota.showback_report)
    report = cast("CycleReport", {**cycle.report, "showback": showback})
    if args.html and (written := _write_html(args.html, report)) is not None:
        return written
    sys.stdout.write(_render(report, args.output, cycle.layouts.mode))
    if args.showback_csv and (failed := write_showback_csv(args.showback_csv, showback)):
        return failed
    for problem in cycle.plan.problems:  # errors go to stderr, whatever stdout shows
        print(f"{args.policy}: {problem}", file=sys.stderr)
    return 1 if cycle.plan.problems else 0


def _write_html(path: str, report: CycleReport) -> int | None:
    """Write the /reports page to `path`; the exit code when it cannot be written."""
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write(_render(report, "html", ""))
    except OSError as exc:
        print(f"{path}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return None


def _render(report: CycleReport, output: str, layout_mode: str) -> str:
    """The report as `--output` asks: the same dict behind every format."""
    from quotaguard.geometry.layout_report import format_layouts
    from quotaguard.quota.quota_report import format_table, to_csv
    from quotaguard.quota.showback_report import format_lines

    if output in ("json", "yaml"):
        return dump(report, output)
    if output == "csv":
        return to_csv(report)
    if output == "html":
        from quotaguard.reports.report_page import render_report_page

        return render_report_page(report, [], now=time.time(), refresh_seconds=None)
    table = [
        format_table(report),
        *format_layouts(report["nodes"], layout_mode),
        *format_lines(cast(dict[str, Any], report).get("showback", {})),
    ]
    return "\n".join(table) + "\n"
