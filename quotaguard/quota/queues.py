"""What each tenant's queue holds now, per GPU class (the `current` the planner steps from).

Kueue: the ClusterQueue named `tenant.queue`, quota of (class flavor, class resource).
Volcano: the Queue named `tenant.queue`: nominal = deserved, borrowing = capability - deserved,
lending = deserved - guarantee (Volcano keys these by resource name only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.cluster import ClusterQueue, ClusterSnapshot, ResourceQuota, VolcanoQueue


@dataclass(frozen=True, slots=True)
class QueueState:
    name: str
    cohort: str | None
    weight: float | None
    # class name -> quota, for the classes the queue lists
    quotas: Mapping[str, ResourceQuota]


def _from_cluster_queue(policy: TenantPolicy, queue: ClusterQueue) -> QueueState:
    quotas = {
        gpu_class.name: found
        for gpu_class in policy.spec.gpu_classes
        if (found := queue.quotas.get((gpu_class.flavor, gpu_class.resource))) is not None
    }
    return QueueState(queue.name, queue.cohort, queue.fair_weight, quotas)


def _from_volcano_queue(policy: TenantPolicy, queue: VolcanoQueue) -> QueueState:
    quotas = {}
    for gpu_class in policy.spec.gpu_classes:
        resource = gpu_class.resource
        if resource not in queue.deserved:
            continue
        nominal = queue.deserved[resource]
        capability = queue.capability.get(resource)
        quotas[gpu_class.name] = ResourceQuota(
            nominal=nominal,
            borrowing_limit=None if capability is None else max(0, capability - nominal),
            lending_limit=max(0, nominal - queue.guarantee.get(resource, 0)),
        )
    return QueueState(queue.name, queue.parent, queue.weight, quotas)


def current_state(policy: TenantPolicy, snapshot: ClusterSnapshot) -> dict[str, QueueState]:
    """Tenant name -> its queue as it is now; tenants whose queue does not exist are absent."""
    if policy.spec.backend == "volcano":
        volcano = {queue.name: queue for queue in snapshot.volcano_queues}
        return {
            tenant.name: _from_volcano_queue(policy, volcano[tenant.queue])
            for tenant in policy.spec.tenants
            if tenant.queue in volcano
        }
    kueue = {queue.name: queue for queue in snapshot.cluster_queues}
    return {
        tenant.name: _from_cluster_queue(policy, kueue[tenant.queue])
        for tenant in policy.spec.tenants
        if tenant.queue in kueue
    }
