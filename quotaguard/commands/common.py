"""What several verbs share: reading the policy a command was pointed at."""

from __future__ import annotations

import sys

from quotaguard.policy.model import TenantPolicy


def read_policy(path: str) -> TenantPolicy | int:
    """The policy at `path`, or the exit code after printing why not (one line per problem):
    2 when it cannot be read or is not YAML, 1 when it is an invalid policy."""
    from quotaguard.policy.loader import load_policy_file
    from quotaguard.policy.problems import PolicyInvalid

    try:
        return load_policy_file(path)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"{path}: cannot read: {reason}", file=sys.stderr)
        return 2
    except PolicyInvalid as exc:
        for problem in exc.errors:
            print(problem, file=sys.stderr)
        return exc.exit_code
