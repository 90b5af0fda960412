"""`quotaguard certs`: create and rotate the webhook's CA and serving certificate.

In a cluster: the CA lives in the Secret `--ca-secret`, the serving certificate in `--secret`
(type kubernetes.io/tls with ca.crt, the one the webhook pods mount), and the trust bundle in
caBundle of both webhook configurations. With `--out-dir` the same files are kept in a
directory and no cluster is contacted. Safe to run any number of times: valid certificates
are left alone. The decisions are in `quotaguard.certs.builders`; this module only reads and writes.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from quotaguard.certs.builders import (
    CertificateInputError,
    CertPlan,
    CertSettings,
    KeyPair,
    TlsState,
    plan_certificates,
)
from quotaguard.commands.certs_cluster import (
    MUTATING,
    VALIDATING,
    CertsError,
    ClusterPort,
    ClusterUnreachable,
    JsonObject,
    KubernetesCluster,
)
from quotaguard.commands.common import HelpWithDefaults, dump
from quotaguard.webhook.registrations import VALIDATING_NAMES

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
CERT_MANAGER_ANNOTATION = "cert-manager.io/certificate-name"
# Files written with --out-dir.
CA_CERT_FILE, CA_KEY_FILE, BUNDLE_FILE = "ca.crt", "ca.key", "ca-bundle.crt"
TLS_CERT_FILE, TLS_KEY_FILE = "tls.crt", "tls.key"


@dataclass(frozen=True)
class Targets:
    """Where the certificates go in the cluster."""

    namespace: str
    secret: str
    ca_secret: str
    webhook_configurations: tuple[tuple[str, str], ...]  # (kind, name)


PAST = {"create": "created", "update": "updated", "patch": "patched", "write": "wrote"}


@dataclass(frozen=True)
class Action:
    """One write: `verb` (a key of PAST) `what` (because ...), done by `apply`."""

    verb: str
    what: str
    apply: Callable[[], None]

    def describe(self, *, done: bool) -> str:
        return f"{PAST[self.verb] if done else 'would ' + self.verb} {self.what}"


# ---- Secrets and webhook configurations as plain data ---------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: object) -> bytes:
    if not isinstance(value, str):
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        return b""


def secret_data(secret: JsonObject | None) -> dict[str, bytes]:
    data = (secret or {}).get("data") or {}
    return {key: _unb64(value) for key, value in data.items()}


def secret_pair(secret: JsonObject | None) -> KeyPair | None:
    data = secret_data(secret)
    if not data.get("tls.crt") or not data.get("tls.key"):
        return None
    return KeyPair(data["tls.crt"], data["tls.key"])


def tls_secret(name: str, namespace: str, pair: KeyPair, bundle: bytes) -> JsonObject:
    """A kubernetes.io/tls Secret with the trust bundle as ca.crt (cert-manager's layout)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "quotaguard",
                MANAGED_BY_LABEL: "quotaguard-certs",
            },
        },
        "type": "kubernetes.io/tls",
        "data": {
            "tls.crt": _b64(pair.cert_pem),
            "tls.key": _b64(pair.key_pem),
            "ca.crt": _b64(bundle),
        },
    }


def ca_bundle_patch(configuration: JsonObject, bundle: bytes) -> list[JsonObject]:
    """JSON Patch setting caBundle of every webhook that lacks this bundle. Each write is
    guarded by a test of the webhook's name, so a concurrent reorder fails instead of writing
    into the wrong entry."""
    encoded = _b64(bundle)
    operations: list[JsonObject] = []
    for index, webhook in enumerate(configuration.get("webhooks") or []):
        if (webhook.get("clientConfig") or {}).get("caBundle") == encoded:
            continue
        operations.append(
            {"op": "test", "path": f"/webhooks/{index}/name", "value": webhook["name"]}
        )
        operations.append(
            {"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": encoded}
        )
    return operations


# ---- the run against a cluster -------------------------------------------------------------


