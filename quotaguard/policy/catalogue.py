"""MIG profiles of the GPUs NVIDIA ships with Multi-Instance GPU, to check classes against.

Sources (facts, not copies): NVIDIA's MIG user guide, "Supported MIG Profiles" and "Supported
GPUs" (docs.nvidia.com/datacenter/tesla/mig-user-guide, R610 edition); the GPU
operator's `default-mig-parted-config` (NVIDIA/gpu-operator v26.7.0,
assets/state-mig-manager/0400_configmap.yaml), which names a config `all-<profile>` for every
profile at its most instances per GPU; mig-parted v0.15.0 (deployments/systemd/
config-default.yaml, and the per-GPU profile tables of pkg/mig/builder's tests for RTX PRO 6000).

A profile's name is NVIDIA's (`3g.40gb`, `1g.10gb+me`, `1g.24gb-me`, `2g.48gb+gfx`,
`1g.24gb+me.all`): compute slices, memory in GB, then attributes: `+me` a media extension (the
GPU's decoders and encoders, so one per GPU), `-me` explicitly without media engines, `+gfx`
graphics, `+me.all` every media engine. The device plugin offers a profile as the extended
resource `nvidia.com/mig-<name>` with `+` spelt `.` (`nvidia.com/mig-1g.10gb.me`): resource
names cannot hold a `+`.

Memory is the profile's nominal size in GB as NVIDIA names it; a class matches a profile when
its slices agree and its memory is that size in GB or GiB (both spellings are in use), rounded.
`max_instances` is how many of the profile fit on one GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from quotaguard.kube.names import MIG_PREFIX

# ASCII digits, bounded: resource names come from tenants' pods, and int() refuses 5000 digits.
# `1c.3g.20gb` is a compute instance of one slice in a 3g.20gb GPU instance.
_NAME = re.compile(
    r"(?:([0-9]{1,2})c\.)?([0-9]{1,2})g\.([0-9]{1,5})gb((?:[+-][a-z]+(?:\.[a-z]+)*)*)"
)
_RESOURCE = re.compile(r"((?:[0-9]{1,2}c\.)?[0-9]{1,2}g\.[0-9]{1,5}gb)((?:[.-][a-z]+)*)")


@dataclass(frozen=True, slots=True)
class ProfileName:
    """A MIG profile as named, on whatever GPU: `1g.10gb+me` is 1 slice, 10 GB, `+me`."""

    name: str
    slices: int  # of the GPU instance
    memory_gb: int
    attributes: str = ""  # "", "+me", "-me", "+gfx", "+me.all", ...
    compute: int | None = None  # a compute instance's slices (`1c.3g.20gb`), None: all of them

    @property
    def resource(self) -> str:
        return resource_of_profile(self.name)

    @property
    def base(self) -> str:
        """The GPU instance's profile without attributes (`1g.10gb` for `1g.10gb+me`,
        `3g.20gb` for `1c.3g.20gb`)."""
        return f"{self.slices}g.{self.memory_gb}gb"


@dataclass(frozen=True, slots=True)
class MigProfile:
    gpu: str
    name: str
    slices: int
    memory_gb: int
    max_instances: int
    attributes: str = ""

    @property
    def resource(self) -> str:
        return resource_of_profile(self.name)


def parse_profile(name: str) -> ProfileName | None:
    """The parts of a profile name (`1g.10gb+me`), None when it is not one."""
    found = _NAME.fullmatch(name)
    if found is None:
        return None
    compute = int(found.group(1)) if found.group(1) else None
    return ProfileName(name, int(found.group(2)), int(found.group(3)), found.group(4), compute)


def resource_of_profile(name: str) -> str:
    """The device plugin's resource for a profile: `1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me`."""
    return MIG_PREFIX + name.replace("+", ".")


def profile_of_resource(resource: str) -> ProfileName | None:
    """The MIG profile a device-plugin resource offers (`nvidia.com/mig-1g.10gb.me` ->
    `1g.10gb+me`), None when the name is not a MIG resource. Profiles of the catalogue are
    recognised by their exact spelling; any other `<n>g.<m>gb` with attributes is read with
    its first `.` after the memory taken for the `+` the device plugin replaced."""
    if not resource.startswith(MIG_PREFIX):
        return None
    spelt = resource.removeprefix(MIG_PREFIX)
    known = _BY_RESOURCE.get(resource)
    if known is not None:
        return known
    found = _RESOURCE.fullmatch(spelt)
    if found is None:
        return None
    tail = found.group(2)
    if tail.startswith("."):
        tail = "+" + tail[1:]
    return parse_profile(found.group(1) + tail)


# -- the GPUs ----------------------------------------------------------------------------------


