"""`quotaguard VERB ...`: one parser, one module per verb under `quotaguard.commands`.

Exit codes for every verb: 0 success, 1 the answer is "no", 2 usage or input error.
Verb modules import their heavy dependencies inside `run`, so `quotaguard validate` does not
pay for the Kubernetes client.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from quotaguard import __version__

VERBS = ("validate", "review", "test", "plan", "serve", "simulate", "certs")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="quotaguard",
        description="GPU queue-and-quota policy for Kubernetes (Kueue and Volcano).",
    )
    parser.add_argument("--version", action="version", version=f"quotaguard {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb in VERBS:
        importlib.import_module(f"quotaguard.commands.{verb}").register(verbs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
