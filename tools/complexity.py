"""Cyclomatic complexity gate: no function of quotaguard above MAX_COMPLEXITY (radon's count).

    python -m tools.complexity [--worst N]

Functions still above the limit are listed in ALLOWED with the complexity they had when the
gate was set; the gate fails when any other function crosses the limit or a listed one grows.
The list only shrinks: a function brought under the limit is taken off it. A new function
above the limit is split before it lands (listing it here is the exception, with a reason).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

MAX_COMPLEXITY = 15
ROOT = Path(__file__).resolve().parents[1]

# "path:qualified name" -> complexity when the gate was set (to be brought under the limit).
# Empty: every function is within the limit.
ALLOWED: dict[str, int] = {}


def _functions(blocks: list[Function | Class]) -> Iterator[tuple[str, int]]:
    """(qualified name, complexity) of every function and method, and of functions nested in
    them (radon lists a class's methods beside the class, as functions with a class name)."""
    for block in blocks:
        if isinstance(block, Function):
            yield block.fullname, block.complexity
            for closure in block.closures:
                yield f"{block.fullname}.{closure.name}", closure.complexity


def complexities(package: Path = ROOT / "quotaguard") -> dict[str, int]:
    """Cyclomatic complexity of every function of the package, by "path:qualified name"."""
    found: dict[str, int] = {}
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for name, complexity in _functions(cc_visit(path.read_text(encoding="utf-8"))):
            found[f"{where}:{name}"] = complexity
    return found


def problems(found: dict[str, int]) -> list[str]:
    wrong = []
    for name, complexity in sorted(found.items()):
        allowed = ALLOWED.get(name, MAX_COMPLEXITY)
        if complexity > allowed:
            wrong.append(f"{name}: complexity {complexity} above {allowed}")
    for name in sorted(ALLOWED):
        if found.get(name, 0) <= MAX_COMPLEXITY:
            wrong.append(f"{name}: now within {MAX_COMPLEXITY}; take it off ALLOWED")
    return wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worst", type=int, default=0, help="print the N most complex functions")
    args = parser.parse_args()
    found = complexities()
    for name, complexity in sorted(found.items(), key=lambda item: -item[1])[: args.worst]:
        print(f"{complexity:4d}  {name}")
    wrong = problems(found)
    for line in wrong:
        print(f"complexity: {line}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
