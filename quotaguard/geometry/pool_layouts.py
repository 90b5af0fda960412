"""The layouts a pool's nodes may take, and what a node offers under each of them.

A layout is a MIG config (applied by mig-manager through the node label
`nvidia.com/mig.config`) or a time-slicing config (applied by the device plugin through
`nvidia.com/device-plugin.config`). What a node offers under a layout is counted for the GPU
classes the way capacity is counted: by resource, and by the class nodeSelector the node's
labels match once the layout's label is on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quotaguard.policy.migconfig import (
    MIG_CONFIG_LABEL,
    SHARING_CONFIG_LABEL,
    WHOLE_GPU,
    MigConfig,
    config_problems,
    gpu_model,
    node_resources,
    parse_mig_configs,
    resolve,
)
from quotaguard.policy.model import GeometryPool, SharingConfig, TenantPolicy

MIG_DISABLED = "all-disabled"


@dataclass(frozen=True, slots=True)
class Layout:
    name: str
    mig: MigConfig | None = None
    sharing: SharingConfig | None = None

    def offers(self, gpu: str, gpus: int) -> dict[str, int]:
        """Extended resources a node with `gpus` GPUs of model `gpu` offers in this layout."""
        if self.sharing is not None:
            return {self.sharing.resource: gpus * self.sharing.replicas}
        if self.mig is not None:
            return node_resources(self.mig, gpu, gpus)
        return {WHOLE_GPU: gpus}

    def labels(self, *, pool_shares: bool) -> dict[str, str | None]:
        """The node labels that ask for this layout (None: remove the label). A pool that
        offers time-slicing puts the device plugin back on its default for MIG layouts."""
        if self.sharing is not None:
            return {MIG_CONFIG_LABEL: MIG_DISABLED, SHARING_CONFIG_LABEL: self.name}
        found: dict[str, str | None] = {MIG_CONFIG_LABEL: self.name}
        if pool_shares:
            found[SHARING_CONFIG_LABEL] = None
        return found

    def applied_labels(self, labels: Mapping[str, str], *, pool_shares: bool) -> dict[str, str]:
        """`labels` as they are once this layout is asked for."""
        found = dict(labels)
        for key, value in self.labels(pool_shares=pool_shares).items():
            if value is None:
                found.pop(key, None)
            else:
                found[key] = value
        return found


@dataclass(frozen=True, slots=True)
class PoolLayouts:
    pool: GeometryPool
    gpu: str | None
    layouts: Mapping[str, Layout]  # in the pool's order

    @property
    def shares(self) -> bool:
        return any(layout.sharing is not None for layout in self.layouts.values())

    def current(self, labels: Mapping[str, str]) -> str | None:
        """The layout a node's labels ask for now (None: none the pool knows)."""
        sharing = labels.get(SHARING_CONFIG_LABEL)
        if sharing is not None and sharing in self.layouts:
            return sharing
        return labels.get(MIG_CONFIG_LABEL)


def pool_layouts(policy: TenantPolicy) -> list[PoolLayouts]:
    """Every pool of the policy with its layouts resolved (unknown names and configs that do
    not fit the pool's GPU left out: validate reports them)."""
    geometry = policy.spec.geometry
    if geometry is None:
        return []
    mig_configs, _ = (
        parse_mig_configs(geometry.mig_configs) if geometry.mig_configs is not None else ({}, [])
    )
    found = []
    for pool in geometry.pools:
        gpu = pool.gpu or gpu_model(pool.node_selector)
        layouts: dict[str, Layout] = {}
        for name in pool.configs:
            if name in geometry.sharing_configs:
                layouts[name] = Layout(name, sharing=geometry.sharing_configs[name])
                continue
            config = resolve(name, gpu, mig_configs) if gpu is not None else None
            # one that does not fit the GPU (validate refuses such a policy, but the GPU
            # operator's ConfigMap is read at run time) would only fail on the node
            if config is not None and gpu is not None and not config_problems(config, gpu):
                layouts[name] = Layout(name, mig=config)
        found.append(PoolLayouts(pool, gpu, layouts))
    return found


def pool_of(pools: list[PoolLayouts], labels: Mapping[str, str]) -> PoolLayouts | None:
    """The first pool whose nodeSelector the labels match."""
    return next(
        (p for p in pools if all(labels.get(k) == v for k, v in p.pool.node_selector.items())),
        None,
    )


def class_offers(
    policy: TenantPolicy, resources: Mapping[str, int], labels: Mapping[str, str]
) -> dict[str, int]:
    """Resources as amounts per GPU class (resources no class counts are dropped)."""
    found: dict[str, int] = {}
    plain = dict(labels)
    for resource, amount in resources.items():
        gpu_class = policy.class_of_resource(resource, plain)
        if gpu_class is not None and amount > 0:
            found[gpu_class.name] = found.get(gpu_class.name, 0) + amount
    return found
