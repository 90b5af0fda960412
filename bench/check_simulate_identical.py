"""Whether `quotaguard simulate -o json` answers byte for byte as a baseline tree does: the
sample traces, the test traces, an openb conversion and a synthetic cluster of the scale bench.

    python bench/check_simulate_identical.py --baseline /path/to/main [--openb-dir DIR]
        [--nodes 1500] [--skip-large]

Each case runs once per tree, in a fresh process with that tree's `quotaguard` first on the
path; printed per case: identical or DIFFERENT. Exits 1 when one differs. A speed-up of the
simulate engine must leave every result as it was.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_simulate_scale import inventory, policy_text, workloads

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "config" / "traces"
SMALL_CASES: list[tuple[str, Path, Path, tuple[str, ...]]] = [
    ("day", ROOT / "config/policy.yaml", TRACES / "day.yaml", ()),
    ("day, never", ROOT / "config/policy.yaml", TRACES / "day.yaml", ("--preemption", "never")),
    ("saturated", ROOT / "config/policy.yaml", TRACES / "saturated.yaml", ()),
    (
        "saturated, packing",
        ROOT / "config/policy.yaml",
        TRACES / "saturated.yaml",
        ("--scoring", "MostAllocated", "--static", "pool"),
    ),
    ("mig-shift", TRACES / "mig-shift-policy.yaml", TRACES / "mig-shift.yaml", ()),
    (
        "gpu-models",
        ROOT / "config/samples/kueue/gpu-models/policy.yaml",
        ROOT / "config/samples/kueue/gpu-models/trace.yaml",
        (),
    ),
    ("small", ROOT / "config/policy.yaml", ROOT / "tests/simulate/small.yaml", ()),
    ("packing", ROOT / "config/policy.yaml", ROOT / "tests/simulate/packing.yaml", ()),
]


def _run(tree: Path, argv: list[str]) -> bytes:
    """The JSON a tree's `quotaguard simulate` prints."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-m", "quotaguard", "simulate", *argv, "-o", "json"]
    done = subprocess.run([*command, "--no-progress"], capture_output=True, env=env, cwd=tree)
    return done.stdout


def _compare(label: str, argv: list[str], baseline: Path) -> bool:
    before, after = _run(baseline, argv), _run(ROOT, argv)
    same = before == after and bool(before)
    print(f"{label:>22}: {'identical' if same else 'DIFFERENT'}", flush=True)
    return same


def _openb(csv_dir: Path, work: Path) -> list[str]:
    policy, trace = work / "openb-policy.yaml", work / "openb-trace.yaml"
    convert = [sys.executable, "-m", "tools.openb", "--csv-dir", str(csv_dir)]
    convert += ["--load", "0.9", "--days", "7", "--policy", str(policy), "--trace", str(trace)]
    subprocess.run(convert, check=True, cwd=ROOT, capture_output=True)
    return ["--policy", str(policy), "--trace", str(trace)]


def _synthetic(nodes: int, work: Path) -> list[str]:
    found, gpus = inventory(nodes)
    policy, trace = work / f"scale-{nodes}-policy.yaml", work / f"scale-{nodes}-trace.json"
    policy.write_text(policy_text(gpus))
    document = {"horizon": "24h", "nodes": found, "workloads": workloads(round(nodes * 7.5))}
    trace.write_text(json.dumps(document))
    return ["--policy", str(policy), "--trace", str(trace)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a tree with quotaguard/")
    parser.add_argument(
        "--openb-dir", type=Path, default=Path.home() / ".cache/quotaguard-traces/openb"
    )
    parser.add_argument("--nodes", type=int, default=1500, help="the synthetic cluster's size")
    parser.add_argument("--skip-large", action="store_true", help="sample and test traces only")
    args = parser.parse_args()
    results = [
        _compare(label, ["--policy", str(policy), "--trace", str(trace), *extra], args.baseline)
        for label, policy, trace, extra in SMALL_CASES
    ]
    if not args.skip_large:
        with tempfile.TemporaryDirectory() as directory:
            work = Path(directory)
            if (args.openb_dir / "openb_node_list_gpu_node.csv").exists():
                results.append(_compare("openb", _openb(args.openb_dir, work), args.baseline))
            argv = _synthetic(args.nodes, work)
            results.append(_compare(f"synthetic {args.nodes}", argv, args.baseline))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
