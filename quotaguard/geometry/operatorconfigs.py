"""The GPU operator's mig-parted configs, for the configs a policy names but does not define.

mig-manager applies the config named in `nvidia.com/mig.config` from its own file, the GPU
operator's ConfigMap `default-mig-parted-config` (key `config.yaml`, mig-parted format). When a
pool lists a config that the policy's `migConfigs` and `sharingConfigs` do not define, the
controller (and `quotaguard plan`) reads that ConfigMap and plans with its definition (before
the built-in one of the same name: the ConfigMap is what mig-manager will apply). The policy's
own configs always win. Pure: the ConfigMap's `data` in, the policy and the problems out; the
callers only fetch the ConfigMap and say the problems where they say things.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from quotaguard.kube.names import MIG_PARTED_CONFIG_KEY, MIG_PARTED_CONFIGMAP
from quotaguard.policy.migconfig import MigConfig, config_problems, gpu_model, parse_mig_configs
from quotaguard.policy.model import Geometry, TenantPolicy
from quotaguard.policy.problems import format_path

CONFIGMAP = MIG_PARTED_CONFIGMAP
CONFIG_KEY = MIG_PARTED_CONFIG_KEY
DEFAULT_NAMESPACE = "gpu-operator"


def _own_configs(policy: TenantPolicy) -> Mapping[str, Any]:
    geometry = policy.spec.geometry
    raw = geometry.mig_configs if geometry is not None else None
    configs = raw.get("mig-configs") if isinstance(raw, Mapping) else None
    return configs if isinstance(configs, Mapping) else {}


def undefined_configs(policy: TenantPolicy) -> list[str]:
    """Config names the pools list that the policy itself does not define, sorted."""
    geometry = policy.spec.geometry
    if geometry is None or geometry.mode == "off":
        return []
    own = set(_own_configs(policy)) | set(geometry.sharing_configs)
    return sorted({name for pool in geometry.pools for name in pool.configs if name not in own})


def from_configmap(
    policy: TenantPolicy, data: Mapping[str, object] | None
) -> tuple[TenantPolicy, list[str]] | None:
    """`with_operator_configs` on the `data` of a `default-mig-parted-config` ConfigMap; None
    when it holds no `config.yaml` text (there is no mig-parted config to read)."""
    text = (data or {}).get(CONFIG_KEY)
    if not isinstance(text, str):
        return None
    return with_operator_configs(policy, text)


def with_operator_configs(policy: TenantPolicy, text: str) -> tuple[TenantPolicy, list[str]]:
    """The policy with the ConfigMap's definitions of the configs it names but does not define,
    and what was wrong (in words): an unreadable document, named configs it lacks or cannot
    parse (those are planned with the built-in of the same name, if any)."""
    wanted = undefined_configs(policy)
    geometry = policy.spec.geometry
    if not wanted or geometry is None:
        return policy, []
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return policy, [f"{CONFIG_KEY} is not YAML: {exc}"]
    raw = document.get("mig-configs") if isinstance(document, Mapping) else None
    if not isinstance(raw, Mapping):
        return policy, [f"{CONFIG_KEY} has no mig-configs mapping (mig-parted format)"]
    taken = {name: raw[name] for name in wanted if name in raw}
    problems = [f"config {name!r} is not in it" for name in wanted if name not in raw]
    if not taken:
        return policy, problems
    parsed, found = parse_mig_configs({"version": "v1", "mig-configs": taken})
    problems += [f"{format_path(problem.path)}: {problem.message}" for problem in found]
    problems += _misfits(geometry, parsed)
    usable = {name: taken[name] for name in parsed}
    if not usable:
        return policy, problems
    merged = {"version": "v1", "mig-configs": {**usable, **_own_configs(policy)}}
    spec = policy.spec.model_copy(
        update={"geometry": geometry.model_copy(update={"mig_configs": merged})}
    )
    return policy.model_copy(update={"spec": spec}), problems


def _misfits(geometry: Geometry, configs: Mapping[str, MigConfig]) -> list[str]:
    """Why configs cannot be made on the GPUs of the pools that list them: the catalogue check
    `validate` makes of the policy's own configs (such a pool does not take the config)."""
    found = []
    for pool in geometry.pools:
        gpu = pool.gpu or gpu_model(pool.node_selector)
        if gpu is None:
            continue
        for name in pool.configs:
            config = configs.get(name)
            if config is not None:
                found += [
                    f"config {name!r}, pool {pool.name!r}: {problem}; the pool does not take it"
                    for problem in config_problems(config, gpu)
                ]
    return found
