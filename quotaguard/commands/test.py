"""`quotaguard test PATH...`: run the policy test suites (kind PolicyTest) kept with a policy."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quotaguard.commands.common import dump
from quotaguard.kube.documents import read_error

if TYPE_CHECKING:  # the suites module (pydantic, admission) loads only when tests run
    from quotaguard.admission.suites import LoadedSuite
    from quotaguard.policy.model import TenantPolicy


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "test",
        help="run policy test suites (kind PolicyTest)",
        description="Run each case of the PolicyTest suites in the given files or directories "
        "through offline admission; print PASS or FAIL per case, exit 1 on any failure.",
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="suite file or directory, or - for stdin (its paths then relative to the "
        "current directory)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="print failing cases and the summary only"
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "yaml", "junit"),
        default="text",
        help="text, json, yaml, or junit XML for CI test reports",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from quotaguard.admission.suites import run_case

    if isinstance(suites := _suites(args.paths), int):
        return suites
    if not suites:
        print(f"{' '.join(args.paths)}: no PolicyTest suite found", file=sys.stderr)
        return 2
    policies: dict[Path, TenantPolicy] = {}
    runs: list[CaseRun] = []
    for suite in suites:
        path = suite.policy_path.resolve()
        if path not in policies:
            if isinstance(policy := _policy(suite), int):
                return policy
            policies[path] = policy
        for case in suite.suite.cases:
            started = time.perf_counter()
            result = run_case(policies[path], suite, case)
            runs.append(CaseRun(suite, case.name, result.failures, time.perf_counter() - started))
    if args.output in ("json", "yaml"):
        print(dump(as_data(runs), args.output), end="")
    elif args.output == "junit":
        print(as_junit(runs))
    else:
        print(as_text(runs, quiet=args.quiet))
    return 1 if any(run.failures for run in runs) else 0


def _suites(paths: list[str]) -> list[LoadedSuite] | int:
    """Every suite of the paths, or the exit code after saying why one cannot be read."""
    from quotaguard.admission.suites import SuiteInvalid, load_suites
    from quotaguard.kube.documents import (
        MANIFEST,
        STDIN,
        DocumentError,
        read_input,
        source_name,
    )
    from quotaguard.policy.loader import policy_files

    suites: list[LoadedSuite] = []
    for file, explicit in policy_files(paths):
        if explicit and file != STDIN and not Path(file).exists():
            print(f"{file}: no such file or directory", file=sys.stderr)
            return 2
        try:
            text = read_input(file, MANIFEST)
            suites.extend(load_suites(text, source_name(file), required=explicit))
        except (DocumentError, SuiteInvalid) as exc:
            print(exc, file=sys.stderr)
            return 2
        except (OSError, UnicodeDecodeError) as exc:
            print(f"{source_name(file)}: cannot read: {read_error(exc)}", file=sys.stderr)
            return 2
    return suites


def _policy(suite: LoadedSuite) -> TenantPolicy | int:
    """The suite's policy, or the exit code after saying why it cannot be used."""
    from quotaguard.policy.loader import load_policy_file
    from quotaguard.policy.problems import PolicyInvalid

    try:
        return load_policy_file(suite.policy_path)
    except OSError as exc:
        reason = read_error(exc)
        print(f"{suite.file}: policy {suite.suite.policy}: {reason}", file=sys.stderr)
        return 2
    except PolicyInvalid as exc:
        print(f"{suite.file}: policy {suite.suite.policy} is invalid:", file=sys.stderr)
        print(exc, file=sys.stderr)
        return exc.exit_code


@dataclass(frozen=True)
class CaseRun:
    suite: LoadedSuite
    name: str
    failures: list[str]
    seconds: float


def as_text(runs: list[CaseRun], *, quiet: bool) -> str:
    lines: list[str] = []
    current: LoadedSuite | None = None
    for run in runs:
        if run.suite is not current:
            current = run.suite
            suite = run.suite.suite
            lines.append(f"{run.suite.file}: {suite.metadata.name} (policy {suite.policy})")
        if run.failures:
            lines.append(f"  FAIL  {run.name}")
            lines += [f"          {line}" for line in run.failures]
        elif not quiet:
            lines.append(f"  PASS  {run.name}")
    failed = sum(1 for run in runs if run.failures)
    lines.append(f"{len(runs) - failed} passed, {failed} failed")
    return "\n".join(lines)


def as_data(runs: list[CaseRun]) -> dict[str, Any]:
    failed = sum(1 for run in runs if run.failures)
    return {
        "passed": len(runs) - failed,
        "failed": failed,
        "cases": [
            {
                "file": run.suite.file,
                "suite": run.suite.suite.metadata.name,
                "policy": run.suite.suite.policy,
                "name": run.name,
                "passed": not run.failures,
                "failures": run.failures,
            }
            for run in runs
        ],
    }


def as_junit(runs: list[CaseRun]) -> str:
    """JUnit XML as CI systems read it: a testsuite per PolicyTest suite, a testcase per case,
    a <failure> with every unmet expectation."""
    from xml.etree import ElementTree

    root = ElementTree.Element("testsuites", name="quotaguard test")
    suites: dict[int, ElementTree.Element] = {}
    for run in runs:
        element = suites.get(id(run.suite))
        if element is None:
            name = f"{run.suite.file}: {run.suite.suite.metadata.name}"
            element = suites[id(run.suite)] = ElementTree.SubElement(root, "testsuite", name=name)
        case = ElementTree.SubElement(
            element,
            "testcase",
            name=run.name,
            classname=run.suite.suite.metadata.name,
            time=f"{run.seconds:.6f}",
        )
        if run.failures:
            failure = ElementTree.SubElement(case, "failure", message=run.failures[0])
            failure.text = "\n".join(run.failures)
    for element in [root, *suites.values()]:
        cases = element.iter("testcase")
        total = failed = 0
        for case in cases:
            total += 1
            failed += case.find("failure") is not None
        element.set("tests", str(total))
        element.set("failures", str(failed))
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, "unicode")
