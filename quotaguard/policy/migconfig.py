"""MIG layouts in mig-parted's config format, and the named configs built in for the catalogue.

A mig-parted config file (the GPU operator's `default-mig-parted-config` ConfigMap holds one):

    version: v1
    mig-configs:
      all-balanced:
        - devices: all              # or a list of GPU indexes
          device-filter: ["0x20B210DE"]   # optional: PCI device IDs the entry applies to
          mig-enabled: true
          mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}

mig-manager applies the config named in a node's `nvidia.com/mig.config` label and reports
`nvidia.com/mig.config.state` (pending, rebooting, success, failed). The device plugin then
offers each MIG device as `nvidia.com/mig-<profile>` (the "mixed" strategy) and each GPU with
MIG disabled as `nvidia.com/gpu`.

Pure: parsing returns problems located by path inside the document, never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from quotaguard.kube.names import GPU_RESOURCE, MIG_PREFIX
from quotaguard.policy.catalogue import (
    GPU_MODELS,
    MigProfile,
    profiles_for_gpu,
    resource_of_profile,
)
from quotaguard.policy.gpumodels import GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL, PCI_IDS, gpu_model
from quotaguard.policy.problems import Path, Problem

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
SHARING_CONFIG_LABEL = "nvidia.com/device-plugin.config"  # the device plugin's per-node config
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
WHOLE_GPU = GPU_RESOURCE
MIG_RESOURCE_PREFIX = MIG_PREFIX

GPUS: tuple[str, ...] = GPU_MODELS

__all__ = [  # with what this module has long offered from policy.gpumodels
    "GPUS",
    "GPU_COUNT_LABEL",
    "GPU_MEMORY_LABEL",
    "GPU_PRODUCT_LABEL",
    "MIG_CONFIG_LABEL",
    "MIG_RESOURCE_PREFIX",
    "MIG_STATE_LABEL",
    "PCI_IDS",
    "SHARING_CONFIG_LABEL",
    "WHOLE_GPU",
    "DeviceSpec",
    "MigConfig",
    "builtin_configs",
    "builtin_document",
    "config_name",
    "config_problems",
    "gpu_model",
    "layout_problems",
    "mig_config_document",
    "node_resources",
    "parse_mig_configs",
    "resolve",
]


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One entry of a config: which GPUs, and the MIG devices each of them gets."""

    devices: tuple[int, ...] | None  # None: all GPUs of the node
    mig_enabled: bool
    mig_devices: Mapping[str, int]  # profile name -> instances per GPU
    device_filter: tuple[str, ...] = ()  # PCI device IDs, upper-case hex; empty: any GPU

    def applies_to(self, gpu: str, index: int) -> bool:
        if self.devices is not None and index not in self.devices:
            return False
        return not self.device_filter or any(p in self.device_filter for p in PCI_IDS.get(gpu, ()))


@dataclass(frozen=True, slots=True)
class MigConfig:
    name: str
    entries: tuple[DeviceSpec, ...]

    def for_gpu(self, gpu: str, index: int = 0) -> DeviceSpec | None:
        """The entry mig-parted would apply to GPU number `index` of this model (first wins)."""
        return next((e for e in self.entries if e.applies_to(gpu, index)), None)

    def applies_to(self, gpu: str) -> bool:
        return any(e.device_filter == () or e.applies_to(gpu, _any_index(e)) for e in self.entries)


def _any_index(entry: DeviceSpec) -> int:
    return entry.devices[0] if entry.devices else 0


def node_resources(config: MigConfig, gpu: str, gpus: int) -> dict[str, int]:
    """Extended resources a node with `gpus` GPUs of model `gpu` offers under `config`.

    A GPU no entry applies to keeps whatever it had; it is counted as a whole GPU here, the
    state mig-parted leaves a GPU in when MIG is disabled.
    """
    found: dict[str, int] = {}
    for index in range(gpus):
        entry = config.for_gpu(gpu, index)
        if entry is None or not entry.mig_enabled:
            found[WHOLE_GPU] = found.get(WHOLE_GPU, 0) + 1
            continue
        for profile, count in entry.mig_devices.items():
            resource = resource_of_profile(profile)
            found[resource] = found.get(resource, 0) + count
    return {resource: amount for resource, amount in sorted(found.items()) if amount}


# -- checks against the catalogue ----------------------------------------------------------


def _total_slices(gpu: str) -> tuple[int, int]:
    """(compute slices, memory slices) of one GPU of the model."""
    profiles = profiles_for_gpu(gpu)
    compute = max((p.slices for p in profiles), default=7)
    return compute, 8 if compute == 7 else compute


