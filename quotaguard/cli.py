"""`quotaguard VERB ...`: one parser, one module per verb under `quotaguard.commands`.

Exit codes for every verb: 0 success, 1 the answer is "no", 2 usage or input error.
Verb modules import their heavy dependencies inside `run`, so `quotaguard validate` does not
pay for the Kubernetes client.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from quotaguard import __version__

VERBS = (
    "validate",
    "review",
    "test",
    "plan",
    "serve",
    "simulate",
    "trace",
    "certs",
    "registrations",
)


class UsageError(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


class Parser(argparse.ArgumentParser):
    """argparse that lets `main` word its errors (a misspelt flag first, with a suggestion),
    and takes flags only as spelt in full: `--pol` is not `--policy` (a script that relies on
    an abbreviation breaks when a flag that shares the prefix is added)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="quotaguard",
        description="GPU queue-and-quota policy for Kubernetes (Kueue and Volcano).",
    )
    parser.add_argument("--version", action="version", version=f"quotaguard {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb in VERBS:
        importlib.import_module(f"quotaguard.commands.{verb}").register(verbs)
    return parser


def _subparser(parser: argparse.ArgumentParser, verb: str) -> argparse.ArgumentParser | None:
    """The parser of `verb`, or of `verb source` (`trace from-prometheus`)."""
    found = parser
    for word in verb.split():
        actions = [a for a in found._actions if isinstance(a, argparse._SubParsersAction)]
        below: argparse.ArgumentParser | None = actions[0].choices.get(word) if actions else None
        if below is None:
            return None
        found = below
    return found


def _verb_of(parser: argparse.ArgumentParser, words: Sequence[str]) -> str | None:
    """The verb the words name, with its source when the verb has sources and one is named."""
    if not words or words[0] not in VERBS:
        return None
    if len(words) > 1 and _subparser(parser, f"{words[0]} {words[1]}") is not None:
        return f"{words[0]} {words[1]}"
    return words[0]


def _unknown_flags(
    parser: argparse.ArgumentParser, verb: str | None, words: Sequence[str]
) -> list[str]:
    where = (_subparser(parser, verb) if verb else None) or parser
    known = {o for a in where._actions for o in a.option_strings}
    flags = [w.split("=", 1)[0] for w in words if w.startswith("-") and w != "-"]
    return [f for f in flags if f not in known]


def unknown_flag_message(
    parser: argparse.ArgumentParser, verb: str | None, extra: Sequence[str]
) -> str:
    """`quotaguard VERB: unknown flag --polcy (did you mean --policy?)`, as kubectl says it."""
    where = _subparser(parser, verb) if verb else None
    known = [o for a in (where or parser)._actions for o in a.option_strings]
    flag = next((e for e in extra if e.startswith("-")), extra[0])
    name = flag.split("=", 1)[0]
    prog = f"quotaguard {verb}" if verb else "quotaguard"
    if not name.startswith("-"):
        return f"{prog}: unexpected argument {name!r} (see `{prog} --help`)"
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else f" (see `{prog} --help`)"
    return f"{prog}: unknown flag {name}{hint}"


def unknown_verb_message(word: str) -> str | None:
    if word.startswith("-") or word in VERBS:
        return None
    close = difflib.get_close_matches(word, VERBS, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"quotaguard: unknown verb {word!r}{hint} (verbs: {', '.join(VERBS)})"


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not words:
        parser.print_help()
        return 0
    message = unknown_verb_message(words[0])
    if message is not None:
        print(message, file=sys.stderr)
        return 2
    verb = _verb_of(parser, words)
    try:
        args, extra = parser.parse_known_args(words)
    except UsageError as exc:
        # A misspelt flag explains a missing required one better than argparse does.
        unknown = _unknown_flags(parser, verb, words[len(verb.split()) if verb else 1 :])
        if unknown:
            print(unknown_flag_message(parser, verb, unknown), file=sys.stderr)
        else:
            exc.parser.print_usage(sys.stderr)
            print(f"{exc.parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    if extra:
        print(unknown_flag_message(parser, verb, extra), file=sys.stderr)
        return 2
    try:
        code: int = args.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
