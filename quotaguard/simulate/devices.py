"""What a node's GPUs offer to the scheduler: MIG layout, then time-slicing.

The GPU operator decides it from two node labels: `nvidia.com/mig.config` names a mig-parted
layout (`quotaguard.policy.migconfig`), `nvidia.com/device-plugin.config` names a device
plugin config whose `sharing.timeSlicing` multiplies each listed resource into `replicas`
units (renamed `<resource>.shared` with `renameByDefault: true`, or `rename`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quotaguard.policy.migconfig import (
    MIG_CONFIG_LABEL,
    MigConfig,
    config_problems,
    gpu_model,
    node_resources,
    resolve,
)

PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MAX_REPLICAS = 64
Problem = tuple[tuple[str | int, ...], str]


@dataclass(frozen=True, slots=True)
class TimeSlicing:
    """resource -> (replicas per device, the resource name the replicas are offered as)."""

    resources: Mapping[str, tuple[int, str]]


class DeviceError(ValueError):
    """A node whose labels name a layout that does not exist or does not fit its GPUs."""


def _replicas(
    item: object, where: tuple[str | int, ...], rename_all: bool, problems: list[Problem]
) -> tuple[str, int, str] | None:
    """(resource, replicas, offered as) of one `timeSlicing.resources` item."""
    if not isinstance(item, Mapping):
        problems.append((where, "needs name and replicas"))
        return None
    resource, replicas = item.get("name"), item.get("replicas")
    if not isinstance(resource, str) or "/" not in resource:
        problems.append((where, "needs name: a resource such as nvidia.com/gpu"))
        return None
    if (
        isinstance(replicas, bool)
        or not isinstance(replicas, int)
        or not 1 <= replicas <= MAX_REPLICAS
    ):
        problems.append((where, f"replicas must be from 1 to {MAX_REPLICAS}"))
        return None
    rename = item.get("rename")
    offered = rename if isinstance(rename, str) and rename else None
    if offered is None:
        offered = f"{resource}.shared" if rename_all else resource
    return resource, replicas, offered if "/" in offered else f"nvidia.com/{offered}"


def _plugin_config(
    config: object, path: tuple[str | int, ...], problems: list[Problem]
) -> TimeSlicing | None:
    sharing = config.get("sharing") if isinstance(config, Mapping) else None
    slicing = sharing.get("timeSlicing") if isinstance(sharing, Mapping) else None
    if not isinstance(slicing, Mapping):
        problems.append((path, "needs sharing.timeSlicing (the only sharing modelled)"))
        return None
    raw = slicing.get("resources")
    where = (*path, "sharing", "timeSlicing", "resources")
    if not isinstance(raw, list) or not raw:
        problems.append((where, "must be a list"))
        return None
    rename_all = slicing.get("renameByDefault", False) is True
    resources: dict[str, tuple[int, str]] = {}
    for index, item in enumerate(raw):
        found = _replicas(item, (*where, index), rename_all, problems)
        if found is not None:
            resources[found[0]] = (found[1], found[2])
    return TimeSlicing(resources)


def parse_plugin_configs(document: object) -> tuple[dict[str, TimeSlicing], list[Problem]]:
    """`{name: {version: v1, sharing: {timeSlicing: {...}}}}` and every problem in it."""
    problems: list[Problem] = []
    if not isinstance(document, Mapping):
        return {}, [((), "must map device plugin config names to configs")]
    found: dict[str, TimeSlicing] = {}
    for name, config in document.items():
        parsed = _plugin_config(config, (str(name),), problems)
        if parsed is not None:
            found[str(name)] = parsed
    return found, problems


def _mig_offer(
    gpus: int, labels: Mapping[str, str], mig_configs: Mapping[str, MigConfig]
) -> dict[str, int]:
    """Whole GPUs, or the instances of the MIG layout the node's label names."""
    name = labels.get(MIG_CONFIG_LABEL)
    if name is None or not gpus:
        return {"nvidia.com/gpu": gpus} if gpus else {}
    model = gpu_model(labels) or ""
    config = resolve(name, model, mig_configs)
    if config is None:
        if not model:
            raise DeviceError(
                f"MIG config {name!r} is built in per GPU model: label the node with "
                "nvidia.com/gpu.product (or give the config in migConfig)"
            )
        raise DeviceError(f"unknown MIG config {name!r} for {model}")
    problems = config_problems(config, model) if model else []
    if problems:
        raise DeviceError(f"MIG config {name!r} on {model}: {'; '.join(problems)}")
    return node_resources(config, model, gpus)


def node_offer(
    gpus: int,
    labels: Mapping[str, str],
    mig_configs: Mapping[str, MigConfig],
    plugin_configs: Mapping[str, TimeSlicing],
) -> dict[str, int]:
    """The GPU resources a node with `gpus` GPUs and these labels advertises."""
    offer = _mig_offer(gpus, labels, mig_configs)
    plugin = labels.get(PLUGIN_CONFIG_LABEL)
    if plugin is None:
        return offer
    if plugin not in plugin_configs:
        known = ", ".join(sorted(plugin_configs)) or "none given in devicePluginConfigs"
        raise DeviceError(f"unknown device plugin config {plugin!r} (known: {known})")
    shared: dict[str, int] = {}
    for resource, amount in offer.items():
        replicas, offered = plugin_configs[plugin].resources.get(resource, (1, resource))
        shared[offered] = shared.get(offered, 0) + amount * replicas
    return shared