def cluster_state(
    port: ClusterPort, targets: Targets
) -> tuple[TlsState, JsonObject | None, JsonObject | None]:
    ca_secret = port.read_secret(targets.namespace, targets.ca_secret)
    serving_secret = port.read_secret(targets.namespace, targets.secret)
    annotations = ((serving_secret or {}).get("metadata") or {}).get("annotations") or {}
    if CERT_MANAGER_ANNOTATION in annotations:
        raise CertsError(
            f"Secret {targets.namespace}/{targets.secret} is managed by cert-manager (Certificate "
            f"{annotations[CERT_MANAGER_ANNOTATION]}); use one of the two, not both"
        )
    bundle = (
        secret_data(ca_secret).get("ca.crt") or secret_data(serving_secret).get("ca.crt") or b""
    )
    state = TlsState(
        ca=secret_pair(ca_secret), trust_bundle=bundle, serving=secret_pair(serving_secret)
    )
    return state, ca_secret, serving_secret


def _write_secret(
    port: ClusterPort, namespace: str, existing: JsonObject | None, body: JsonObject
) -> Callable[[], None]:
    name = body["metadata"]["name"]
    if existing is None:
        return lambda: port.create_secret(namespace, body)
    # Optimistic concurrency: a replace of a version someone else changed is a conflict.
    version = (existing.get("metadata") or {}).get("resourceVersion")
    if version:
        body["metadata"]["resourceVersion"] = version
    return lambda: port.replace_secret(namespace, name, body)


def cluster_actions(
    port: ClusterPort,
    targets: Targets,
    plan: CertPlan,
    ca_secret: JsonObject | None,
    serving_secret: JsonObject | None,
) -> tuple[list[Action], list[str]]:
    """The writes that bring the cluster to `plan`, in the order that never breaks a call: the
    CA, then the trust bundle into the webhook configurations, then the serving certificate it
    verifies. Also returns problems that do not stop the other writes."""
    namespace = targets.namespace
    actions: list[Action] = []
    problems: list[str] = []

    def secret(name: str, existing: JsonObject | None, pair: KeyPair, reason: str | None) -> None:
        if existing is not None and secret_data(existing).get("ca.crt") != plan.trust_bundle:
            reason = reason or plan.bundle_reason or "its ca.crt is not the trust bundle"
        if existing is None:
            reason = reason or "absent"
        if reason is None:
            return
        body = tls_secret(name, namespace, pair, plan.trust_bundle)
        actions.append(
            Action(
                "create" if existing is None else "update",
                f"Secret {namespace}/{name} ({reason})",
                _write_secret(port, namespace, existing, body),
            )
        )

    secret(targets.ca_secret, ca_secret, plan.ca, plan.ca_reason)
    for kind, name in targets.webhook_configurations:
        configuration = port.read_webhook_configuration(kind, name)
        if configuration is None:
            problems.append(
                f"{kind} {name} not found: its caBundle was not written "
                "(apply the webhook configurations, then run again)"
            )
            continue
        patch = ca_bundle_patch(configuration, plan.trust_bundle)
        if patch:
            count = len(patch) // 2
            what = f"caBundle of {kind} {name} ({count} webhook{'s' if count != 1 else ''})"
            if plan.bundle_reason:
                what = f"{what[:-1]}: {plan.bundle_reason})"
            actions.append(Action("patch", what, _patch_call(port, kind, name, patch)))
    secret(targets.secret, serving_secret, plan.serving, plan.serving_reason)
    return actions, problems


def _patch_call(
    port: ClusterPort, kind: str, name: str, patch: list[JsonObject]
) -> Callable[[], None]:
    return lambda: port.patch_webhook_configuration(kind, name, patch)


def run_cluster(
    port: ClusterPort,
    targets: Targets,
    settings: CertSettings,
    now: datetime.datetime,
    *,
    dry_run: bool,
    out: TextIO,
    output: str = "text",
) -> int:
    state, ca_secret, serving_secret = cluster_state(port, targets)
    plan = plan_certificates(state, settings, now)
    actions, problems = cluster_actions(port, targets, plan, ca_secret, serving_secret)
    return _perform(actions, problems, plan, dry_run=dry_run, out=out, output=output)


def _perform(
    actions: Sequence[Action],
    problems: Sequence[str],
    plan: CertPlan,
    *,
    dry_run: bool,
    out: TextIO,
    output: str = "text",
) -> int:
    """Apply the actions (unless a dry run) and say what was done: one line each, or with
    `output` json or yaml the same as data (`actions`, `upToDate`, `notes`, `problems`)."""
    for action in actions:
        if not dry_run:
            action.apply()
        if output == "text":
            print(action.describe(done=not dry_run), file=out)
    if output != "text":
        report = {
            "dryRun": dry_run,
            "actions": [{"action": a.verb, "what": a.what} for a in actions],
            "upToDate": not actions,
            "notes": list(plan.notes),
            "problems": list(problems),
        }
        out.write(dump(report, output))
    else:
        if not actions:
            print("certificates are up to date", file=out)
        for note in plan.notes:
            print(note, file=out)
    for problem in problems:
        print(f"quotaguard certs: {problem}", file=sys.stderr)
    return 1 if problems else 0