def _memory_slices(profile: MigProfile) -> int:
    profiles = profiles_for_gpu(profile.gpu)
    full = max(p.memory_gb for p in profiles)
    return max(1, round(profile.memory_gb * _total_slices(profile.gpu)[1] / full))


def layout_problems(devices: Mapping[str, int], gpu: str) -> list[str]:
    """Why these MIG devices cannot be made on one GPU of the model (empty when they can)."""
    known = {profile.name: profile for profile in profiles_for_gpu(gpu)}
    problems = []
    compute = memory = 0
    for name, count in devices.items():
        profile = known.get(name)
        if profile is None:
            offered = ", ".join(known) or "none"
            problems.append(f"profile {name!r} does not exist on {gpu} (offered: {offered})")
            continue
        if count > profile.max_instances:
            problems.append(f"{count} x {name} on one {gpu}: at most {profile.max_instances} fit")
        compute += profile.slices * count
        memory += _memory_slices(profile) * count
    total_compute, total_memory = _total_slices(gpu)
    if not problems and (compute > total_compute or memory > total_memory):
        problems.append(
            f"{', '.join(f'{c} x {n}' for n, c in devices.items())} needs {compute} compute and "
            f"{memory} memory slices; one {gpu} has {total_compute} and {total_memory}"
        )
    return problems


def config_problems(config: MigConfig, gpu: str) -> list[str]:
    """Why `config` cannot be applied to a GPU of this model (empty when it can)."""
    entries = [e for e in config.entries if not e.device_filter or e.applies_to(gpu, _any_index(e))]
    if not entries:
        return [f"config {config.name!r} has no entry for {gpu} (check device-filter)"]
    return [p for e in entries if e.mig_enabled for p in layout_problems(e.mig_devices, gpu)]


# -- built-in configs ------------------------------------------------------------------------


def _profile_names(gpu: str) -> list[str]:
    return [profile.name for profile in profiles_for_gpu(gpu)]


def config_name(profile: str) -> str:
    """The GPU operator's name of the config that fills a GPU with one profile:
    `all-1g.10gb`, `all-1g.10gb.me` for `1g.10gb+me` (mig-parted spells `+` as `.`)."""
    return "all-" + profile.replace("+", ".")


def _builtin_layouts(gpu: str) -> dict[str, dict[str, int] | None]:
    """name -> MIG devices per GPU (None: MIG disabled), the names the GPU operator uses."""
    profiles = profiles_for_gpu(gpu)
    layouts: dict[str, dict[str, int] | None] = {"all-disabled": None, "all-enabled": {}}
    for profile in profiles:
        layouts[config_name(profile.name)] = {profile.name: profile.max_instances}
    plain = sorted((p for p in profiles if not p.attributes), key=lambda p: p.memory_gb)
    ones = [p for p in plain if p.slices == 1]
    twos = [p for p in plain if p.slices == 2]
    threes = [p for p in plain if p.slices == 3]
    if ones and twos and threes:
        layouts["all-balanced"] = {ones[0].name: 2, twos[0].name: 1, threes[0].name: 1}
    elif ones and twos:  # four slices (A30, RTX PRO 6000)
        layouts["all-balanced"] = {ones[0].name: 2, twos[0].name: 1}
    return layouts


def builtin_configs(gpu: str) -> dict[str, MigConfig]:
    """The named configs built in for one GPU model (empty for a model not in the catalogue)."""
    found = {}
    for name, devices in _builtin_layouts(gpu).items():
        entry = DeviceSpec(None, devices is not None, dict(devices or {}))
        found[name] = MigConfig(name, (entry,))
    return found if profiles_for_gpu(gpu) else {}


def builtin_document() -> dict[str, Any]:
    """Every built-in config for every catalogue GPU as one mig-parted document, each entry
    filtered to its GPU's PCI IDs (what a `default-mig-parted-config` ConfigMap would hold)."""
    configs: dict[str, list[dict[str, Any]]] = {}
    for gpu in GPUS:
        for name, devices in _builtin_layouts(gpu).items():
            entry: dict[str, Any] = {"devices": "all", "mig-enabled": devices is not None}
            if devices:
                entry["device-filter"] = list(PCI_IDS[gpu])
                entry["mig-devices"] = dict(devices)
            elif gpu != GPUS[0]:  # all-disabled, all-enabled: one entry for every GPU
                continue
            elif devices is not None:
                entry["mig-devices"] = {}
            configs.setdefault(name, []).append(entry)
    return {"version": "v1", "mig-configs": configs}


