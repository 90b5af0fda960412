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
