"""Generate `day.yaml`: one day of GPU workloads for the sample policy (config/policy.yaml).

    python config/traces/generate.py > config/traces/day.yaml

Seeded and deterministic: the same seed gives the same file. The day starts at midnight.

Cluster (80 physical H100s):
  - 8 whole-GPU nodes x 8 H100 (class h100)
  - 2 MIG nodes, each 4 H100 in MIG mixed strategy: 2 GPUs as 7 x 1g.10gb, 2 as 2 x 3g.40gb
    (14 mig-1g.10gb and 4 mig-3g.40gb per node)
  - 2 time-sliced nodes, each 4 H100 shared 4 ways (16 gpu.shared per node)

Workloads:
  - inference: model-serving replicas that an autoscaler adds and removes, so each replica
    lives 5 to 60 minutes; the arrival rate follows the day (trough 03:00, peak 14:00).
    Memory hints pick MIG slices (best-fit); a few replicas forget the hint or need a whole
    GPU and are denied, as they would be.
  - training: whole-H100 jobs of 1 to 8 GPUs (and 2 x 8 GPU Jobs), hours long, a steady
    trickle plus sweeps that submit a dozen jobs at once; 1-GPU jobs that fit in 40Gi land on
    3g.40gb slices; a few ask for 16 GPUs in one pod and are denied.
  - notebooks: interactive sessions in office hours on shared GPUs (or a 1g.10gb slice when
    they say they need at most 10Gi); a few ask for two GPUs and are denied.
  - a handful of GPU pods in `default`, a namespace no tenant owns (denied).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from typing import Any

import yaml

DAY = 86400.0
H100_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def nodes() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for number in range(1, 9):
        found.append(
            {
                "name": f"gpu-{number:02d}",
                "labels": H100_LABELS,
                "allocatable": {"nvidia.com/gpu": "8"},
            }
        )
    for number in range(1, 3):
        found.append(
            {
                "name": f"mig-{number:02d}",
                "labels": {"nvidia.com/mig.config": "mixed-1g-3g"},
                "allocatable": {"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4"},
            }
        )
    for number in range(1, 3):
        found.append(
            {
                "name": f"shared-{number:02d}",
                "labels": {"nvidia.com/device-plugin.config": "time-sliced-4"},
                "allocatable": {"nvidia.com/gpu.shared": "16"},
            }
        )
    return found


def pod(
    gpus: int,
    *,
    memory: str | None = None,
    image: str = "registry.example.com/ml/worker:1.0",
) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ]
        }
    }
    if memory is not None:
        manifest["metadata"] = {"annotations": {"quotaguard.dev/gpu-memory": memory}}
    return manifest


def job(pods: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {"parallelism": pods, "completions": pods, "template": pod(gpus)},
    }


class Manifests:
    """One manifest per name; the YAML defines each once (an anchor) and refers to it."""

    def __init__(self) -> None:
        self.named: dict[str, dict[str, Any]] = {}

    def get(self, name: str, build: Any) -> str:
        if name not in self.named:
            self.named[name] = build()
        return name


def diurnal(seconds: float, *, peak_hour: float, low: float) -> float:
    """A rate factor in [low, 1]: 1 at peak_hour, low twelve hours away."""
    hours = seconds / 3600
    phase = math.cos(2 * math.pi * (hours - peak_hour) / 24)
    return low + (1 - low) * (phase + 1) / 2


def office(seconds: float) -> float:
    """Office hours 08:00-19:00 with a lunch dip; a trickle in the evening."""
    hours = seconds / 3600
    if 8 <= hours < 19:
        return 0.75 if 12 <= hours < 13 else 1.0
    if 19 <= hours < 23:
        return 0.12
    return 0.0


def poisson(rng: random.Random, rate_per_hour: float, factor: Any) -> list[float]:
    """Arrival times of a non-homogeneous Poisson process (thinning), rate x factor(t)."""
    times, now = [], 0.0
    while True:
        now += rng.expovariate(rate_per_hour / 3600)
        if now >= DAY:
            return times
        if rng.random() < factor(now):
            times.append(round(now))


def inference(rng: random.Random, manifests: Manifests) -> list[dict[str, Any]]:
    shapes = [  # (weight, gpus, memory hint)
        (34, 1, "6Gi"),
        (26, 1, "9Gi"),
        (14, 1, "10Gi"),
        (10, 1, "20Gi"),
        (8, 1, "36Gi"),
        (4, 2, "24Gi"),
        (2, 1, None),  # no memory hint: best-fit cannot choose, denied
        (2, 1, "64Gi"),  # needs more than a MIG slice: denied (inference has no whole GPUs)
    ]
    weights = [shape[0] for shape in shapes]
    namespaces = ["inference", "serving-chat", "serving-search", "serving-vision"]
    found = []
    for at in poisson(rng, 120, lambda t: diurnal(t, peak_hour=14, low=0.15)):
        _, gpus, memory = rng.choices(shapes, weights)[0]
        manifest = manifests.get(
            f"inference-{gpus}x{memory or 'nohint'}", lambda g=gpus, m=memory: pod(g, memory=m)
        )
        found.append(
            {
                "at": at,
                "duration": round(rng.uniform(120, 1800)),
                "namespace": rng.choice(namespaces),
                "pod": manifest,
            }
        )
    return found


def training_duration(rng: random.Random) -> int:
    return round(min(max(rng.lognormvariate(math.log(2.5 * 3600), 0.7), 1200), 12 * 3600))


def training(rng: random.Random, manifests: Manifests) -> list[dict[str, Any]]:
    sizes = [(22, 1), (16, 2), (24, 4), (24, 8), (6, 16), (2, -16)]  # -16: 16 in one pod
    weights = [size[0] for size in sizes]
    namespaces = ["training", "research-nlp", "research-vision"]
    found: list[dict[str, Any]] = []
    for at in poisson(rng, 2.5, lambda t: diurnal(t, peak_hour=13, low=0.35)):
        _, gpus = rng.choices(sizes, weights)[0]
        if gpus == 16:
            manifest = manifests.get("training-job-2x8", lambda: job(2, 8))
        elif gpus == -16:
            manifest = manifests.get("training-16", lambda: pod(16))
        elif gpus == 1 and rng.random() < 0.4:
            manifest = manifests.get("training-1x32Gi", lambda: pod(1, memory="32Gi"))
        else:
            manifest = manifests.get(f"training-{gpus}", lambda g=gpus: pod(g))
        found.append(
            {
                "at": at,
                "duration": training_duration(rng),
                "namespace": rng.choice(namespaces),
                "pod": manifest,
            }
        )
    # Sweeps: a dozen or more jobs submitted together, a few times a day.
    for hour in (9.5, 14.0, 21.0):
        gpus = rng.choice([2, 4, 4, 8])
        found.append(
            {
                "name": f"sweep-{hour:g}h",
                "at": round(hour * 3600 + rng.uniform(0, 600)),
                "duration": round(rng.uniform(1.5, 3) * 3600),
                "namespace": "research-nlp" if hour < 12 else "research-vision",
                "count": rng.randint(6, 10),
                "every": 20,
                "pod": manifests.get(f"training-{gpus}", lambda g=gpus: pod(g)),
            }
        )
    return found


def notebooks(rng: random.Random, manifests: Manifests) -> list[dict[str, Any]]:
    users = ["alice", "bob", "chen", "dana", "eve", "farid", "grace", "hiro", "ines", "jon"]
    found = []
    for at in poisson(rng, 24, office):
        roll = rng.random()
        if roll < 0.12:
            manifest = manifests.get("notebook-1x8Gi", lambda: pod(1, memory="8Gi"))
        elif roll < 0.15:
            manifest = manifests.get("notebook-2", lambda: pod(2))  # denied: max 1 per pod
        else:
            manifest = manifests.get("notebook-1", lambda: pod(1))
        duration = min(max(rng.lognormvariate(math.log(3600), 0.6), 600), 4 * 3600)
        found.append(
            {
                "at": at,
                "duration": round(duration),
                "namespace": f"nb-{rng.choice(users)}",
                "pod": manifest,
            }
        )
    return found


def strays(rng: random.Random, manifests: Manifests) -> list[dict[str, Any]]:
    manifest = manifests.get("stray-1", lambda: pod(1))
    return [
        {
            "at": round(rng.uniform(0, DAY)),
            "duration": 1800,
            "namespace": "default",
            "pod": manifest,
        }
        for _ in range(4)
    ]


def _flow(value: object) -> str:
    """One value in YAML flow style on one line."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False)
    return text.removesuffix("\n").removesuffix("\n...")