def resolve(name: str, gpu: str, configs: Mapping[str, MigConfig]) -> MigConfig | None:
    """A config by name for a GPU model: the given configs first, then the built-in ones."""
    given = configs.get(name)
    if given is not None:
        return given
    return builtin_configs(gpu).get(name)


# -- parsing -------------------------------------------------------------------------------


def _devices(value: object, path: Path, problems: list[Problem]) -> tuple[int, ...] | None:
    if value == "all":
        return None
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        return tuple(sorted(set(value)))
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return (value,)
    problems.append(Problem(path, f"devices must be 'all' or a list of GPU indexes, not {value!r}"))
    return None


def _filter(value: object, path: Path, problems: list[Problem]) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if isinstance(items, list) and items and all(isinstance(v, str) for v in items):
        return tuple(str(v).upper().replace("0X", "0x") for v in items)
    problems.append(Problem(path, "device-filter must be a PCI device ID or a list of them"))
    return ()


_ENTRY_KEYS = frozenset({"devices", "device-filter", "mig-enabled", "mig-devices"})


def _entry(raw: object, path: Path, problems: list[Problem]) -> DeviceSpec | None:
    if not isinstance(raw, Mapping):
        problems.append(Problem(path, "an entry must be a mapping with devices and mig-enabled"))
        return None
    for key in raw:
        if key not in _ENTRY_KEYS:
            problems.append(
                Problem(
                    (*path, str(key)),
                    f"unknown field {key!r}; allowed: {', '.join(sorted(_ENTRY_KEYS))}",
                )
            )
    if "devices" not in raw:
        problems.append(Problem((*path, "devices"), "required field is missing"))
    enabled = raw.get("mig-enabled")
    if not isinstance(enabled, bool):
        problems.append(Problem((*path, "mig-enabled"), "must be true or false"))
        enabled = False
    mig_devices = _mig_devices(raw.get("mig-devices"), (*path, "mig-devices"), problems)
    if not enabled and mig_devices:
        problems.append(Problem((*path, "mig-devices"), "mig-devices need mig-enabled: true"))
    return DeviceSpec(
        _devices(raw.get("devices", "all"), (*path, "devices"), problems),
        enabled,
        mig_devices,
        _filter(raw.get("device-filter"), (*path, "device-filter"), problems),
    )


def _mig_devices(raw: object, path: Path, problems: list[Problem]) -> dict[str, int]:
    """MIG profile -> count (zero counts left out); bad counts reported and skipped."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.append(Problem(path, "must map MIG profiles to counts"))
        return {}
    mig_devices: dict[str, int] = {}
    for profile, count in raw.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            problems.append(
                Problem((*path, str(profile)), f"count must be a whole number ≥ 0, not {count!r}")
            )
        elif count:
            mig_devices[str(profile)] = count
    return mig_devices


def parse_mig_configs(
    document: object, base: Path = ()
) -> tuple[dict[str, MigConfig], list[Problem]]:
    """The configs of a mig-parted document (`version: v1`, `mig-configs: {...}`) and every
    problem found, located by path from `base`. Configs with problems are left out."""
    problems: list[Problem] = []
    if not isinstance(document, Mapping):
        return {}, [Problem(base, "a mig-parted config must be a mapping (version, mig-configs)")]
    if document.get("version") != "v1":
        problems.append(Problem((*base, "version"), "must be v1 (mig-parted config format)"))
    for key in document:
        if key not in ("version", "mig-configs"):
            problems.append(
                Problem((*base, str(key)), f"unknown field {key!r}; allowed: version, mig-configs")
            )
    raw_configs = document.get("mig-configs")
    if not isinstance(raw_configs, Mapping) or not raw_configs:
        problems.append(Problem((*base, "mig-configs"), "must map config names to entries"))
        return {}, problems
    configs: dict[str, MigConfig] = {}
    for name, raw_entries in raw_configs.items():
        path = (*base, "mig-configs", str(name))
        if not isinstance(raw_entries, list) or not raw_entries:
            problems.append(Problem(path, "a config must be a non-empty list of entries"))
            continue
        before = len(problems)
        entries = [_entry(raw, (*path, i), problems) for i, raw in enumerate(raw_entries)]
        if len(problems) == before:
            configs[str(name)] = MigConfig(str(name), tuple(e for e in entries if e is not None))
    return configs, problems


def mig_config_document(text_or_data: Any) -> Any:
    """The mig-parted document inside a ConfigMap's `data` (its one key, usually config.yaml),
    or the data itself when it already is one."""
    if isinstance(text_or_data, Mapping) and "mig-configs" not in text_or_data:
        values = [v for v in text_or_data.values() if isinstance(v, str)]
        if len(values) == 1:
            return yaml.safe_load(values[0])
    return text_or_data