# ---- the run on a directory -----------------------------------------------------------------


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def directory_state(directory: Path) -> TlsState:
    def pair(cert: str, key: str) -> KeyPair | None:
        cert_pem, key_pem = _read(directory / cert), _read(directory / key)
        return KeyPair(cert_pem, key_pem) if cert_pem and key_pem else None

    return TlsState(
        ca=pair(CA_CERT_FILE, CA_KEY_FILE),
        trust_bundle=_read(directory / BUNDLE_FILE),
        serving=pair(TLS_CERT_FILE, TLS_KEY_FILE),
    )


def _write_file(path: Path, data: bytes, *, private: bool) -> None:
    """Replace `path` atomically, so a server watching it never reads half a file."""
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)


def directory_actions(directory: Path, plan: CertPlan, state: TlsState) -> list[Action]:
    """Same order as in a cluster: CA, trust bundle, serving pair (key before certificate, so a
    reloading server sees a mismatched pair at worst, which it refuses)."""
    actions: list[Action] = []

    def files(label: str, items: Sequence[tuple[str, bytes, bool]], reason: str) -> None:
        names = ", ".join(str(directory / name) for name, _, _ in items)

        def apply() -> None:
            directory.mkdir(parents=True, exist_ok=True)
            for name, data, private in items:
                _write_file(directory / name, data, private=private)

        actions.append(Action("write", f"{label} {names} ({reason})", apply))

    if plan.ca_reason or state.ca is None:
        files(
            "CA",
            [(CA_KEY_FILE, plan.ca.key_pem, True), (CA_CERT_FILE, plan.ca.cert_pem, False)],
            plan.ca_reason or "absent",
        )
    if plan.bundle_reason:
        files("trust bundle", [(BUNDLE_FILE, plan.trust_bundle, False)], plan.bundle_reason)
    if plan.serving_reason or state.serving is None:
        files(
            "serving certificate",
            [
                (TLS_KEY_FILE, plan.serving.key_pem, True),
                (TLS_CERT_FILE, plan.serving.cert_pem, False),
            ],
            plan.serving_reason or "absent",
        )
    return actions


def run_directory(
    directory: Path,
    settings: CertSettings,
    now: datetime.datetime,
    *,
    dry_run: bool,
    out: TextIO,
    output: str = "text",
) -> int:
    state = directory_state(directory)
    plan = plan_certificates(state, settings, now)
    actions = directory_actions(directory, plan, state)
    return _perform(actions, [], plan, dry_run=dry_run, out=out, output=output)


