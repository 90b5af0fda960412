"""Problems found in a policy, located by field path and, once placed, by FILE:LINE:COLUMN."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Path = tuple[str | int, ...]
Severity = Literal["error", "warning"]


def format_path(path: Path) -> str:
    """`spec.tenants[0].quota.h100` from ("spec", "tenants", 0, "quota", "h100")."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif text:
            text += f".{part}"
        else:
            text = part
    return text


@dataclass(frozen=True, slots=True)
class Problem:
    path: Path
    message: str
    severity: Severity = "error"


@dataclass(frozen=True, slots=True)
class LocatedProblem:
    file: str
    line: int
    column: int
    path: Path
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        field = format_path(self.path)
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{where}: {prefix}{field + ': ' if field else ''}{self.message}"


class PolicyInvalid(Exception):
    """A policy file that must not be used; `problems` holds every reason at once."""

    def __init__(self, problems: Sequence[LocatedProblem], *, unparsable: bool = False) -> None:
        self.problems = list(problems)
        # Not YAML at all: the command line reports it as an input error (exit 2), where a
        # policy that parses but is wrong is the answer "no" (exit 1).
        self.unparsable = unparsable
        super().__init__("\n".join(str(p) for p in self.errors) or "invalid policy")

    @property
    def exit_code(self) -> int:
        return 2 if self.unparsable else 1

    @property
    def errors(self) -> list[LocatedProblem]:
        return [p for p in self.problems if p.severity == "error"]
