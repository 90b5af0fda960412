"""The fleet's quotas written: each tenant's ClusterQueue on a cluster (a worker, or the
manager) gets the nominal quota the fleet plan gives each of its classes.

A ClusterQueue is patched, never created or restructured: only the `nominalQuota` of a (flavor,
resource) it already lists changes (and its `lendingLimit`, which Kueue requires to stay at or
under the nominal quota). The patch tests the resourceVersion it was computed from, so a
concurrent edit makes it fail and the next cycle computes it again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from quotaguard.controller.fleet_reads import Reader
from quotaguard.kube.names import KUEUE_GROUP
from quotaguard.kube.quantity import QuantityError, parse_quantity
from quotaguard.policy.model import TenantPolicy

log = logging.getLogger("quotaguard.fleet")
JSON_PATCH = "application/json-patch+json"
JsonPatch = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class FleetWrite:
    cluster: str
    queue: str
    changed: int  # quotas changed
    error: str = ""


def _units(value: object) -> int | None:
    try:
        return int(parse_quantity(value))
    except QuantityError:
        return None


def _entries(queue: Mapping[str, Any]) -> Iterator[tuple[str, str, str, Mapping[str, Any]]]:
    """(JSON pointer, flavor, resource, entry) of every quota the ClusterQueue lists."""
    groups = queue.get("spec", {}).get("resourceGroups") or []
    for g, group in enumerate(groups):
        for f, flavor in enumerate(group.get("flavors") or []):
            for r, resource in enumerate(flavor.get("resources") or []):
                pointer = f"/spec/resourceGroups/{g}/flavors/{f}/resources/{r}"
                yield pointer, str(flavor.get("name")), str(resource.get("name")), resource


def quota_patch(
    policy: TenantPolicy, queue: Mapping[str, Any], planned: Mapping[str, int]
) -> JsonPatch:
    """The JSON Patch that sets a ClusterQueue's nominal quotas to `planned` (class -> units);
    empty when it holds them already."""
    wanted = {
        (c.flavor, c.resource): planned[c.name]
        for c in policy.spec.gpu_classes
        if c.name in planned
    }
    operations: JsonPatch = []
    for pointer, flavor, resource, entry in _entries(queue):
        nominal = wanted.get((flavor, resource))
        if nominal is None:
            continue
        if _units(entry.get("nominalQuota")) != nominal:
            operations.append(
                {"op": "replace", "path": f"{pointer}/nominalQuota", "value": nominal}
            )
        lending = _units(entry.get("lendingLimit")) if "lendingLimit" in entry else None
        if lending is not None and lending > nominal:
            operations.append(
                {"op": "replace", "path": f"{pointer}/lendingLimit", "value": nominal}
            )
    if not operations:
        return []
    version = queue.get("metadata", {}).get("resourceVersion")
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": version}, *operations]


def write_quotas(
    cluster: str,
    reader: Reader,
    policy: TenantPolicy,
    planned: Mapping[str, Mapping[str, int]],
    timeout: float,
) -> list[FleetWrite]:
    """Patch each tenant's ClusterQueue on one cluster (blocking; in a thread)."""
    custom = reader.clients.custom
    written = []
    for tenant in policy.spec.tenants:
        quotas = planned.get(tenant.name)
        if not quotas:
            continue
        try:
            response = custom.get_cluster_custom_object(
                KUEUE_GROUP,
                reader.kueue_version,
                "clusterqueues",
                tenant.queue,
                _preload_content=False,
                _request_timeout=timeout,
            )
            try:
                queue = json.loads(response.data)
            finally:
                response.release_conn()
            patch = quota_patch(policy, queue, quotas)
            if patch:
                custom.patch_cluster_custom_object(
                    KUEUE_GROUP,
                    reader.kueue_version,
                    "clusterqueues",
                    tenant.queue,
                    patch,
                    _content_type=JSON_PATCH,
                    _preload_content=False,
                    _request_timeout=timeout,
                ).release_conn()
            written.append(FleetWrite(cluster, tenant.queue, len(patch) - 1 if patch else 0))
        except Exception as exc:  # one queue's failure is reported, the others still written
            reason = str(getattr(exc, "reason", None) or exc).splitlines()[0]
            log.warning(
                "fleet: cannot write ClusterQueue %s on %s: %s", tenant.queue, cluster, reason
            )
            written.append(FleetWrite(cluster, tenant.queue, 0, reason))
    return written