# What each manifest keeps busy of the GPUs it asks for as written (DCGM's view of a whole
# H100): serving replicas a share near their memory hint's share of 80 GB, training most of
# it, notebooks little (a kernel idles between cells). Jittered per workload by `uses`.
USES = {
    "inference-1x6Gi": 0.08,
    "inference-1x9Gi": 0.12,
    "inference-1x10Gi": 0.13,
    "inference-1x20Gi": 0.25,
    "inference-1x36Gi": 0.45,
    "inference-2x24Gi": 0.3,
    "training-1x32Gi": 0.4,
    "notebook-1": 0.08,
    "notebook-1x8Gi": 0.08,
    "notebook-2": 0.08,
}
TRAINING_USES = 0.85  # whole-GPU training jobs; the rest (strays, denied shapes) 0.5
OTHER_USES = 0.5


def uses(rng: random.Random, manifest: str) -> float:
    """The share of its written GPUs a workload of `manifest` keeps busy, jittered ±20%."""
    base = USES.get(manifest, TRAINING_USES if manifest.startswith("training") else OTHER_USES)
    return round(min(1.0, base * rng.uniform(0.8, 1.2)), 2)


def with_uses(workloads: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The workloads in arrival order, each with what it keeps busy (`uses`), drawn from a
    stream of its own (seed + 1), so that the arrivals stay those of the seed."""
    workloads = sorted(workloads, key=lambda w: (w["at"], w["namespace"], w["pod"]))
    busy = random.Random(seed + 1)
    for workload in workloads:
        workload["uses"] = uses(busy, workload["pod"])
    return workloads


def trace_text(
    *,
    generator: str,
    seed: int,
    description: list[str],
    nodes: list[dict[str, Any]],
    manifests: Manifests,
    workloads: list[dict[str, Any]],
    horizon: str = "24h",
) -> str:
    """A trace as YAML, nodes and workloads one per line, each manifest written once (an
    anchor every workload refers to); workloads in arrival order."""
    workloads = sorted(workloads, key=lambda w: (w["at"], w["namespace"], w["pod"]))
    lines = [
        f"# Generated by config/traces/{generator} --seed {seed}; edit the generator, "
        "not this file.",
        "description: >-",
        *(f"  {line}" for line in description),
        f"horizon: {horizon}",
        "nodes:",
        *(f"  - {_flow(node)}" for node in nodes),
        "# The pod manifests the workloads below refer to (YAML anchors).",
        "manifests:",
        *(f"  {name}: &{name} {_flow(body)}" for name, body in sorted(manifests.named.items())),
        "workloads:",
    ]
    for workload in workloads:
        fields = ", ".join(
            f"{key}: *{value}" if key == "pod" else f"{key}: {_flow(value)}"
            for key, value in workload.items()
        )
        lines.append(f"  - {{{fields}}}")
    return "\n".join(lines) + "\n"


def render(seed: int) -> str:
    """The sample day: every workload with what it keeps busy (`uses`)."""
    rng = random.Random(seed)
    manifests = Manifests()
    workloads = [
        *inference(random.Random(rng.random()), manifests),
        *training(random.Random(rng.random()), manifests),
        *notebooks(random.Random(rng.random()), manifests),
        *strays(random.Random(rng.random()), manifests),
    ]
    return trace_text(
        generator="generate.py",
        seed=seed,
        description=[
            "One day on the sample policy: diurnal inference on MIG slices, bursty training on",
            "whole H100s, office-hours notebooks on shared GPUs; `uses` is what each keeps",
            "busy of the GPUs it asks for as written.",
        ],
        nodes=nodes(),
        manifests=manifests,
        workloads=with_uses(workloads, seed),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=20260101)
    args = parser.parse_args()
    sys.stdout.write(render(args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
