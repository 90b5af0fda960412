"""Generate `saturated.yaml`: a day on which every class is asked for far more than it has,
for the sample policy (config/policy.yaml).

    python config/traces/generate_saturated.py > config/traces/saturated.yaml

Seeded and deterministic. Cluster (52 physical H100s): 5 whole-GPU nodes x 8 H100, 2 MIG
nodes (14 x 1g.10gb and 4 x 3g.40gb each), 1 time-sliced node (16 gpu.shared), so no
tenant's max is below what the cluster offers it.

Workloads, about two to three times the capacity of every class all day:
  - training: gangs (Jobs of 2 and 4 pods of 8 GPUs), 1- to 8-GPU jobs, 1 to 6 hours;
  - inference: replicas on 1g.10gb and 3g.40gb slices (memory hints 6Gi to 36Gi);
  - notebooks: sessions on shared GPUs and 1g.10gb slices, in office hours.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from typing import Any

from generate import (
    H100_LABELS,
    Manifests,
    diurnal,
    job,
    office,
    pod,
    poisson,
    trace_text,
    with_uses,
)


def nodes() -> list[dict[str, Any]]:
    whole = [
        {"name": f"gpu-{n:02d}", "labels": H100_LABELS, "allocatable": {"nvidia.com/gpu": "8"}}
        for n in range(1, 6)
    ]
    mig = [
        {
            "name": f"mig-{n:02d}",
            "labels": {"nvidia.com/mig.config": "mixed-1g-3g"},
            "allocatable": {"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4"},
        }
        for n in range(1, 3)
    ]
    shared = {
        "name": "shared-01",
        "labels": {"nvidia.com/device-plugin.config": "time-sliced-4"},
        "allocatable": {"nvidia.com/gpu.shared": "16"},
    }
    return [*whole, *mig, shared]


def training(rng: random.Random, manifests: Manifests) -> list[dict[str, Any]]:
    shapes = [(20, 1, 1), (18, 1, 2), (22, 1, 4), (20, 1, 8), (12, 2, 8), (8, 4, 8)]
    weights = [shape[0] for shape in shapes]
    found = []
    for at in poisson(rng, 9, lambda t: diurnal(t, peak_hour=13, low=0.6)):
        _, pods, gpus = rng.choices(shapes, weights)[0]
        if pods > 1:
            manifest = manifests.get(f"training-job-{pods}x{gpus}", lambda p=pods: job(p, 8))
        else:
            manifest = manifests.get(f"training-{gpus}", lambda g=gpus: pod(g))
        duration = min(max(rng.lognormvariate(math.log(2.5 * 3600), 0.5), 3600), 6 * 3600)
        found.append(
            {
                "at": at,
                "duration": round(duration),
                "namespace": rng.choice(["training", "research-nlp", "research-vision"]),
                "pod": manifest,
            }
        )
    return found


def inference(rng: random.Random, manifests: Manifests) -> list[dict[str, Any]]:
    shapes = [(40, "6Gi"), (25, "9Gi"), (20, "20Gi"), (15, "36Gi")]  # 1g, 1g, 3g, 3g
    weights = [shape[0] for shape in shapes]
    found = []
    for at in poisson(rng, 150, lambda t: diurnal(t, peak_hour=14, low=0.5)):
        _, memory = rng.choices(shapes, weights)[0]
        manifest = manifests.get(f"inference-1x{memory}", lambda m=memory: pod(1, memory=m))
        found.append(
            {
                "at": at,
                "duration": round(rng.uniform(900, 3600)),
                "namespace": rng.choice(["inference", "serving-chat", "serving-search"]),
                "pod": manifest,
            }
        )
    return found


def notebooks(rng: random.Random, manifests: Manifests) -> list[dict[str, Any]]:
    found = []
    for at in poisson(rng, 60, office):
        if rng.random() < 0.25:
            manifest = manifests.get("notebook-1x8Gi", lambda: pod(1, memory="8Gi"))
        else:
            manifest = manifests.get("notebook-1", lambda: pod(1))
        duration = min(max(rng.lognormvariate(math.log(3600), 0.5), 900), 4 * 3600)
        found.append(
            {
                "at": at,
                "duration": round(duration),
                "namespace": f"nb-user{rng.randint(1, 40)}",
                "pod": manifest,
            }
        )
    return found


def render(seed: int) -> str:
    rng = random.Random(seed)
    manifests = Manifests()
    workloads = [
        *training(random.Random(rng.random()), manifests),
        *inference(random.Random(rng.random()), manifests),
        *notebooks(random.Random(rng.random()), manifests),
    ]
    return trace_text(
        generator="generate_saturated.py",
        seed=seed,
        description=[
            "A saturated day on the sample policy: every class asked for two to three times",
            "what it has, 8-GPU gangs of 2 and 4 pods, 1g.10gb and 3g.40gb slices, notebooks.",
        ],
        nodes=nodes(),
        manifests=manifests,
        workloads=with_uses(workloads, seed),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=20261203)
    args = parser.parse_args()
    sys.stdout.write(render(args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
