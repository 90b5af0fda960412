"""Which resources the controller watches for a policy, and how each is listed and trimmed."""

from __future__ import annotations

import functools
from collections.abc import Hashable
from dataclasses import dataclass

from quotaguard.controller.kube_clients import (
    DRA_GROUP,
    DRA_VERSION,
    KUEUE_GROUP,
    TAINT_RULES,
    TAINT_RULES_VERSION,
    VOLCANO_GROUP,
    VOLCANO_VERSION,
    KubeClients,
    ServedGroups,
)
from quotaguard.controller.trim import (
    dra_trimmer,
    pod_group_trimmer,
    pod_line_filter,
    pod_trimmer,
    trim_node,
    whole_spec_trimmer,
    workload_trimmer,
)
from quotaguard.controller.watch import ListCall, ResourceKind
from quotaguard.policy.model import TenantPolicy

TERMINATED_PODS_EXCLUDED = "status.phase!=Succeeded,status.phase!=Failed"

# what DRA capacity and demand read (quotaguard.quota.dracapacity, drademand): plural -> kind
DRA_RESOURCES = {
    "resourceslices": "ResourceSlice",
    "deviceclasses": "DeviceClass",
    "resourceclaims": "ResourceClaim",
    "resourceclaimtemplates": "ResourceClaimTemplate",
}


@dataclass(frozen=True)
class Source:
    """A resource to watch; `config` changes when the watch must restart (e.g. a new version)."""

    kind: ResourceKind
    config: Hashable


def _custom(clients: KubeClients, group: str, version: str, plural: str) -> ListCall:
    call: ListCall = functools.partial(
        clients.custom.list_cluster_custom_object, group, version, plural
    )
    return call


def wanted_sources(
    clients: KubeClients, policy: TenantPolicy, served: ServedGroups
) -> dict[str, Source]:
    """Nodes and GPU pods always; Kueue or Volcano objects for the policy's backend when served;
    the DRA objects when the policy has classes backed by a DeviceClass and the API serves
    resource.k8s.io/v1."""
    gpu_resources = policy.gpu_resources
    sources = {
        "nodes": Source(ResourceKind("nodes", clients.core.list_node, trim_node), "v1"),
        "pods": Source(
            ResourceKind(
                "pods",
                clients.core.list_pod_for_all_namespaces,
                pod_trimmer(gpu_resources),
                keep_line=pod_line_filter(gpu_resources),
                # finished pods hold nothing; on big clusters they are most of the list
                field_selector=TERMINATED_PODS_EXCLUDED,
            ),
            ("v1", gpu_resources),
        ),
    }
    if policy.dra_classes and served.dra:
        sources |= _dra_sources(clients, taint_rules=served.device_taint_rules)
    backend = policy.spec.backend
    if backend == "kueue" and served.kueue:
        api_version = f"{KUEUE_GROUP}/{served.kueue}"
        sources["workloads"] = Source(
            ResourceKind(
                "workloads",
                _custom(clients, KUEUE_GROUP, served.kueue, "workloads"),
                workload_trimmer(api_version),
            ),
            api_version,
        )
        sources["clusterqueues"] = Source(
            ResourceKind(
                "clusterqueues",
                _custom(clients, KUEUE_GROUP, served.kueue, "clusterqueues"),
                whole_spec_trimmer(api_version, "ClusterQueue"),
            ),
            api_version,
        )
    if backend == "volcano" and served.volcano:
        api_version = f"{VOLCANO_GROUP}/{VOLCANO_VERSION}"
        sources["queues"] = Source(
            ResourceKind(
                "queues",
                _custom(clients, VOLCANO_GROUP, VOLCANO_VERSION, "queues"),
                whole_spec_trimmer(api_version, "Queue"),
            ),
            api_version,
        )
        sources["podgroups"] = Source(
            ResourceKind(
                "podgroups",
                _custom(clients, VOLCANO_GROUP, VOLCANO_VERSION, "podgroups"),
                pod_group_trimmer(api_version),
            ),
            api_version,
        )
    return sources


def _dra_sources(clients: KubeClients, *, taint_rules: bool) -> dict[str, Source]:
    api_version = f"{DRA_GROUP}/{DRA_VERSION}"
    sources = {
        plural: Source(
            ResourceKind(
                plural,
                _custom(clients, DRA_GROUP, DRA_VERSION, plural),
                dra_trimmer(api_version, kind),
            ),
            api_version,
        )
        for plural, kind in DRA_RESOURCES.items()
    }
    if taint_rules:
        rules_version = f"{DRA_GROUP}/{TAINT_RULES_VERSION}"
        sources[TAINT_RULES] = Source(
            ResourceKind(
                TAINT_RULES,
                _custom(clients, DRA_GROUP, TAINT_RULES_VERSION, TAINT_RULES),
                dra_trimmer(rules_version, "DeviceTaintRule"),
            ),
            rules_version,
        )
    return sources
