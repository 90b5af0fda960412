"""`--showback-csv FILE` of `plan` and `simulate`: the showback object as CSV."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any


def write_showback_csv(path: str, showback: Mapping[str, Any]) -> int:
    """Write the CSV to `path` (`-`: standard output); the exit code: 0, or 2 when the file
    cannot be written (said on standard error)."""
    from quotaguard.kube.documents import read_error
    from quotaguard.quota.showback_report import to_csv

    text = to_csv(showback)
    if path == "-":
        sys.stdout.write(text)
        return 0
    try:
        with open(path, "w", encoding="utf-8", newline="") as out:
            out.write(text)
    except OSError as exc:
        print(f"{path}: cannot write: {read_error(exc)}", file=sys.stderr)
        return 2
    return 0
