"""`quotaguard validate PATH...`: every problem of every policy file, FILE:LINE:COLUMN each."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from quotaguard.kube.documents import read_error
from quotaguard.policy.loader import PolicyDocument, load_policy_documents, policy_files
from quotaguard.policy.problems import format_path


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "validate",
        help="validate tenant policy files or directories of them",
        description="Validate tenant policies: schema, unknown fields and cross-checks, "
        "every problem at once as FILE:LINE:COLUMN: message.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="policy file or directory")
    parser.add_argument(
        "--strict", action="store_true", help="treat warnings as errors (exit 1 on any)"
    )
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    documents: list[PolicyDocument] = []
    for file, explicit in policy_files(args.paths):
        try:
            text = open(file, encoding="utf-8").read()  # noqa: SIM115 - one-shot read
        except (OSError, UnicodeDecodeError) as exc:
            print(f"{file}: cannot read: {read_error(exc)}", file=sys.stderr)
            return 2
        documents.extend(load_policy_documents(text, file, require_policy=explicit))
    if not documents:
        print(f"{' '.join(args.paths)}: no TenantPolicy found", file=sys.stderr)
        return 2
    problems = [problem for document in documents for problem in document.problems]
    failing = [p for p in problems if p.severity == "error" or args.strict]
    if args.output == "json":
        print(json.dumps(_json(documents), indent=2))
    else:
        for problem in problems:
            print(problem, file=sys.stderr)
        for document in documents:
            print(_summary(document))
    if any(document.unparsable for document in documents):
        return 2  # not YAML: an input error, as a missing file is
    return 1 if failing else 0


def _summary(document: PolicyDocument) -> str:
    errors = len(document.errors)
    warnings = len(document.problems) - errors
    if document.policy is None:
        return f"{document.file}: invalid ({errors} error(s), {warnings} warning(s))"
    spec = document.policy.spec
    return (
        f"{document.file}: policy {document.policy.name!r} is valid "
        f"({len(spec.tenants)} tenants, {len(spec.gpu_classes)} GPU classes, "
        f"{warnings} warning(s))"
    )


def _json(documents: list[PolicyDocument]) -> list[dict[str, Any]]:
    return [
        {
            "file": document.file,
            "valid": document.policy is not None,
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
