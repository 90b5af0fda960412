"""`quotaguard review --policy P [INPUT]`: run admission offline, as the webhook would.

INPUT is an AdmissionReview (JSON or YAML) or bare manifests (with `--namespace` or
`metadata.namespace`); several YAML documents or a `kind: List` are reviewed one by one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from quotaguard.commands.common import read_policy


class InputError(Exception):
    """Unusable input: one line for stderr, exit 2."""


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "review",
        help="run admission offline on an AdmissionReview or a manifest",
        description="Run mutation and validation offline and print the AdmissionReview "
        "response (or, with --patched, the object after mutation). Exit 1 when denied.",
    )
    parser.add_argument("--policy", "-p", required=True, metavar="P", help="tenant policy file")
    parser.add_argument(
        "input", nargs="?", default="-", metavar="INPUT", help="file to review, or - for stdin"
    )
    parser.add_argument(
        "--namespace", "-n", help="namespace of a bare manifest (default: metadata.namespace)"
    )
    parser.add_argument(
        "--patched", action="store_true", help="print the object after mutation instead"
    )
    parser.add_argument("--output", "-o", choices=("json", "yaml"), default="json")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from quotaguard.admission import BadReview, review_offline

    policy = read_policy(args.policy)
    if isinstance(policy, int):
        return policy
    name = "<stdin>" if args.input == "-" else args.input
    try:
        reviews = _reviews(_read(args.input, name), name, args.namespace)
    except InputError as exc:
        print(exc, file=sys.stderr)
        return 2
    outputs: list[Any] = []
    denied = False
    for what, body in reviews:
        try:
            response, patched = review_offline(policy, body)
        except BadReview as exc:
            print(f"{name}: {what}: {exc.problem}: {exc}", file=sys.stderr)
            return 2
        answer = response["response"]
        if not answer["allowed"]:
            denied = True
            message = answer.get("status", {}).get("message", "denied")
            print(f"{name}: {what}: denied: {message}", file=sys.stderr)
        outputs.append(patched if args.patched else response)
    _print(outputs, args.output)
    return 1 if denied else 0


def _read(path: str, name: str) -> list[object]:
    from quotaguard.kube.documents import MANIFEST, DocumentError, load_json_or_yaml, read_text

    try:
        if path == "-":
            text = sys.stdin.read(MANIFEST.max_bytes + 1)
        else:
            text = read_text(path, MANIFEST, name)
        return load_json_or_yaml(text, name, MANIFEST)
    except DocumentError as exc:
        raise InputError(str(exc)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise InputError(f"{name}: cannot read: {reason}") from exc


def _reviews(documents: list[object], name: str, namespace: str | None) -> list[tuple[str, object]]:
    from quotaguard.admission import make_review
    from quotaguard.admission.reviews import KIND

    if not documents:
        raise InputError(f"{name}: no object to review")
    found: list[tuple[str, object]] = []
    for number, document in enumerate(_flatten(documents), start=1):
        if not isinstance(document, Mapping):
            raise InputError(f"{name}: document {number} is not an object")
        if document.get("kind") == KIND:
            found.append((f"review {number}", document))
            continue
        what = _describe(document, number)
        metadata = document.get("metadata")
        own = metadata.get("namespace") if isinstance(metadata, Mapping) else None
        target = namespace or (own if isinstance(own, str) else None)
        if not target:
            raise InputError(f"{name}: {what} has no metadata.namespace; pass --namespace")
        found.append((what, make_review(document, namespace=target, uid=f"review-{number}")))
    return found


def _flatten(documents: list[object]) -> list[object]:
    flat: list[object] = []
    for document in documents:
        items = document.get("items") if isinstance(document, Mapping) else None
        if isinstance(document, Mapping) and document.get("kind") == "List":
            flat.extend(items if isinstance(items, list) else [])
        else:
            flat.append(document)
    return flat


def _describe(document: Mapping[str, Any], number: int) -> str:
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return f"{document.get('kind', 'Pod')}/{name or f'#{number}'}"


def _print(outputs: list[Any], output: str) -> None:
    if output == "yaml":
        import yaml

        print(yaml.safe_dump_all(outputs, sort_keys=False), end="")
        return
    print(json.dumps(outputs[0] if len(outputs) == 1 else outputs, indent=2))