def _seven_slices(small: int, double: int, half: int, full: int) -> list[tuple[str, int]]:
    """The profiles of a seven-slice GPU (A100, H100, H200, GH200, H20, B200, GB200, B300,
    GB300) from its memory sizes: every one offers them in the same shape, with the same
    number of instances per GPU; `double` is the 1g profile with two memory slices."""
    return [
        (f"1g.{small}gb", 7),
        (f"1g.{small}gb+me", 1),
        (f"1g.{double}gb", 4),
        (f"2g.{double}gb", 3),
        (f"3g.{half}gb", 2),
        (f"4g.{half}gb", 1),
        (f"7g.{full}gb", 1),
    ]


# catalogue name -> (profile, most instances per GPU). A name is the GPU and the memory of its
# whole-GPU profile (7g.180gb: B200-180GB), as mig-parted's tables name them.
_TABLES: dict[str, list[tuple[str, int]]] = {
    "A100-40GB": _seven_slices(5, 10, 20, 40),  # A100 40GB, A800 40GB
    "A100-80GB": _seven_slices(10, 20, 40, 80),  # A100 80GB, A800 80GB
    "A30-24GB": [
        ("1g.6gb", 4),
        ("1g.6gb+me", 1),
        ("2g.12gb", 2),
        ("2g.12gb+me", 1),
        ("4g.24gb", 1),
    ],
    "H100-80GB": _seven_slices(10, 20, 40, 80),  # H100 SXM5/PCIe 80GB, H800 80GB
    "H100-94GB": _seven_slices(12, 24, 47, 94),  # H100 NVL, H800 NVL, H100 SXM5/PCIe 94GB
    "H100-96GB": _seven_slices(12, 24, 48, 96),  # H100 96GB, PG506-96GB
    "GH200-96GB": _seven_slices(12, 24, 48, 96),  # the H100 of a GH200 (480GB superchip)
    "H20-96GB": _seven_slices(12, 24, 48, 96),
    "GH200-144GB": _seven_slices(18, 36, 72, 144),  # GH200 144G HBM3e
    "H200-141GB": _seven_slices(18, 35, 71, 141),  # H200 SXM5, H200 NVL
    "B200-180GB": _seven_slices(23, 45, 90, 180),
    "GB200-186GB": _seven_slices(23, 47, 93, 186),
    "B300-269GB": _seven_slices(34, 67, 135, 269),
    "GB300-278GB": _seven_slices(35, 70, 139, 278),
    # RTX PRO 6000 Blackwell, Server, Workstation and Max-Q Workstation Editions: four slices
    "RTX-PRO-6000-96GB": [
        ("1g.24gb", 4),
        ("1g.24gb+me", 1),
        ("1g.24gb+gfx", 4),
        ("1g.24gb+me.all", 1),
        ("1g.24gb-me", 4),
        ("2g.48gb", 2),
        ("2g.48gb+gfx", 2),
        ("2g.48gb+me.all", 1),
        ("2g.48gb-me", 2),
        ("4g.96gb", 1),
        ("4g.96gb+gfx", 1),
    ],
}


def _profiles(gpu: str, rows: list[tuple[str, int]]) -> list[MigProfile]:
    found = []
    for name, max_instances in rows:
        parsed = parse_profile(name)
        if parsed is None:  # a typo in the tables above
            raise ValueError(f"not a MIG profile name: {name!r}")
        found.append(
            MigProfile(gpu, name, parsed.slices, parsed.memory_gb, max_instances, parsed.attributes)
        )
    return found


CATALOGUE: tuple[MigProfile, ...] = tuple(
    profile for gpu, rows in _TABLES.items() for profile in _profiles(gpu, rows)
)
GPU_MODELS: tuple[str, ...] = tuple(_TABLES)

_BY_RESOURCE: dict[str, ProfileName] = {
    profile.resource: ProfileName(
        profile.name, profile.slices, profile.memory_gb, profile.attributes
    )
    for profile in CATALOGUE
}


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


def gpus_with_profile(name: str) -> list[str]:
    """The catalogue's GPUs that offer a profile of this name."""
    return [profile.gpu for profile in CATALOGUE if profile.name == name]


def whole_gpu_slices(resource: str, gpu: str | None = None) -> int:
    """Compute slices of the whole GPU a MIG resource's profile is carved from, the
    denominator of its share of a GPU: the given catalogue GPU's, else the count every GPU
    offering the profile agrees on (four for A30's `2g.12gb` and RTX PRO 6000's `2g.48gb`),
    else seven, as on most GPUs with MIG."""
    if gpu is not None and (mine := [p.slices for p in CATALOGUE if p.gpu == gpu]):
        return max(mine)
    profile = profile_of_resource(resource)
    offering = gpus_with_profile(profile.name) if profile is not None else []
    counts = {max(p.slices for p in CATALOGUE if p.gpu == g) for g in offering}
    return counts.pop() if len(counts) == 1 else SEVEN_SLICES


SEVEN_SLICES = 7
