"""With `rebalance.manageQueues: true`: create the objects a policy needs when missing.

Kueue: ResourceFlavors (one per class flavor, with the class nodeSelector as nodeLabels) and a
LocalQueue pointing at the tenant's ClusterQueue in each of its literal namespaces (globs name
no namespace to create one in). Volcano: the parent queue the policy's `cohort` names, without
limits of its own. The tenant queues themselves are created by the writer. Existing objects
are never modified here.
"""

from __future__ import annotations

import logging
from typing import Any

from quotaguard.controller.kube_clients import (
    KUEUE_GROUP,
    VOLCANO_GROUP,
    VOLCANO_VERSION,
    KubeClients,
)
from quotaguard.policy.model import TenantPolicy, is_glob

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]
MANAGED_BY = {"app.kubernetes.io/managed-by": "quotaguard"}


def resource_flavors(policy: TenantPolicy, version: str) -> list[JsonObject]:
    found: dict[str, JsonObject] = {}
    for gpu_class in policy.spec.gpu_classes:
        found.setdefault(
            gpu_class.flavor,
            {
                "apiVersion": f"{KUEUE_GROUP}/{version}",
                "kind": "ResourceFlavor",
                "metadata": {"name": gpu_class.flavor, "labels": dict(MANAGED_BY)},
                "spec": {"nodeLabels": dict(gpu_class.node_selector)}
                if gpu_class.node_selector
                else {},
            },
        )
    return list(found.values())


def local_queues(policy: TenantPolicy, version: str) -> list[JsonObject]:
    return [
        {
            "apiVersion": f"{KUEUE_GROUP}/{version}",
            "kind": "LocalQueue",
            "metadata": {
                "name": tenant.local_queue,
                "namespace": namespace,
                "labels": dict(MANAGED_BY),
            },
            "spec": {"clusterQueue": tenant.queue},
        }
        for tenant in policy.spec.tenants
        for namespace in tenant.namespaces
        if not is_glob(namespace)
    ]


def _created(call: Any, *args: Any) -> bool:
    """Create; an object that already exists (409) or a namespace that does not (404) is
    not an error worth retrying every interval."""
    try:
        call(*args, _preload_content=False, _request_timeout=10)
    except Exception as exc:
        status = getattr(exc, "status", None)
        if status in (404, 409):
            return True
        log.warning("could not create %s: %s", args[-1]["metadata"]["name"], exc)
        return False
    log.info("created %s %s", args[-1]["kind"], args[-1]["metadata"]["name"])
    return True


def ensure_kueue_objects(clients: KubeClients, policy: TenantPolicy, version: str) -> bool:
    """Create missing ResourceFlavors and LocalQueues (blocking); True when all are in place."""
    custom = clients.custom
    done = True
    for flavor in resource_flavors(policy, version):
        done &= _created(
            custom.create_cluster_custom_object, KUEUE_GROUP, version, "resourceflavors", flavor
        )
    for queue in local_queues(policy, version):
        done &= _created(
            custom.create_namespaced_custom_object,
            KUEUE_GROUP,
            version,
            queue["metadata"]["namespace"],
            "localqueues",
            queue,
        )
    return done


def volcano_parent_queue(policy: TenantPolicy) -> JsonObject | None:
    """The Volcano parent queue of the tenant queues, when the policy names one."""
    if not policy.volcano_parent:
        return None
    return {
        "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
        "kind": "Queue",
        "metadata": {"name": policy.volcano_parent, "labels": dict(MANAGED_BY)},
        "spec": {"reclaimable": True, "weight": 1},
    }


def ensure_volcano_objects(clients: KubeClients, policy: TenantPolicy) -> bool:
    """Create the parent queue when missing (blocking); True when it is in place."""
    queue = volcano_parent_queue(policy)
    if queue is None:
        return True
    return _created(
        clients.custom.create_cluster_custom_object,
        VOLCANO_GROUP,
        VOLCANO_VERSION,
        "queues",
        queue,
    )
