"""What several verbs share: reading the policy a command was pointed at."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence

from quotaguard.policy.model import TenantPolicy


def read_policy_text(path: str) -> str | int:
    """The text of the policy file at `path` (`-`: standard input, within the policy's size
    bound), or 2 after printing why it cannot be read."""
    from quotaguard.kube.documents import POLICY, DocumentError, read_error, read_input, source_name

    try:
        return read_input(path, POLICY)
    except DocumentError as exc:
        print(exc, file=sys.stderr)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"{source_name(path)}: cannot read: {read_error(exc)}", file=sys.stderr)
    return 2


def read_policy(path: str) -> TenantPolicy | int:
    """The policy at `path` (`-`: standard input), or the exit code after printing why not
    (one line per problem): 2 when it cannot be read, is not YAML or holds no TenantPolicy at
    all (another kind of file), 1 when it is an invalid policy."""
    from quotaguard.kube.documents import source_name
    from quotaguard.policy.loader import load_policy_text
    from quotaguard.policy.problems import PolicyInvalid

    name = source_name(path)
    text = read_policy_text(path)
    if isinstance(text, int):
        return text
    wrong = not_a_policy(text, name)
    if wrong is not None:
        print(wrong, file=sys.stderr)
        return 2
    try:
        return load_policy_text(text, name)
    except PolicyInvalid as exc:
        for problem in exc.errors:
            print(problem, file=sys.stderr)
        return exc.exit_code


def not_a_policy(text: str, name: str) -> str | None:
    """What to say when a text meant as a policy holds none, nor a near miss of one (another
    kind of file: a Deployment given as --policy), else None."""
    from quotaguard.kube.documents import POLICY, DocumentError, load_yaml
    from quotaguard.policy.loader import holds_no_policy
    from quotaguard.policy.model import API_VERSION, KIND

    if not holds_no_policy(text, name):
        return None
    try:
        documents = load_yaml(text, name, POLICY)
    except DocumentError:
        return None
    return f"{name}: expected a {KIND} (apiVersion {API_VERSION}); found {describe(documents)}"


def describe(documents: Sequence[object]) -> str:
    """`Deployment (apps/v1)`, `2 documents: ...`, or `nothing` for what a file holds."""
    kinds = [_describe_one(document) for document in documents if document is not None]
    if not kinds:
        return "nothing (an empty document)"
    shown = ", ".join(dict.fromkeys(kinds))
    return shown if len(kinds) == 1 else f"{len(kinds)} documents: {shown}"


def _describe_one(document: object) -> str:
    if isinstance(document, Mapping):
        kind, api_version = document.get("kind"), document.get("apiVersion")
        if isinstance(kind, str):
            return f"{kind} ({api_version})" if isinstance(api_version, str) else kind
        return "a mapping without kind"
    if isinstance(document, list):
        return "a list"
    return f"a {type(document).__name__}"


def stdin_twice(args: argparse.Namespace, flags: tuple[str, ...]) -> int | None:
    """Exit 2 after saying so when two of these flags both name standard input (`-`)."""
    given = [f"--{flag.replace('_', '-')}" for flag in flags if getattr(args, flag, None) == "-"]
    if len(given) < 2:
        return None
    print(
        f"{' and '.join(given)} {'both' if len(given) == 2 else 'all'} read standard input; "
        "give all but one as files",
        file=sys.stderr,
    )
    return 2


def dump(data: object, output: str) -> str:
    """Data as `-o json` or `-o yaml` prints it (keys in their order), ending in a newline."""
    if output == "yaml":
        import yaml

        return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    import json

    return json.dumps(data, indent=2) + "\n"


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
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)
