"""`quotaguard test PATH...`: run the policy test suites (kind PolicyTest) kept with a policy."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "test",
        help="run policy test suites (kind PolicyTest)",
        description="Run each case of the PolicyTest suites in the given files or directories "
        "through offline admission; print PASS or FAIL per case, exit 1 on any failure.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="suite file or directory")
    parser.add_argument(
        "--quiet", "-q", action="store_true", help="print failing cases and the summary only"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from quotaguard.admission.suites import LoadedSuite, SuiteInvalid, load_suites, run_case
    from quotaguard.kube.documents import MANIFEST, DocumentError, read_text
    from quotaguard.policy.loader import load_policy_file, policy_files
    from quotaguard.policy.model import TenantPolicy
    from quotaguard.policy.problems import PolicyInvalid

    suites: list[LoadedSuite] = []
    for file, explicit in policy_files(args.paths):
        if explicit and not Path(file).exists():
            print(f"{file}: no such file or directory", file=sys.stderr)
            return 2
        try:
            text = read_text(file, MANIFEST)
            suites.extend(load_suites(text, file, required=explicit))
        except DocumentError as exc:
            print(exc, file=sys.stderr)
            return 2
        except (OSError, UnicodeDecodeError) as exc:
            print(f"{file}: cannot read: {exc}", file=sys.stderr)
            return 2
        except SuiteInvalid as exc:
            print(exc, file=sys.stderr)
            return 2
    if not suites:
        print(f"{' '.join(args.paths)}: no PolicyTest suite found", file=sys.stderr)
        return 2
    policies: dict[Path, TenantPolicy] = {}
    passed = failed = 0
    for suite in suites:
        path = suite.policy_path.resolve()
        if path not in policies:
            try:
                policies[path] = load_policy_file(suite.policy_path)
            except OSError as exc:
                print(f"{suite.file}: policy {suite.suite.policy}: {exc}", file=sys.stderr)
                return 2
            except PolicyInvalid as exc:
                print(f"{suite.file}: policy {suite.suite.policy} is invalid:", file=sys.stderr)
                print(exc, file=sys.stderr)
                return exc.exit_code
        print(f"{suite.file}: {suite.suite.metadata.name} (policy {suite.suite.policy})")
        for case in suite.suite.cases:
            result = run_case(policies[path], suite, case)
            if result.passed:
                passed += 1
                if not args.quiet:
                    print(f"  PASS  {case.name}")
                continue
            failed += 1
            print(f"  FAIL  {case.name}")
            for line in result.failures:
                print(f"          {line}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0