# ---- the command line -----------------------------------------------------------------------


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "certs",
        help="create and rotate the webhook's CA and serving certificate",
        description=(
            "Create the webhook's CA and serving certificate when absent, renew them before "
            "they expire (keeping a replaced CA trusted until it expires) and write the CA "
            "bundle into both webhook configurations. Valid certificates are left alone."
        ),
        formatter_class=HelpWithDefaults,
    )
    parser.add_argument(
        "--namespace", default="quotaguard-system", help="namespace of the Service and Secrets"
    )
    parser.add_argument(
        "--service", default="quotaguard-webhook", help="the webhook Service the certificate is for"
    )
    parser.add_argument(
        "--secret",
        default="quotaguard-webhook-tls",
        help="Secret for the serving certificate (kubernetes.io/tls + ca.crt)",
    )
    parser.add_argument(
        "--ca-secret", default="quotaguard-webhook-ca", help="Secret for the CA certificate and key"
    )
    parser.add_argument(
        "--mutating-webhook",
        default="00-quotaguard-mutating",
        metavar="NAME",
        help="MutatingWebhookConfiguration to write caBundle into",
    )
    parser.add_argument(
        "--validating-webhook",
        action="append",
        default=None,
        metavar="NAME",
        help=(
            "ValidatingWebhookConfiguration to write caBundle into (repeatable; default "
            f"{' and '.join(VALIDATING_NAMES)})"
        ),
    )
    parser.add_argument(
        "--dns-name",
        action="append",
        default=[],
        metavar="NAME",
        help="an extra DNS name for the serving certificate (repeatable)",
    )
    parser.add_argument(
        "--ip-address",
        action="append",
        default=[],
        metavar="IP",
        help="an IP address for the serving certificate, e.g. 127.0.0.1 (repeatable)",
    )
    parser.add_argument(
        "--ca-validity",
        default="43800h",
        metavar="DURATION",
        help="lifetime of a new CA (5 years)",
    )
    parser.add_argument(
        "--cert-validity",
        default="8760h",
        metavar="DURATION",
        help="lifetime of a new serving certificate (1 year)",
    )
    parser.add_argument(
        "--renew-before",
        default="720h",
        metavar="DURATION",
        help="renew at the latest this long before expiry; renewal starts "
        "anyway once a third of the lifetime is left",
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
        "--out-dir",
        metavar="DIR",
        type=Path,
        help=f"keep the files in DIR ({CA_CERT_FILE}, {CA_KEY_FILE}, {BUNDLE_FILE}, "
        f"{TLS_CERT_FILE}, {TLS_KEY_FILE}) instead of a cluster",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would change, change nothing"
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "yaml"),
        default="text",
        help="text, or what was done as json or yaml",
    )
    parser.set_defaults(run=run)


def _timedelta(flag: str, value: str) -> datetime.timedelta:
    from quotaguard.kube.quantity import QuantityError, parse_duration

    try:
        seconds = parse_duration(value)
    except QuantityError as exc:
        raise CertificateInputError(f"{flag}: {exc}") from exc
    if seconds <= 0:
        raise CertificateInputError(f"{flag}: must be positive")
    return datetime.timedelta(seconds=seconds)


def settings_from_args(args: argparse.Namespace) -> CertSettings:
    import ipaddress

    for address in args.ip_address:
        try:
            ipaddress.ip_address(address)
        except ValueError as exc:
            raise CertificateInputError(f"--ip-address: not an IP address: {address!r}") from exc
    settings = CertSettings(
        service=args.service,
        namespace=args.namespace,
        extra_dns_names=tuple(args.dns_name),
        ip_addresses=tuple(args.ip_address),
        ca_validity=_timedelta("--ca-validity", args.ca_validity),
        cert_validity=_timedelta("--cert-validity", args.cert_validity),
        renew_before=_timedelta("--renew-before", args.renew_before),
    )
    if settings.renew_before >= settings.cert_validity:
        raise CertificateInputError("--renew-before must be shorter than --cert-validity")
    return settings


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except CertificateInputError as exc:
        print(f"quotaguard certs: {exc}", file=sys.stderr)
        return 2
    now = datetime.datetime.now(datetime.UTC)
    try:
        if args.out_dir is not None:
            return run_directory(
                args.out_dir,
                settings,
                now,
                dry_run=args.dry_run,
                out=sys.stdout,
                output=args.output,
            )
        try:
            port = KubernetesCluster.connect(args.kubeconfig, args.context)
        except Exception as exc:  # the config loaders raise several unrelated types
            where = args.kubeconfig or "in-cluster or default kubeconfig"
            print(
                f"quotaguard certs: {where}: cannot load a cluster configuration: {exc}",
                file=sys.stderr,
            )
            return 2
        targets = Targets(
            namespace=args.namespace,
            secret=args.secret,
            ca_secret=args.ca_secret,
            webhook_configurations=(
                (MUTATING, args.mutating_webhook),
                *((VALIDATING, name) for name in args.validating_webhook or VALIDATING_NAMES),
            ),
        )
        return run_cluster(
            port,
            targets,
            settings,
            now,
            dry_run=args.dry_run,
            out=sys.stdout,
            output=args.output,
        )
    except CertsError as exc:
        print(f"quotaguard certs: {exc}", file=sys.stderr)
        return 1
    except ClusterUnreachable as exc:
        print(f"quotaguard certs: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        from quotaguard.kube.documents import read_error

        print(f"quotaguard certs: {exc.filename}: {read_error(exc)}", file=sys.stderr)
        return 2
    except CertificateInputError as exc:
        print(f"quotaguard certs: {exc}", file=sys.stderr)
        return 2
