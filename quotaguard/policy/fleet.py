"""`spec.fleet`: one tenant policy over a MultiKueue fleet.

A manager cluster queues Workloads and MultiKueue dispatches each to a worker cluster. The fleet
names the workers as MultiKueue does (a kubeconfig per cluster, kept in a Secret on the manager,
or a file the controller can read), or names a `MultiKueueConfig` whose `MultiKueueCluster`
objects are read from the manager. With a fleet, a tenant's `quota` (guaranteed, max) holds for
the whole fleet; a cluster may add a per-cluster guarantee and ceiling for a tenant and class.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Literal

from pydantic import Field

from quotaguard.policy.strict import Strict as _Strict

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# MultiKueue keeps a worker's kubeconfig under this key of its Secret.
KUBECONFIG_KEY = "kubeconfig"


class KubeConfigSource(_Strict):
    """Where a worker's kubeconfig is, as MultiKueueCluster's `spec.clusterSource.kubeConfig`:
    a Secret of the manager (`location` is its name, key `kubeconfig`) or a file path."""

    location: Annotated[str, Field(min_length=1)]
    location_type: Literal["Secret", "Path"] = "Secret"


class ClusterQuota(_Strict):
    """A tenant's guarantee and ceiling for one class on one worker cluster."""

    guaranteed: Annotated[int, Field(ge=0)] = 0
    max: Annotated[int | None, Field(ge=0)] = None


class FleetCluster(_Strict):
    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    kube_config: KubeConfigSource | None = None
    # tenant name -> class name -> the tenant's guarantee and ceiling on this cluster
    tenants: dict[str, dict[str, ClusterQuota]] = Field(default_factory=dict)


class Fleet(_Strict):
    # apply: write the workers' and the manager's ClusterQueues; recommend: only report
    mode: Literal["apply", "recommend", "off"] = "recommend"
    clusters: list[FleetCluster] = Field(default_factory=list)
    # read the workers from this MultiKueueConfig and its MultiKueueClusters on the manager
    multi_kueue_config: Annotated[str | None, Field(pattern=DNS_LABEL)] = None
    # where the kubeconfig Secrets are (Kueue's namespace, where MultiKueue reads them)
    kube_config_namespace: Annotated[str, Field(pattern=DNS_LABEL)] = "kueue-system"
    # a worker that does not answer a read within this many seconds is unreachable
    read_timeout_seconds: Annotated[float, Field(gt=0, le=300)] = 10.0

    @cached_property
    def clusters_by_name(self) -> dict[str, FleetCluster]:
        return {cluster.name: cluster for cluster in self.clusters}

    def cluster_quota(self, cluster: str, tenant: str, class_name: str) -> ClusterQuota | None:
        """The per-cluster guarantee and ceiling of a tenant and class, when the policy sets
        one (clusters MultiKueue names but the policy does not have none)."""
        found = self.clusters_by_name.get(cluster)
        if found is None:
            return None
        return found.tenants.get(tenant, {}).get(class_name)
