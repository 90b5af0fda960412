"""Checks of `spec.geometry`: every config a pool may take exists for the pool's GPU and fits it.

Like `checks.py`, they read the raw document defensively so they run next to schema errors.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Any

from quotaguard.kube.names import GPU_RESOURCE, SHARED_GPU_RESOURCE
from quotaguard.kube.values import mapping as _map
from quotaguard.policy.migconfig import (
    GPU_PRODUCT_LABEL,
    GPUS,
    MIG_CONFIG_LABEL,
    SHARING_CONFIG_LABEL,
    builtin_configs,
    config_problems,
    gpu_model,
    node_resources,
    parse_mig_configs,
)
from quotaguard.policy.problems import Problem

BASE = ("spec", "geometry")


def _labels(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in _map(value).items()}


def check_geometry(spec: Mapping[str, Any]) -> list[Problem]:
    geometry = spec.get("geometry")
    if not isinstance(geometry, Mapping):
        return []
    problems: list[Problem] = []
    mig_configs: dict[str, Any] = {}
    if geometry.get("migConfigs") is not None:
        mig_configs, found = parse_mig_configs(geometry["migConfigs"], (*BASE, "migConfigs"))
        problems += found
    sharing = _map(geometry.get("sharingConfigs"))
    for name in sharing:
        if name in mig_configs:
            problems.append(
                Problem(
                    (*BASE, "sharingConfigs", name),
                    f"{name!r} names a MIG config too; a pool config name must say one layout",
                )
            )
    pools = geometry.get("pools")
    items = (
        [(i, p) for i, p in enumerate(pools) if isinstance(p, Mapping)]
        if isinstance(pools, list)
        else []
    )
    seen: dict[str, int] = {}
    for index, pool in items:
        pool_name = pool.get("name")
        if isinstance(pool_name, str):
            if pool_name in seen:
                problems.append(
                    Problem(
                        (*BASE, "pools", index, "name"),
                        f"duplicate pool name {pool_name!r} (first defined at index "
                        f"{seen[pool_name]})",
                    )
                )
            seen.setdefault(pool_name, index)
        problems += _pool(index, pool, mig_configs, sharing, spec)
    if geometry.get("mode") == "apply" and not items:
        problems.append(
            Problem((*BASE, "mode"), "mode apply without pools changes nothing", "warning")
        )
    return problems


def _pool(
    index: int,
    pool: Mapping[str, Any],
    mig_configs: Mapping[str, Any],
    sharing: Mapping[str, Any],
    spec: Mapping[str, Any],
) -> Iterator[Problem]:
    path = (*BASE, "pools", index)
    selector = _labels(pool.get("nodeSelector"))
    stated = pool.get("gpu")
    if isinstance(stated, str) and stated not in GPUS:
        yield _unknown_gpu((*path, "gpu"), stated)
        return
    gpu = stated if isinstance(stated, str) else gpu_model(selector)
    if not selector:
        yield Problem(
            (*path, "nodeSelector"),
            "a pool without nodeSelector takes every GPU node of the cluster",
            "warning",
        )
    configs = pool.get("configs")
    if not isinstance(configs, list):
        return
    builtin = builtin_configs(gpu) if gpu else {}
    for position, name in enumerate(configs):
        if not isinstance(name, str):
            continue
        where = (*path, "configs", position)
        if name in sharing:
            offered = _sharing_resources(sharing[name])
            labels = {**selector, SHARING_CONFIG_LABEL: name}
            yield from _offers(where, name, offered, labels, spec)
            yield from _replicas(where, name, offered, labels, spec)
            continue
        config = mig_configs.get(name) or builtin.get(name)
        if config is None:
            known = sorted({*mig_configs, *sharing, *builtin})
            yield _missing_config(where, name, pool.get("name"), gpu, known, selector)
            continue
        if gpu is None:
            continue
        for message in config_problems(config, gpu):
            yield Problem(where, message)
        resources = node_resources(config, gpu, 1)
        yield from _offers(where, name, resources, {**selector, MIG_CONFIG_LABEL: name}, spec)


def _unknown_gpu(where: tuple[str | int, ...], stated: str) -> Problem:
    close = [g for g in GPUS if g.upper().startswith(stated.upper() + "-")]
    close = close or difflib.get_close_matches(stated, GPUS, n=1)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    return Problem(where, f"unknown GPU model {stated!r}{hint}; known: {', '.join(GPUS)}")


def _missing_config(
    where: tuple[str | int, ...],
    name: str,
    pool: object,
    gpu: str | None,
    known: list[str],
    selector: Mapping[str, str],
) -> Problem:
    product = selector.get(GPU_PRODUCT_LABEL)
    if gpu is None and name.startswith("all-") and product is not None:
        return Problem(
            where,
            f"{GPU_PRODUCT_LABEL} {product!r} of pool {pool!r} is no GPU of the MIG "
            f"catalogue ({', '.join(GPUS)}), so built-in config {name!r} is unknown for it; "
            "set gpu to the catalogue's name of this GPU, or define the config in migConfigs",
        )
    if gpu is None and name.startswith("all-"):
        return Problem(
            where,
            f"cannot tell the GPU model of pool {pool!r} to find the built-in "
            f"config {name!r}; set gpu or nodeSelector {GPU_PRODUCT_LABEL}",
        )
    # mig-manager applies what the GPU operator's ConfigMap defines: a name the policy does
    # not know may be there (the controller reads it at run time), or may be a typo
    return Problem(
        where,
        f"unknown config {name!r}; known for {gpu or 'this pool'}: {', '.join(known)}; "
        "planned only if the GPU operator's ConfigMap default-mig-parted-config defines it",
        severity="warning",
    )


def _sharing_resources(raw: object) -> dict[str, int]:
    config = _map(raw)
    replicas = config.get("replicas")
    if not isinstance(replicas, int):
        return {}
    rename = config.get("renameByDefault", True)
    return {SHARED_GPU_RESOURCE if rename is not False else GPU_RESOURCE: replicas}


def _replicas(
    where: tuple[str | int, ...],
    name: str,
    resources: Mapping[str, int],
    labels: Mapping[str, str],
    spec: Mapping[str, Any],
) -> Iterator[Problem]:
    """A warning when a class that counts a sharing config's resource divides a GPU into
    another number of replicas: its units would be valued at the wrong share of a GPU."""
    for resource, replicas in resources.items():
        for gpu_class in _counting(resource, labels, spec):
            counted = gpu_class.get("replicas", 1)
            if isinstance(counted, int) and counted != replicas:
                yield Problem(
                    where,
                    f"config {name!r} offers each GPU {replicas} times as {resource}, but class "
                    f"{gpu_class.get('name')!r} counts {counted} replicas per GPU: its units "
                    "would be valued at the wrong share of a GPU",
                    "warning",
                )


def _counting(
    resource: str, labels: Mapping[str, str], spec: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    """The GPU classes that count `resource` on a node with these labels."""
    classes = [c for c in spec.get("gpuClasses") or [] if isinstance(c, Mapping)]
    return [
        c
        for c in classes
        if c.get("resource") == resource
        and all(labels.get(k) == v for k, v in _labels(c.get("nodeSelector")).items())
    ]


def _offers(
    where: tuple[str | int, ...],
    name: str,
    resources: Mapping[str, int],
    labels: Mapping[str, str],
    spec: Mapping[str, Any],
) -> Iterator[Problem]:
    """A warning for every resource the layout offers that no GPU class counts."""
    for resource in resources:
        if not _counting(resource, labels, spec):
            yield Problem(
                where,
                f"config {name!r} offers {resource}, which no GPU class counts on this pool's "
                "nodes: it would be capacity no tenant can get",
                "warning",
            )
