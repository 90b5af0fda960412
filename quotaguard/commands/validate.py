"""`quotaguard validate PATH...`: every problem of every policy file, FILE:LINE:COLUMN each."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from quotaguard.commands.common import dump, not_a_policy, read_policy_text
from quotaguard.kube.documents import source_name
from quotaguard.policy.loader import PolicyDocument, load_policy_documents, policy_files
from quotaguard.policy.problems import format_path


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "validate",
        help="validate tenant policy files or directories of them",
        description="Validate tenant policies: schema, unknown fields and cross-checks, "
        "every problem at once as FILE:LINE:COLUMN: message. A file named explicitly must "
        "hold a TenantPolicy (exit 2 when it holds another kind); - reads standard input.",
    )
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="policy file or directory, or - for stdin"
    )
    parser.add_argument(
        "--strict", action="store_true", help="treat warnings as errors (exit 1 on any)"
    )
    parser.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    documents = _documents(args.paths)
    if isinstance(documents, int):
        return documents
    problems = [problem for document in documents for problem in document.problems]
    failing = [p for p in problems if p.severity == "error" or args.strict]
    if args.output in ("json", "yaml"):
        print(dump(_json(documents, strict=args.strict), args.output), end="")
    else:
        for problem in problems:
            print(problem, file=sys.stderr)
        for document in documents:
            print(_summary(document, strict=args.strict))
    if any(document.unparsable for document in documents):
        return 2  # not YAML: an input error, as a missing file is
    return 1 if failing else 0


def _documents(paths: list[str]) -> list[PolicyDocument] | int:
    """The policy documents of the paths, or the exit code after saying why they cannot be
    read (a file named explicitly that holds another kind: every such file is named)."""
    documents: list[PolicyDocument] = []
    wrong_kind = False
    for file, explicit in policy_files(paths):
        name = source_name(file)
        text = read_policy_text(file)
        if isinstance(text, int):
            return text
        wrong = not_a_policy(text, name) if explicit else None
        if wrong is not None:
            print(wrong, file=sys.stderr)
            wrong_kind = True
            continue
        documents.extend(load_policy_documents(text, name, require_policy=explicit))
    if wrong_kind:
        return 2
    if not documents:
        print(f"{' '.join(paths)}: no TenantPolicy found", file=sys.stderr)
        return 2
    return documents


def _summary(document: PolicyDocument, *, strict: bool) -> str:
    errors = len(document.errors)
    warnings = len(document.problems) - errors
    if document.policy is None:
        return f"{document.file}: invalid ({errors} error(s), {warnings} warning(s))"
    if strict and warnings:
        return (
            f"{document.file}: policy {document.policy.name!r} fails --strict "
            f"({warnings} warning(s), counted as errors)"
        )
    spec = document.policy.spec
    return (
        f"{document.file}: policy {document.policy.name!r} is valid "
        f"({len(spec.tenants)} tenants, {len(spec.gpu_classes)} GPU classes, "
        f"{warnings} warning(s))"
    )


def _json(documents: list[PolicyDocument], *, strict: bool) -> list[dict[str, Any]]:
    return [
        {
            "file": document.file,
            "valid": document.policy is not None
            and not (strict and len(document.problems) > len(document.errors)),
            "problems": [
                {
                    "line": p.line,
                    "column": p.column,
                    "severity": p.severity,
                    "field": format_path(p.path),
                    "message": p.message,
                }
                for p in document.problems
            ],
        }
        for document in documents
    ]
