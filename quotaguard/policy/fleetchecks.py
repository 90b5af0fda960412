"""Checks of `spec.fleet` a schema cannot express: workers named once, per-cluster quotas of
tenants and classes the policy has, and per-cluster guarantees the fleet's quotas can hold.

Like `checks.py`, they read the raw document defensively so they run next to schema errors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from quotaguard.kube.values import mapping as _map
from quotaguard.policy.problems import Path, Problem

BASE = ("spec", "fleet")
RESERVED = "manager"


def _named(value: object) -> dict[str, tuple[int, Mapping[str, Any]]]:
    """The entries of a list that have a string name, by name (the first of a repeated one)."""
    found: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for index, item in enumerate(value if isinstance(value, list) else []):
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            found.setdefault(item["name"], (index, item))
    return found


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sources(fleet: Mapping[str, Any]) -> Iterator[Problem]:
    clusters = fleet.get("clusters")
    listed = clusters if isinstance(clusters, list) else []
    if not listed and not fleet.get("multiKueueConfig"):
        yield Problem(
            BASE,
            "a fleet names its worker clusters: list them in clusters, or name the "
            "MultiKueueConfig to read them from in multiKueueConfig",
        )
    seen: set[str] = set()
    for index, cluster in enumerate(listed):
        cluster = _map(cluster)
        name = cluster.get("name")
        if name == RESERVED:
            yield Problem(
                (*BASE, "clusters", index, "name"),
                f"{RESERVED!r} names the manager cluster (in metrics and snapshot directories); "
                "name the worker otherwise",
            )
        if isinstance(name, str) and name in seen:
            yield Problem((*BASE, "clusters", index, "name"), f"cluster {name!r} is listed twice")
        if isinstance(name, str):
            seen.add(name)
        if not fleet.get("multiKueueConfig") and cluster.get("kubeConfig") is None:
            yield Problem(
                (*BASE, "clusters", index),
                f"cluster {name!r} has no kubeConfig and no multiKueueConfig names it: "
                "quotaguard cannot reach it",
            )


def _cluster_tenants(
    index: int,
    cluster: Mapping[str, Any],
    tenants: Mapping[str, tuple[int, Mapping[str, Any]]],
    classes: set[str],
) -> Iterator[tuple[Path, str, str, Mapping[str, Any]]]:
    """Every per-cluster quota naming a known tenant and class; problems for the others are
    yielded as (path, message, "", {})."""
    for tenant_name, quotas in _map(cluster.get("tenants")).items():
        path: Path = (*BASE, "clusters", index, "tenants", str(tenant_name))
        if tenant_name not in tenants:
            known = ", ".join(sorted(tenants)) or "none"
            yield path, f"no tenant {tenant_name!r} in spec.tenants (tenants: {known})", "", {}
            continue
        for class_name, quota in _map(quotas).items():
            if class_name not in classes:
                known = ", ".join(sorted(classes)) or "none"
                message = f"no GPU class {class_name!r} in spec.gpuClasses (classes: {known})"
                yield (*path, str(class_name)), message, "", {}
                continue
            yield (*path, str(class_name)), "", str(tenant_name), _map(quota)


def _per_cluster(fleet: Mapping[str, Any], spec: Mapping[str, Any]) -> Iterator[Problem]:
    tenants = _named(spec.get("tenants"))
    classes = set(_named(spec.get("gpuClasses")))
    # (tenant, class) -> the per-cluster guarantees, to hold against the fleet's quota
    guarantees: dict[tuple[str, str], int] = {}
    clusters = fleet.get("clusters")
    for index, cluster in enumerate(clusters if isinstance(clusters, list) else []):
        for path, message, tenant, quota in _cluster_tenants(
            index, _map(cluster), tenants, classes
        ):
            if message:
                yield Problem(path, message)
                continue
            guaranteed, ceiling = _int(quota.get("guaranteed")) or 0, _int(quota.get("max"))
            if ceiling is not None and guaranteed > ceiling:
                yield Problem(
                    (*path, "guaranteed"), f"guaranteed {guaranteed} is over max {ceiling}"
                )
            key = (tenant, str(path[-1]))
            guarantees[key] = guarantees.get(key, 0) + guaranteed
    yield from _against_fleet(guarantees, tenants)


def _against_fleet(
    guarantees: Mapping[tuple[str, str], int],
    tenants: Mapping[str, tuple[int, Mapping[str, Any]]],
) -> Iterator[Problem]:
    """Per-cluster guarantees are a part of the tenant's fleet guarantee, never more."""
    for (tenant, class_name), total in sorted(guarantees.items()):
        index, body = tenants[tenant]
        quota = _map(_map(body.get("quota")).get(class_name))
        fleet_guarantee = _int(quota.get("guaranteed")) or 0
        if total > fleet_guarantee:
            yield Problem(
                ("spec", "tenants", index, "quota", class_name, "guaranteed"),
                f"the per-cluster guarantees of spec.fleet.clusters add up to {total} "
                f"{class_name}, over the tenant's fleet guarantee of {fleet_guarantee}: "
                "raise it, or lower them",
            )


def check_fleet(spec: Mapping[str, Any]) -> list[Problem]:
    fleet = spec.get("fleet")
    if not isinstance(fleet, Mapping):
        return []
    if spec.get("backend", "kueue") != "kueue":
        return [Problem((*BASE,), "a fleet is a MultiKueue fleet: it needs backend: kueue")]
    return [*_sources(fleet), *_per_cluster(fleet, spec)]
