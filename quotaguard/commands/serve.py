"""`quotaguard serve --policy P`: the webhook, the controller and the reports server in one process.

Start-up problems (invalid policy, missing TLS files, a component not in this build, a port in
use) are one plain line each on stderr and exit 2; once running, logs are JSON lines on stderr
and SIGTERM drains in-flight requests and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from quotaguard.commands.common import HelpWithDefaults, positive_seconds

DEFAULT_COMPONENTS = "webhook,controller,reports"
LOG_LEVELS = ("debug", "info", "warning", "error")


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "serve",
        help="run the admission webhook (HTTPS), the quota controller and the reports server",
        description="Run the webhook, the controller and the reports server in one process.",
        formatter_class=HelpWithDefaults,
    )
    parser.add_argument("-p", "--policy", required=True, metavar="FILE", help="TenantPolicy file")
    parser.add_argument(
        "--components",
        default=DEFAULT_COMPONENTS,
        metavar="LIST",
        help="comma-separated components to run",
    )
    parser.add_argument(
        "--bind-address", default=None, metavar="ADDR", help="listen address (default: all)"
    )
    parser.add_argument(
        "--webhook-port", type=int, default=8443, metavar="PORT", help="HTTPS for the API server"
    )
    parser.add_argument(
        "--tls-cert-file", metavar="FILE", help="PEM serving certificate (webhook component)"
    )
    parser.add_argument(
        "--tls-key-file", metavar="FILE", help="PEM private key (webhook component)"
    )
    parser.add_argument(
        "--http-port",
        type=int,
        default=8080,
        metavar="PORT",
        help="plain HTTP for /metrics, /healthz, /readyz and /reports",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig; without it, as kubectl: $KUBECONFIG, ~/.kube/config, in-cluster",
    )
    parser.add_argument(
        "--context", metavar="NAME", help="kubeconfig context (default: the current one)"
    )
    parser.add_argument(
        "--mode",
        choices=("apply", "recommend", "off"),
        help="quota controller mode (default: the policy's spec.rebalance.mode)",
    )
    parser.add_argument(
        "--reports-auth",
        choices=("kubernetes", "none"),
        default="kubernetes",
        help="who may read /metrics and /reports: kubernetes, callers whose bearer token the "
        "API server accepts (TokenReview) and allows to get the path (SubjectAccessReview, "
        'nonResourceURLs ["/metrics", "/reports", "/reports/*"]); none, everyone, only on a '
        "network you trust. /healthz and /readyz are always open",
    )
    parser.add_argument(
        "--log-level", choices=LOG_LEVELS, default="info", help="JSON log lines at this level"
    )
    parser.add_argument(
        "--policy-poll-interval",
        type=positive_seconds,
        default=2.0,
        metavar="SECONDS",
        help="how often the policy file is checked for changes",
    )
    parser.add_argument(
        "--tls-poll-interval",
        type=positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="how often the certificate files are checked for changes",
    )
    parser.add_argument(
        "--prometheus-url",
        metavar="URL",
        help="GPU telemetry for the controller: a Prometheus server that scrapes dcgm-exporter "
        "(faulty GPUs leave capacity, idle allocations are reported); unset or unreachable: "
        "planning goes on without it",
    )
    parser.add_argument(
        "--prometheus-timeout", type=positive_seconds, default=10.0, metavar="SECONDS"
    )
    parser.add_argument(
        "--gpu-operator-namespace",
        default="gpu-operator",
        metavar="NAMESPACE",
        help="where the GPU operator keeps its ConfigMap default-mig-parted-config: the "
        "controller reads the MIG configs a geometry pool names but the policy does not define",
    )
    parser.add_argument(
        "--kueue-namespace",
        default="kueue-system",
        metavar="NAMESPACE",
        help="where Kueue keeps its Configuration (ConfigMap kueue-manager-config): the "
        "controller writes the quotas of GPU classes only DRA claims reach under the resource "
        "names of its deviceClassMappings, unless the policy declares dra.kueueResource",
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=positive_seconds,
        default=25.0,
        metavar="SECONDS",
        help="how long SIGTERM waits for in-flight requests",
    )
    limits = parser.add_argument_group(
        "webhook connections", "bounds on the webhook's HTTPS connections (docs/deploy.md)"
    )
    limits.add_argument(
        "--webhook-max-connections",
        type=_positive_int,
        default=1000,
        metavar="N",
        help="connections open at once; past it a new one takes the place of the connection "
        "idle the longest of the peer holding the most, or when none is idle is answered 503 "
        "(JSON) and closed",
    )
    limits.add_argument(
        "--webhook-max-connections-per-peer",
        type=_positive_int,
        default=100,
        metavar="N",
        help="connections one client address may hold; past it a new one takes the place of "
        "that client's connection idle the longest, or when none is idle is answered 503",
    )
    limits.add_argument(
        "--webhook-idle-timeout",
        type=positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="a connection with no request for this long is closed",
    )
    limits.add_argument(
        "--webhook-header-timeout",
        type=positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="a request's headers must be complete this long after their first byte, or the "
        "connection is closed",
    )
    limits.add_argument(
        "--webhook-body-timeout",
        type=positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="a request's body must arrive this long after its headers, or it is answered 408",
    )
    limits.add_argument(
        "--webhook-reuse-port",
        action="store_true",
        help="listen with SO_REUSEPORT, so that several serve processes (or containers of one "
        "pod) share the webhook port and the kernel spreads connections over them: one pod "
        "uses more than one core; every process must run as the same user",
    )
    limits.add_argument(
        "--webhook-decision-cache-entries",
        type=_whole_number,
        default=4096,  # admission.decision_cache.DEFAULT_MAX_ENTRIES, not imported by the CLI
        metavar="N",
        help="answers of identical requests kept (replica pods of one ReplicaSet or Job are "
        "answered without deciding again; at most 16 MiB, emptied when the policy changes); "
        "0 turns the cache off",
    )
    parser.add_argument(
        "--webhook-read-dra",
        action="store_true",
        help="the webhook reads the ResourceClaimTemplates, ResourceClaims and DeviceClasses "
        "that pods' DRA claims name (needs the dra deploy component's RBAC); without it a "
        "tenant's workload whose GPUs come through a claim is refused as unresolved",
    )
    parser.set_defaults(run=run)


def _whole_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def _positive_int(text: str) -> int:
    value = _whole_number(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def run(args: argparse.Namespace) -> int:
    import asyncio

    from quotaguard.policy.problems import PolicyInvalid
    from quotaguard.serve.components import (
        EXIT_USAGE,
        ServeOptions,
        StartupError,
        resolve_components,
        serve,
    )
    from quotaguard.serve.json_logging import configure_logging

    configure_logging(args.log_level)
    components = tuple(name.strip() for name in args.components.split(",") if name.strip())
    options = ServeOptions(
        policy=args.policy,
        components=components,
        bind_address=args.bind_address,
        webhook_port=args.webhook_port,
        tls_cert_file=args.tls_cert_file,
        tls_key_file=args.tls_key_file,
        http_port=args.http_port,
        kubeconfig=args.kubeconfig,
        context=args.context,
        mode=args.mode,
        policy_poll_interval=args.policy_poll_interval,
        tls_poll_interval=args.tls_poll_interval,
        shutdown_timeout=args.shutdown_timeout,
        prometheus_url=args.prometheus_url,
        prometheus_timeout=args.prometheus_timeout,
        gpu_operator_namespace=args.gpu_operator_namespace,
        kueue_namespace=args.kueue_namespace,
        webhook_max_connections=args.webhook_max_connections,
        webhook_max_connections_per_peer=args.webhook_max_connections_per_peer,
        webhook_idle_timeout=args.webhook_idle_timeout,
        webhook_header_timeout=args.webhook_header_timeout,
        webhook_body_timeout=args.webhook_body_timeout,
        webhook_reuse_port=args.webhook_reuse_port,
        reports_auth=args.reports_auth,
        webhook_read_dra=args.webhook_read_dra,
        webhook_decision_cache_entries=args.webhook_decision_cache_entries,
    )
    try:
        resolve_components(components)  # imported now, so that the freeze below covers them
        _freeze_startup_heap()
        return asyncio.run(serve(options))
    except StartupError as exc:
        print(f"quotaguard serve: {exc}", file=sys.stderr)
    except PolicyInvalid as exc:
        print(exc, file=sys.stderr)  # one FILE:LINE:COLUMN line per problem
        return exc.exit_code
    return EXIT_USAGE


def _freeze_startup_heap() -> None:
    """Move what start-up imported (~100,000 objects: the kubernetes client, pydantic, aiohttp)
    out of the garbage collector's sight. Requests create reference cycles (aiohttp's tasks and
    futures), so the collector must stay on, but its older generations no longer walk the
    modules on every pass: about 5% more webhook throughput (bench/README.md)."""
    import gc

    gc.collect()
    gc.freeze()
