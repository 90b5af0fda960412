"""Checks of rewrite targets that list several classes (`to: [h100, a100]`).

Such a request keeps the resource the classes share and no nodeSelector, and Kueue picks the
flavor; so the classes must be known, allowed, distinct, on one resource, and not MIG slices
(a MIG profile is a shape, not a model: its class is picked by `best-fit` or by name). A list of
one class is that class and is checked as a plain target.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from quotaguard.kube.values import mapping as _map
from quotaguard.policy.model import BEST_FIT
from quotaguard.policy.problems import Problem

Path = tuple[str | int, ...]


def check_lists(
    index: int,
    tenant: Mapping[str, Any],
    resources: Mapping[str, str],
    mig_names: set[str],
    backend: object = "kueue",
) -> Iterator[Problem]:
    name = tenant.get("name", f"#{index}")
    allowed_raw = tenant.get("allowedClasses")
    allowed = set(allowed_raw) if isinstance(allowed_raw, list) else None
    rules = tenant.get("rewrite")
    orders: list[tuple[int, list[str]]] = []
    for position, rule in enumerate(rules if isinstance(rules, list) else []):
        target = _map(rule).get("to")
        if not isinstance(target, list) or len(target) < 2:
            continue
        path: Path = ("spec", "tenants", index, "rewrite", position, "to")
        yield from _entries(path, target, name, allowed, resources, mig_names)
        if backend == "volcano":
            yield Problem(
                path,
                "backend volcano has no flavors to pick a model by: a pod of this rule runs on "
                "any node offering the resource, and the tenant's Queue counts the listed "
                "classes as one resource",
                "warning",
            )
        orders.append((position, [t for t in target if isinstance(t, str)]))
    yield from _order_conflicts(index, orders)


def _entries(
    path: Path,
    target: list[Any],
    tenant: object,
    allowed: set[Any] | None,
    resources: Mapping[str, str],
    mig_names: set[str],
) -> Iterator[Problem]:
    seen: set[str] = set()
    first: tuple[str, str] | None = None  # (class, resource) the others must share
    for at, entry in enumerate(target):
        where = (*path, at)
        if not isinstance(entry, str):
            continue  # the schema reports it
        if entry == BEST_FIT:
            yield Problem(
                where,
                "best-fit cannot be one entry of a list; use best-fit alone, or list classes",
            )
        elif entry not in resources:
            known = ", ".join(sorted(resources))
            yield Problem(where, f"rewrite target {entry!r} is not a GPU class; known: {known}")
        elif entry in seen:
            yield Problem(where, f"class {entry!r} is listed twice")
        elif allowed is not None and entry not in allowed:
            yield Problem(
                where,
                f"rewrite target {entry!r} is not in the allowedClasses of tenant {tenant!r}",
            )
        elif entry in mig_names:
            yield Problem(
                where,
                f"class {entry!r} is a MIG slice ({resources[entry]}); a list is for whole or "
                "shared GPUs of several models on one resource: name the MIG class alone, or "
                "use best-fit",
            )
        elif first is not None and resources[entry] != first[1]:
            yield Problem(
                where,
                f"class {entry!r} is on {resources[entry]} but {first[0]!r} is on {first[1]}; "
                "the classes of one list must share one resource (Kueue picks the flavor of "
                "one resource)",
            )
        elif first is None:
            first = (entry, resources[entry])
        seen.add(entry)


def _order_conflicts(index: int, orders: list[tuple[int, list[str]]]) -> Iterator[Problem]:
    """Kueue tries a ClusterQueue's flavors in one order: two lists of a tenant that order the
    same classes differently cannot both be honoured (the first one wins)."""
    rank: dict[str, tuple[int, int]] = {}  # class -> (place in the queue's order, its rule)
    for position, names in orders:
        known = [rank[n] for n in names if n in rank]
        if any(later < earlier for earlier, later in itertools.pairwise(known)):
            yield Problem(
                ("spec", "tenants", index, "rewrite", position, "to"),
                f"this list orders its classes unlike rewrite[{min(r for _, r in known)}]; a "
                "tenant's queue tries its flavors in one order, that of its first list",
                "warning",
            )
        for name in names:
            rank.setdefault(name, (len(rank), position))
