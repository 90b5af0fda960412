"""Generate `mig-shift.yaml`: a day whose MIG demand mix shifts, for `mig-shift-policy.yaml`.

    python config/traces/generate_mig_shift.py > config/traces/mig-shift.yaml

Seeded and deterministic. The day starts at midnight.

Cluster (48 physical A100-80GB): 6 nodes x 8 GPUs, all on the GPU operator's `all-balanced`
layout (per GPU 2 x 1g.10gb, 1 x 2g.20gb, 1 x 3g.40gb), which is how MIG nodes are usually left.

Workloads:
  - serving: model replicas on 1g.10gb slices (memory hint 10Gi), 30 to 90 minutes each, by
    day: the arrival rate peaks at 14:00 and is a twentieth of that at night;
  - batch: evaluation and fine-tuning jobs on 3g.40gb slices (memory hint 40Gi), 1 to 3 hours
    each, by night: the rate peaks at 02:00 and is a twentieth of that by day.
At its peak each alone wants more slices of its size than `all-balanced` offers on every node:
serving about 300 replicas at once (all-balanced has 96 1g.10gb slices, all-1g.10gb on every node
336), batch about 60 jobs (48 3g.40gb slices against 96 on all-3g.40gb).

Why serving peaks at 300 (it was 200 at first): with 200, demand was so low that even the bound
(`bound.py`: any layout, no quotas, no nodes) reached only 57.0% against the pool's 47.3%, so no
layout policy could show 10 points over the pool; the day tested how little there was to serve,
not whether layouts follow the mix. At 300 the day's peak wants what the lever can give (the
pool turned all-1g.10gb), as a cluster sized for either shift would see.
`--serving-rate` and `--batch-rate` make the other days (docs/simulate.md reports some).
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Any

from generate import DAY, Manifests, diurnal, pod, poisson, trace_text

A100 = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/mig.config": "all-balanced",
}
SERVING_RATE = 300.0  # arrivals an hour at the 14:00 peak: ~300 replicas at once
BATCH_RATE = 30.0  # arrivals an hour at the 02:00 peak: ~60 jobs at once
BALANCED = {
    "nvidia.com/mig-1g.10gb": "16",
    "nvidia.com/mig-2g.20gb": "8",
    "nvidia.com/mig-3g.40gb": "8",
}


def nodes() -> list[dict[str, Any]]:
    """Written out with their allocatable, so that any simulator reads them; a layout change
    follows from `nvidia.com/mig.config` and `nvidia.com/gpu.count`."""
    return [
        {"name": f"a100-{number:02d}", "labels": A100, "allocatable": BALANCED}
        for number in range(1, 7)
    ]


def serving(rng: random.Random, manifests: Manifests, rate: float) -> list[dict[str, Any]]:
    manifest = manifests.get("serving-1x10Gi", lambda: pod(1, memory="10Gi"))
    found = []
    for at in poisson(rng, rate, lambda t: diurnal(t, peak_hour=14, low=0.05)):
        namespace = rng.choice(["serving-chat", "serving-search"])
        duration = round(rng.uniform(30, 90) * 60)
        found.append({"at": at, "duration": duration, "namespace": namespace, "pod": manifest})
    return found


def batch(rng: random.Random, manifests: Manifests, rate: float) -> list[dict[str, Any]]:
    manifest = manifests.get("batch-1x40Gi", lambda: pod(1, memory="40Gi"))
    found = []
    for at in poisson(rng, rate, lambda t: diurnal(t, peak_hour=2, low=0.05)):
        duration = round(rng.uniform(1, 3) * 3600)
        found.append({"at": at, "duration": duration, "namespace": "batch", "pod": manifest})
    return found


def render(seed: int, serving_rate: float = SERVING_RATE, batch_rate: float = BATCH_RATE) -> str:
    rng = random.Random(seed)
    manifests = Manifests()
    workloads = [
        *serving(random.Random(rng.random()), manifests, serving_rate),
        *batch(random.Random(rng.random()), manifests, batch_rate),
    ]
    return trace_text(
        generator="generate_mig_shift.py",
        seed=seed,
        description=[
            "A day whose MIG demand mix shifts: 1g.10gb serving replicas by day, 3g.40gb batch",
            "jobs by night, on six A100 nodes left on all-balanced (mig-shift-policy.yaml).",
        ],
        nodes=nodes(),
        manifests=manifests,
        workloads=[w for w in workloads if w["at"] < DAY],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=20260316)
    parser.add_argument(
        "--serving-rate",
        type=float,
        default=SERVING_RATE,
        help="serving arrivals per hour at 14:00",
    )
    parser.add_argument(
        "--batch-rate", type=float, default=BATCH_RATE, help="batch arrivals per hour at 02:00"
    )
    args = parser.parse_args()
    sys.stdout.write(render(args.seed, args.serving_rate, args.batch_rate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
