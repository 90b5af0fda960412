"""What several verbs share: reading the policy a command was pointed at."""

from __future__ import annotations

import argparse
import sys

from quotaguard.policy.model import TenantPolicy


def read_policy(path: str) -> TenantPolicy | int:
    """The policy at `path`, or the exit code after printing why not (one line per problem):
    2 when it cannot be read or is not YAML, 1 when it is an invalid policy."""
    from quotaguard.kube.documents import read_error
    from quotaguard.policy.loader import load_policy_file
    from quotaguard.policy.problems import PolicyInvalid

    try:
        return load_policy_file(path)
    except (OSError, UnicodeDecodeError) as exc:
        reason = read_error(exc)
        print(f"{path}: cannot read: {reason}", file=sys.stderr)
        return 2
    except PolicyInvalid as exc:
        for problem in exc.errors:
            print(problem, file=sys.stderr)
        return exc.exit_code


def positive_seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text}") from None
    if not 0 < value < float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be positive and finite: {text}")
    return value


class HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """`--help` that shows each flag's default, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)
