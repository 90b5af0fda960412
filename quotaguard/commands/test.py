"""`quotaguard test` (not implemented yet)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser("test", help="(not implemented yet)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    print("quotaguard test: not implemented yet", file=sys.stderr)
    return 2
