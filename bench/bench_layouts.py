"""How long the layout planner takes as a pool grows: 1,000 nodes must plan in < 1 s (a
fraction of the 60 s interval it runs in), with demand that retargets about a tenth of them.

Compared with the quota planner's time on the same interval's inputs (the other pure step of
an interval), measured in the same run.

    python bench/bench_layouts.py [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quotaguard.geometry.layout_capacity import plan_capacity
from quotaguard.quota.quota_planner import plan
from tests.geometry.helpers import demand, node, policy

TARGET_SECONDS = 1.0
CONFIGS = ("all-balanced", "all-1g.10gb", "all-3g.40gb")


def measure(nodes: int, repeat: int) -> tuple[float, float, int]:
    the_policy = policy(maxChanging="10%")
    cluster = [node(f"n{i:05d}", CONFIGS[i % 3]) for i in range(nodes)]
    wanted = demand(small={"mig-1g": 30 * nodes}, large={"mig-3g": 2 * nodes})
    layout_best = quota_best = float("inf")
    changes = 0
    for _ in range(repeat):
        started = time.perf_counter()
        found = plan_capacity(the_policy, cluster, [], wanted, now=1e6, health_at=1e6)
        layouts, capacity = found.layouts, found.capacity
        layout_best = min(layout_best, time.perf_counter() - started)
        started = time.perf_counter()
        plan(the_policy, capacity, wanted)
        quota_best = min(quota_best, time.perf_counter() - started)
        changes = len(layouts.changes)
    return layout_best, quota_best, changes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("nodes  layout plan (s, best)  quota plan (s, best)  nodes retargeted")
    missed = False
    for nodes in (100, 300, 1000, 3000):
        layout, quota, changes = measure(nodes, args.repeat)
        print(f"{nodes:5d}  {layout:21.3f}  {quota:20.4f}  {changes:16d}")
        if nodes == 1000 and layout >= TARGET_SECONDS:
            missed = True
    print(f"target: 1,000 nodes < {TARGET_SECONDS:g} s: {'missed' if missed else 'met'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
