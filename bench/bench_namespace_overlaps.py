"""How long the namespace-overlap check of policy validation takes as tenants grow, for
namespace patterns of several shapes — literal names, literal ends, and ends of classes and `?`
(no literal end at all) — next to comparing every pair, measured in the same run (up to 1,000
patterns; it grows with the square).

    python bench/bench_namespace_overlaps.py [--sizes 300,2000,20000]

Target (issue 19): not quadratic for patterns that do not overlap, whatever their ends are
made of; 20,000 tenants checked in about a second, as `serve` checks them at start-up.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import load_average, machine, write_result
from quotaguard.policy.globs import globs_intersect, overlapping_pairs

SHAPES: dict[str, Callable[[int], str]] = {
    "team-7": lambda i: f"team-{i}",
    "team-7-*": lambda i: f"team-{i}-*",
    "*-team-7": lambda i: f"*-team-{i}",
    "[tT]eam-7-*": lambda i: f"[tT]eam-{i}-*",
    "?team-7-[ab]": lambda i: f"?team-{i}-[ab]",
    "[a-c]-7?": lambda i: f"[a-c]-{i}?",
}
PAIRWISE_LIMIT = 1_000


def cpu(work: Callable[[], int]) -> tuple[float, int]:
    started = time.process_time()
    found = work()
    return time.process_time() - started, found


def every_pair(patterns: list[str]) -> int:
    return sum(
        globs_intersect(patterns[later], patterns[earlier])
        for later in range(len(patterns))
        for earlier in range(later)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="300,2000,20000")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    print(f"{'shape':<14} {'patterns':>8} {'overlaps':>8} {'CPU s':>7} {'every pair':>10}")
    for size in (int(s) for s in args.sizes.split(",")):
        for shape, make in SHAPES.items():
            patterns = [make(i) for i in range(size)]
            seconds, overlaps = cpu(lambda: sum(1 for _ in overlapping_pairs(patterns)))  # noqa: B023
            baseline = None
            if size <= PAIRWISE_LIMIT:
                baseline, expected = cpu(lambda: every_pair(patterns))  # noqa: B023
                assert expected == overlaps, (shape, size, expected, overlaps)
            rows.append(
                {
                    "shape": shape,
                    "patterns": size,
                    "overlaps": overlaps,
                    "cpu_s": round(seconds, 3),
                    "every_pair_cpu_s": None if baseline is None else round(baseline, 2),
                    "load": round(load_average()[0], 2),
                }
            )
            shown = "" if baseline is None else f"{baseline:10.2f}"
            print(f"{shape:<14} {size:>8,} {overlaps:>8,} {seconds:7.3f} {shown}", flush=True)
    path = write_result("namespace_overlaps", {"rows": rows})
    print(f"wrote {path}; machine {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
