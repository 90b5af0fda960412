"""`quotaguard review --policy P [INPUT]`: run admission offline, as the webhook would.

INPUT is an AdmissionReview (JSON or YAML) or bare manifests (with `--namespace` or
`metadata.namespace`); several YAML documents or a `kind: List` are reviewed one by one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from quotaguard.commands.common import read_policy
from quotaguard.commands.reviewlimits import limit_lines

if TYPE_CHECKING:
    from quotaguard.policy.model import TenantPolicy


class InputError(Exception):
    """Unusable input: one line for stderr, exit 2."""


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "review",
        help="run admission offline on an AdmissionReview or a manifest",
        description="Run mutation and validation offline and print the AdmissionReview "
        "response (or, with --patched, the object after mutation). On a terminal the "
        "default is a readable summary; piped or redirected, the AdmissionReview JSON. "
        "Exit 1 when denied.",
    )
    parser.add_argument(
        "-p", "--policy", required=True, metavar="P", help="tenant policy file, or - for stdin"
    )
    parser.add_argument(
        "input", nargs="?", default="-", metavar="INPUT", help="file to review, or - for stdin"
    )
    parser.add_argument(
        "-n", "--namespace", help="namespace of a bare manifest (default: metadata.namespace)"
    )
    parser.add_argument(
        "--patched", action="store_true", help="print the object after mutation instead"
    )
    parser.add_argument(
        "--runtime",
        action="append",
        default=[],
        metavar="FILE",
        help="ClusterTrainingRuntime / TrainingRuntime manifests a TrainJob may name (repeatable;"
        " runtimes in INPUT count too); with runtimes given, a TrainJob is judged with its "
        "runtime's GPUs and one naming a runtime not given is denied",
    )
    parser.add_argument(
        "--dra",
        action="append",
        default=[],
        metavar="FILE",
        help="ResourceClaimTemplates, ResourceClaims and DeviceClasses that DRA claims name "
        "(as the webhook reads them from the cluster; repeatable; those in INPUT count too)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("summary", "json", "yaml"),
        help="summary, json or yaml (default: summary on a terminal, else json)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from quotaguard.admission import BadReview, answer_offline

    read = _inputs(args)
    if isinstance(read, int):
        return read
    policy, name, reviews, runtimes, dra = read
    output = args.output or ("summary" if sys.stdout.isatty() and not args.patched else "json")
    outputs: list[Any] = []
    summaries: list[str] = []
    denied = False
    for what, body in reviews:
        try:
            response, patched = answer_offline(policy, body, runtimes, dra=dra)
        except BadReview as exc:
            print(f"{name}: {what}: {exc.problem}: {exc}", file=sys.stderr)
            return 2
        answer = response["response"]
        if not answer["allowed"]:
            denied = True
            message = answer.get("status", {}).get("message", "denied")
            if output != "summary":  # the summary says it on stdout
                print(f"{name}: {what}: denied: {message}", file=sys.stderr)
        outputs.append(patched if args.patched else response)
        limits = limit_lines(policy, body, patched) if answer["allowed"] else []
        summaries.append("\n".join([summarize(what, body, response), *limits]))
    if output == "summary":
        print("\n\n".join(summaries))
    else:
        _print(outputs, output)
    return 1 if denied else 0


def _runtimes(documents: list[object], files: list[str]) -> Any:
    """The TrainJob runtimes of `--runtime` files and of the input; None when there are none
    (a TrainJob is then judged by its own resourcesPerNode alone, as without the cache)."""
    from quotaguard.kube.trainingruntime import key_of_runtime, runtimes_of

    given = [d for f in files for d in _flatten(_read(f, f))]
    found = [d for d in _flatten(documents) if key_of_runtime(d) is not None]
    if not given and not found:
        return None
    return runtimes_of([*given, *found])


def _inputs(
    args: argparse.Namespace,
) -> tuple[TenantPolicy, str, list[tuple[str, object]], Any, Any] | int:
    """The policy, the input's name, the reviews to run, the TrainJob runtimes and the DRA
    objects they may read, or the exit code after saying why
    they cannot be had."""
    if args.policy == "-" and args.input == "-":
        print(
            "quotaguard review: --policy - and INPUT - both read standard input; "
            "give one of them as a file",
            file=sys.stderr,
        )
        return 2
    policy = read_policy(args.policy)
    if isinstance(policy, int):
        return policy
    name = "<stdin>" if args.input == "-" else args.input
    try:
        documents = _read(args.input, name)
        runtimes = _runtimes(documents, args.runtime)
        reviews, skipped = _reviews(documents, name, args.namespace)
        dra = _dra_objects(args.dra, documents, args.namespace)
    except InputError as exc:
        print(exc, file=sys.stderr)
        return 2
    for what in skipped:
        print(f"{name}: {what}: skipped: cluster-scoped, not a workload", file=sys.stderr)
    if not reviews:
        print(
            f"{name}: expected an AdmissionReview or workload manifests (Pod, Job, ...); "
            f"found only {', '.join(skipped)}",
            file=sys.stderr,
        )
        return 2
    return policy, name, reviews, runtimes, dra


def _read(path: str, name: str) -> list[object]:
    from quotaguard.kube.documents import (
        MANIFEST,
        DocumentError,
        load_json_or_yaml,
        read_error,
        read_input,
    )

    try:
        return load_json_or_yaml(read_input(path, MANIFEST), name, MANIFEST)
    except DocumentError as exc:
        raise InputError(str(exc)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        reason = read_error(exc)
        raise InputError(f"{name}: cannot read: {reason}") from exc


def _dra_objects(files: list[str], documents: list[object], namespace: str | None) -> Any:
    """The DRA objects of the --dra files and of the input (a `DraLookup`)."""
    from quotaguard.kube.dra import dra_objects

    found = [item for path in files for item in _flatten(_read(path, path))]
    return dra_objects([*found, *_flatten(documents)], namespace=namespace)


def _reviews(
    documents: list[object], name: str, namespace: str | None
) -> tuple[list[tuple[str, object]], list[str]]:
    """The reviews to run, and the objects skipped: those of a kind admission does not handle
    and without a namespace (a Namespace, ClusterQueue, ResourceFlavor in the same file)."""
    from quotaguard.admission import make_review
    from quotaguard.admission.reviews import KIND
    from quotaguard.kube.kinds import kind_of

    if not documents:
        raise InputError(f"{name}: no object to review")
    found: list[tuple[str, object]] = []
    skipped: list[str] = []
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
        if not target and kind_of(document) is None and "kind" in document:
            skipped.append(what)
            continue
        if not target:
            raise InputError(f"{name}: {what} has no metadata.namespace; pass --namespace")
        found.append((what, make_review(document, namespace=target, uid=f"review-{number}")))
    return found, skipped


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


def summarize(what: str, review: Any, response: Mapping[str, Any]) -> str:
    """What admission did to one object, for a person: the verdict, the tenant, each change
    and warning, and why it was denied."""
    answer = response.get("response") or {}
    audit = answer.get("auditAnnotations") or {}
    changes = [
        (label, change)
        for key, label in (("rewritten", "rewrote"), ("kept", "kept"), ("restored", "restored"))
        for change in audit.get(key, "").split("; ")
        if change
    ]
    return "\n".join(
        [
            _headline(what, review, answer),
            *(f"  {label}: {change}" for label, change in changes),
            *_patch_line(answer),
            *_warning_lines(answer.get("warnings") or (), [c for _, c in changes]),
            *_denial_lines(answer),
        ]
    )


def _headline(what: str, review: Any, answer: Mapping[str, Any]) -> str:
    request = review.get("request") if isinstance(review, Mapping) else None
    namespace = request.get("namespace") if isinstance(request, Mapping) else None
    tenant = (answer.get("auditAnnotations") or {}).get("tenant")
    verdict = (
        "denied" if not answer.get("allowed") else "changed" if answer.get("patch") else "allowed"
    )
    where = f" in {namespace}" if namespace else ""
    return f"{what}{where}: {verdict} ({f'tenant {tenant}' if tenant else 'no tenant'})"


def _patch_line(answer: Mapping[str, Any]) -> list[str]:
    import base64

    if not answer.get("patch"):
        return []
    count = len(json.loads(base64.b64decode(answer["patch"])))
    return [f"  patch: {count} JSON patch operation{'s' if count != 1 else ''}"]


def _warning_lines(warnings: Sequence[str], changes: Sequence[str]) -> list[str]:
    """A rewrite's warning repeats the change with its reason: only the reason is shown, once
    for all the changes it explains (several containers of one template share a rule). When
    the changes have different reasons, each reason names the containers it is for."""
    reasons: dict[str, list[str]] = {}
    lines: list[str | None] = []  # None: the place of the next reason
    for warning in warnings:
        change = next((c for c in changes if warning.startswith(f"{c} (")), None)
        if change is None:
            lines.append(f"  warning: {warning}")
            continue
        reason = warning[len(change) + 2 : -1]
        if reason not in reasons:
            reasons[reason] = []
            lines.append(None)
        reasons[reason].append(change.partition(": ")[0])
    ordered = iter(reasons.items())
    return [line if line is not None else _because(*next(ordered), len(reasons)) for line in lines]


def _because(reason: str, containers: list[str], distinct: int) -> str:
    if distinct == 1:
        return f"  because: {reason}"
    return f"  because: {reason} (for {', '.join(dict.fromkeys(containers))})"


def _denial_lines(answer: Mapping[str, Any]) -> list[str]:
    if answer.get("allowed"):
        return []
    lines = [f"  why: {answer.get('status', {}).get('message', 'denied')}"]
    rules = (answer.get("auditAnnotations") or {}).get("denied")
    return lines + ([f"  rules: {rules.replace(',', ', ')}"] if rules else [])
