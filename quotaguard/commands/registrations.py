"""`quotaguard registrations --policy P [--out-dir DIR]`: the webhook configurations that send
every resource name the policy governs.

The shipped registrations (webhook/*.yaml, the Helm chart) send pods asking for nvidia.com/,
DRA's implicit and accelerator-like names. A policy class of another name
(`example.com/a100-slice`) is not sent by them: a tenant asking for it alone would pass
unjudged and unqueued. This verb prints (or writes) the three configurations with the policy's
other names added to every name check.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quotaguard.commands.common import read_policy

# the generated files, as webhook/ names them (a kustomization can take them in its place)
CONFIGURATION_FILES = (
    "webhook/mutatingwebhookconfiguration.yaml",
    "webhook/validatingwebhookconfiguration.yaml",
    "webhook/validatingwebhookconfiguration-resources.yaml",
)


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "registrations",
        help="print the webhook configurations that send every resource name a policy governs",
        description="Print the webhook configurations (mutating, validating, "
        "validating-resources) whose matchConditions send, besides nvidia.com/, DRA and "
        "accelerator-like names, every GPU resource name the policy declares "
        "(gpuClasses[].resource, gpuClasses[].dra.extendedResourceName). Without such names "
        "the output is webhook/*.yaml as shipped.",
    )
    parser.add_argument("-p", "--policy", required=True, help="tenant policy file, or -")
    parser.add_argument(
        "--out-dir",
        metavar="DIR",
        help="write the three files into DIR (webhook/'s names) instead of printing them",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="instead, compare the cluster's registrations with the policy: exit 1, naming "
        "them, when they do not send a name the policy governs",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="with --check; without it, as kubectl: $KUBECONFIG, ~/.kube/config, in-cluster",
    )
    parser.add_argument(
        "--context", metavar="NAME", help="with --check: kubeconfig context (default: the current)"
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json", "names"),
        default="yaml",
        help="yaml (default), json (a v1 List), or names: only the names added, one a line",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from quotaguard.policy.sent_names import names_to_send
    from quotaguard.webhook.name_widening import ExtraNameError
    from quotaguard.webhook.registrations import configurations, render

    policy = read_policy(args.policy)
    if isinstance(policy, int):
        return policy
    names = names_to_send(policy)
    if args.check:
        return _check(args, names)
    try:
        rendered = render(names)
    except ExtraNameError as exc:
        print(f"{args.policy}: {exc}", file=sys.stderr)
        return 1
    files = {path: rendered[path] for path in CONFIGURATION_FILES}
    if args.out_dir is not None:
        return _write(Path(args.out_dir), files)
    if args.output == "names":
        print("".join(f"{name}\n" for name in names), end="")
    elif args.output == "json":
        listed = {"apiVersion": "v1", "kind": "List", "items": configurations(names)}
        print(json.dumps(listed, indent=2))
    else:
        print("---\n".join(files.values()), end="")
    return 0


def _write(directory: Path, files: dict[str, str]) -> int:
    """Write the files into `directory` (made when missing), or 2 after saying why not."""
    from quotaguard.kube.documents import read_error

    try:
        directory.mkdir(parents=True, exist_ok=True)
        for path, text in files.items():
            target = directory / Path(path).name
            target.write_text(text)
            print(f"wrote {target}")
    except OSError as exc:
        print(f"{directory}: cannot write: {read_error(exc)}", file=sys.stderr)
        return 2
    return 0


def _check(args: argparse.Namespace, names: tuple[str, ...]) -> int:
    """Exit 0 when the cluster's three configurations send every name, 1 naming those they do
    not (or the configurations missing), 2 when the cluster cannot be read."""
    from quotaguard.policy.sent_names import names_not_sent
    from quotaguard.webhook.registrations import MUTATING, VALIDATING, VALIDATING_RESOURCES

    wanted = (
        ("MutatingWebhookConfiguration", MUTATING),
        ("ValidatingWebhookConfiguration", VALIDATING),
        ("ValidatingWebhookConfiguration", VALIDATING_RESOURCES),
    )
    try:
        read = _configuration_reader(args.kubeconfig, args.context)
        found = {name: read(kind, name) for kind, name in wanted}
    except _Unreadable as exc:
        print(f"quotaguard registrations: {exc}", file=sys.stderr)
        return 2
    absent = [name for name, config in found.items() if config is None]
    if absent:
        print(
            f"quotaguard registrations: not in the cluster: {', '.join(absent)} "
            "(quotaguard's webhooks are not installed as shipped)",
            file=sys.stderr,
        )
        return 1
    missing = names_not_sent([c for c in found.values() if c is not None], names)
    for name in missing:
        print(
            f"{args.policy}: {name}: the cluster's webhook registrations do not send a pod "
            "asking for it, so such a pod is neither queued nor checked; apply `quotaguard "
            f"registrations --policy {args.policy}` (or upgrade the Helm release)",
            file=sys.stderr,
        )
    if not missing:
        print(
            f"the cluster's webhook registrations send every resource name of {args.policy} "
            f"({len(names)} beyond the default ones)"
        )
    return 1 if missing else 0


class _Unreadable(Exception):
    """The cluster's webhook configurations cannot be read (exit 2)."""


def _configuration_reader(
    kubeconfig: str | None, context: str | None
) -> Callable[[str, str], dict[str, Any] | None]:
    """Read a webhook configuration by kind and name: its JSON, None when absent."""
    from quotaguard.kube.client import api_client, status_code

    try:
        from kubernetes import client

        admission = client.AdmissionregistrationV1Api(api_client(kubeconfig, context=context))
    except Exception as exc:  # the config loaders raise several unrelated types
        where = kubeconfig or "in-cluster or default kubeconfig"
        raise _Unreadable(f"{where}: cannot load a cluster configuration: {exc}") from exc

    def read(kind: str, name: str) -> dict[str, Any] | None:
        noun = "mutating" if kind.startswith("Mutating") else "validating"
        call = getattr(admission, f"read_{noun}_webhook_configuration")
        try:
            response = call(name, _preload_content=False, _request_timeout=10)
        except Exception as exc:
            status = status_code(exc)
            if status == 404:
                return None
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise _Unreadable(f"read {kind} {name}: {reason}") from exc
        loaded: dict[str, Any] = json.loads(response.data)
        return loaded

    return read
