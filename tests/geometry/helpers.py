"""A small A100 pool written out by hand: policy, nodes and demand for the layout planner."""

from __future__ import annotations

from typing import Any

from quotaguard.geometry.nodes import node_views
from quotaguard.policy.migconfig import builtin_configs, node_resources
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.cluster import Node, Pod
from quotaguard.quota.demand import ClassDemand
from tests import policies
from tests.policies import A100_PRODUCT, MIG_1G, MIG_2G, MIG_3G, PRODUCT_LABEL

PRODUCT = A100_PRODUCT
CLASSES = [MIG_1G, MIG_2G, MIG_3G, {"name": "a100", "resource": "nvidia.com/gpu", "memory": "80Gi"}]
CONFIGS = ["all-balanced", "all-1g.10gb", "all-3g.40gb"]


def policy(tenants: list[dict[str, Any]] | None = None, **pool: Any) -> TenantPolicy:
    tenants = tenants or [
        {"name": "small", "quota": {"mig-1g": {"guaranteed": 0}}},
        {"name": "large", "quota": {"mig-3g": {"guaranteed": 0}}},
    ]
    return policies.policy(
        tenants,
        classes=CLASSES,
        geometry={
            "mode": "apply",
            "pools": [
                {
                    "name": "a100",
                    "nodeSelector": {PRODUCT_LABEL: PRODUCT},
                    "configs": CONFIGS,
                    "minDwell": "30m",
                    **pool,
                }
            ],
        },
    )


SHARED = {
    "name": "shared",
    "resource": "nvidia.com/gpu.shared",
    "memory": "80Gi",
    "sharing": "time-slicing",
    "replicas": 4,
}


def sharing_policy(**spec: Any) -> TenantPolicy:
    """The pool may also take the time-slicing config ts-4 (each GPU offered 4 times as
    nvidia.com/gpu.shared), for tenant notebooks; `spec`: more fields of the spec (as
    `geometry_extra`, fields of `geometry`)."""
    extra = spec.pop("geometry_extra", {})
    return policies.policy(
        [
            {"name": "notebooks", "namespaces": ["nb"], "quota": {"shared": {}}},
            {"name": "small", "quota": {"mig-1g": {}}},
        ],
        classes=[*CLASSES, SHARED],
        **spec,
        geometry={
            **extra,
            "mode": "apply",
            "sharingConfigs": {"ts-4": {"replicas": 4}},
            "pools": [
                {
                    "name": "a100",
                    "nodeSelector": {PRODUCT_LABEL: PRODUCT},
                    "configs": ["all-balanced", "ts-4"],
                }
            ],
        },
    )


def node(
    name: str,
    config: str = "all-balanced",
    *,
    gpus: int = 8,
    unschedulable: bool = False,
    ready: bool = True,
    annotations: dict[str, str] | None = None,
    allocatable: dict[str, int] | None = None,
) -> Node:
    offers = node_resources(builtin_configs("A100-80GB")[config], "A100-80GB", gpus)
    return Node(
        name=name,
        ready=ready,
        unschedulable=unschedulable,
        taints=(),
        labels={
            "nvidia.com/gpu.product": PRODUCT,
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/mig.config": config,
            "nvidia.com/mig.config.state": "success",
        },
        allocatable=offers if allocatable is None else allocatable,
        annotations=annotations or {},
    )


def pod(node_name: str, resource: str = "nvidia.com/mig-1g.10gb", namespace: str = "small") -> Pod:
    return Pod(
        namespace, f"p-{node_name}", "Running", node_name, None, None, None, {}, {resource: 1}
    )


def views(the_policy: TenantPolicy, nodes: list[Node], pods: list[Pod] | None = None):
    return node_views(the_policy, nodes, pods or [])


def demand(**per_tenant: dict[str, int]) -> dict[str, dict[str, ClassDemand]]:
    return {
        tenant: {name: ClassDemand(0, amount) for name, amount in classes.items()}
        for tenant, classes in per_tenant.items()
    }
