"""MIG profiles of the GPUs NVIDIA ships with Multi-Instance GPU, to check classes against.

Memory is the profile's nominal size in GB as NVIDIA names it (`3g.40gb`); a class matches a
profile when its slices agree and its memory is that size in GB or GiB (both spellings are in
use), rounded. `max_instances` is how many of the profile fit on one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MigProfile:
    gpu: str
    name: str
    slices: int
    memory_gb: int
    max_instances: int

    @property
    def resource(self) -> str:
        return f"nvidia.com/mig-{self.name}"


def _profiles(gpu: str, rows: list[tuple[str, int]]) -> list[MigProfile]:
    found = []
    for name, max_instances in rows:
        compute, memory = name.split(".")
        found.append(
            MigProfile(
                gpu,
                name,
                int(compute.removesuffix("g")),
                int(memory.removesuffix("gb")),
                max_instances,
            )
        )
    return found


# Every seven-slice GPU offers its six profiles in the same order, with the same number of
# instances per GPU; only their memory differs.
_SEVEN_SLICE_INSTANCES = (7, 4, 3, 2, 1, 1)
_SEVEN_SLICE_GPUS = {
    "A100-40GB": ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "A100-80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100-80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100-94GB": ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "H200-141GB": ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
}

CATALOGUE: tuple[MigProfile, ...] = tuple(
    profile
    for gpu, names in _SEVEN_SLICE_GPUS.items()
    for profile in _profiles(gpu, list(zip(names, _SEVEN_SLICE_INSTANCES, strict=True)))
) + tuple(_profiles("A30-24GB", [("1g.6gb", 4), ("2g.12gb", 2), ("4g.24gb", 1)]))


def matching_profiles(memory_bytes: int, slices: int) -> list[MigProfile]:
    """Known profiles with these slices whose size is `memory_bytes` in GB or GiB."""
    in_gib, in_gb = round(memory_bytes / 2**30), round(memory_bytes / 10**9)
    return [
        profile
        for profile in CATALOGUE
        if profile.slices == slices and profile.memory_gb in (in_gib, in_gb)
    ]


def profiles_for_gpu(gpu: str) -> list[MigProfile]:
    return [profile for profile in CATALOGUE if profile.gpu == gpu]
