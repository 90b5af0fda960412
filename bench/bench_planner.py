"""How long `plan` takes as tenants grow: 1,000 tenants x 12 classes must plan in < 100 ms.

Prints the curve from 100 to 10,000 tenants next to a naive planner that hands out capacity
one unit at a time to the tenant furthest below its weighted share (a heap of tenants; the
textbook progressive filling) measured in the same run, and the ratio between them. Both
divide the same totals; a few rows differ by more than one unit because the naive one rounds
like D'Hondt (next unit to the smallest (given + 1) / weight), which favours heavy tenants,
where the planner rounds the exact weighted shares by largest remainder.

    python bench/bench_planner.py [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import heapq
import random
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import load_average, machine, write_result
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.class_capacity import ClassCapacity
from quotaguard.quota.demand import ClassDemand
from quotaguard.quota.queues import QueueState, ResourceQuota
from quotaguard.quota.quota_planner import Planner, plan

CLASSES = 12
WIDTHS = (8, 7, 9, 12, 9, 11)
TARGET_SECONDS = 0.100
TARGET_TENANTS = 1_000


def make_case(
    tenants: int, seed: int = 7
) -> tuple[TenantPolicy, dict[str, Any], dict[str, Any], dict[str, Any]]:
    rng = random.Random(seed)
    classes = [
        {"name": f"gpu-{i:02d}", "resource": f"example.com/gpu-{i:02d}", "memory": "80Gi"}
        for i in range(CLASSES)
    ]
    spec_tenants = []
    demand: dict[str, dict[str, ClassDemand]] = {}
    current: dict[str, QueueState] = {}
    for t in range(tenants):
        name = f"tenant-{t:05d}"
        quota = {}
        for gpu_class in classes:
            guaranteed = rng.randint(0, 4)
            ceiling = rng.choice([None, guaranteed + rng.randint(0, 40)])
            quota[gpu_class["name"]] = {"guaranteed": guaranteed} | (
                {} if ceiling is None else {"max": ceiling}
            )
        spec_tenants.append(
            {
                "name": name,
                "namespaces": [name],
                "weight": rng.choice([1, 1, 2, 3]),
                "quota": quota,
            }
        )
        demand[name] = {
            c["name"]: ClassDemand(rng.randint(0, 10), rng.choice([0, 0, rng.randint(0, 30)]))
            for c in classes
        }
        current[name] = QueueState(
            name,
            "pool",
            1.0,
            {c["name"]: ResourceQuota(rng.randint(0, 20), None, None) for c in classes},
        )
    policy = TenantPolicy.model_validate(
        {
            "apiVersion": "quotaguard.dev/v1alpha1",
            "kind": "TenantPolicy",
            "metadata": {"name": "bench"},
            "spec": {"gpuClasses": classes, "tenants": spec_tenants},
        }
    )
    # About 8 units per tenant per class: contended for some classes, idle for others.
    capacity = {
        c["name"]: ClassCapacity(
            c["name"], c["resource"], 8 * tenants, 0, rng.randint(4, 12) * tenants
        )
        for c in classes
    }
    return policy, capacity, demand, current


def naive_plan(
    policy: TenantPolicy, capacity: dict[str, Any], demand: dict[str, Any]
) -> dict[tuple[str, str], int]:
    """Progressive filling, one unit at a time: guarantees, then demand, then idle capacity."""
    result = {}
    for gpu_class in policy.spec.gpu_classes:
        budget = capacity[gpu_class.name].distributable
        rows = []
        for tenant in policy.spec.tenants:
            quota = tenant.quota[gpu_class.name]
            cap = budget if quota.max is None else quota.max
            want = min(max(demand[tenant.name][gpu_class.name].total, quota.guaranteed), cap)
            rows.append([tenant.name, tenant.weight, quota.guaranteed, want, cap])
        given = {row[0]: row[2] for row in rows}
        left = budget - sum(given.values())
        for limit in (3, 4):  # fill up to demand, then up to max
            heap = [
                ((given[row[0]] + 1) / row[1], row[0], row[1], row[limit])
                for row in rows
                if given[row[0]] < row[limit]
            ]
            heapq.heapify(heap)
            while left > 0 and heap:
                _, name, weight, limit_value = heapq.heappop(heap)
                given[name] += 1
                left -= 1
                if given[name] < limit_value:
                    heapq.heappush(heap, ((given[name] + 1) / weight, name, weight, limit_value))
        for name, amount in given.items():
            result[(name, gpu_class.name)] = amount
    return result


def best_of(repeat: int, call: Any, clock: Any = time.perf_counter) -> float:
    """The fastest of `repeat` runs: the machine may be shared, the minimum is the least noisy."""
    times = []
    for _ in range(repeat):
        gc.collect()
        start = clock()
        call()
        times.append(clock() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    columns = ("tenants", "rows", "plan ms", "+current ms", "naive ms", "naive/plan")
    print(" ".join(f"{name:>{width}}" for name, width in zip(columns, WIDTHS, strict=True)))
    verdict = None
    curve = []
    for tenants in (100, 300, 1_000, 3_000, 10_000):
        policy, capacity, demand, current = make_case(tenants)
        repeat = args.repeat if tenants <= 3_000 else max(1, args.repeat // 2)
        # Built once per policy, as the controller's planning step keeps it between intervals.
        planner = Planner(policy)
        planned = best_of(repeat, partial(planner.plan, capacity, demand))
        stepped = best_of(repeat, partial(planner.plan, capacity, demand, current=current))
        naive = best_of(max(1, repeat // 2), partial(naive_plan, policy, capacity, demand))
        # Both divide the same amount; check they agree on totals per class.
        fast = plan(policy, capacity, demand)
        slow = naive_plan(policy, capacity, demand)
        for gpu_class in policy.spec.gpu_classes:
            fast_total = sum(
                row.target
                for t in fast.tenants
                for row in t.classes
                if row.class_name == gpu_class.name
            )
            slow_total = sum(v for (_, c), v in slow.items() if c == gpu_class.name)
            assert fast_total == slow_total, (gpu_class.name, fast_total, slow_total)
        differing = sum(
            1
            for t in fast.tenants
            for row in t.classes
            if abs(row.target - slow[(t.name, row.class_name)]) > 1
        )
        print(
            f"{tenants:>8} {tenants * CLASSES:>7} {planned * 1e3:>9.1f} {stepped * 1e3:>12.1f} "
            f"{naive * 1e3:>9.1f} {naive / planned:>10.1f}x"
            + (f"  ({differing} rows differ by 2+ units: rounding rule)" if differing else "")
        )
        curve.append(
            {
                "tenants": tenants,
                "rows": tenants * CLASSES,
                "plan_ms": round(planned * 1e3, 2),
                "plan_with_current_ms": round(stepped * 1e3, 2),
                "naive_ms": round(naive * 1e3, 2),
                "naive_over_plan": round(naive / planned, 2),
                "load_average": load_average()[0],
            }
        )
        if tenants == TARGET_TENANTS:
            verdict = max(planned, stepped)
            # CPU time of this process: what planning costs, without the waits for a CPU
            # that a shared machine adds to the wall clock.
            cpu = best_of(
                repeat,
                partial(plan, policy, capacity, demand, current=current),
                time.process_time,
            )
    assert verdict is not None
    ok = verdict < TARGET_SECONDS
    print(
        f"\n{TARGET_TENANTS} tenants x {CLASSES} classes: {verdict * 1e3:.1f} ms wall, "
        f"{cpu * 1e3:.1f} ms cpu (target < {TARGET_SECONDS * 1e3:.0f} ms): "
        f"{'ok' if ok else 'TOO SLOW'}"
    )
    at_target = {"wall_ms": round(verdict * 1e3, 2), "cpu_ms": round(cpu * 1e3, 2)}
    write_result(
        "planner", {"target_ms": TARGET_SECONDS * 1e3, "at_target": at_target, "curve": curve}
    )
    print(f"machine {machine()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
