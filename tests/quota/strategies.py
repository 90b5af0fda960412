"""Generated policies, capacities, demands and current queues for the planner's properties."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.class_capacity import ClassCapacity
from quotaguard.quota.cluster import ResourceQuota
from quotaguard.quota.demand import ClassDemand
from quotaguard.quota.queues import QueueState
from tests.policies import policy

CLASSES = [
    {"name": "h100", "resource": "nvidia.com/gpu", "memory": "80Gi"},
    {"name": "h100-1g.10gb", "resource": "nvidia.com/mig-1g.10gb", "memory": "10Gi", "slices": 1},
    {
        "name": "shared",
        "resource": "nvidia.com/gpu.shared",
        "memory": "80Gi",
        "sharing": "time-slicing",
        "replicas": 4,
    },
]
NAMES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"]


@dataclass(frozen=True)
class Case:
    policy: TenantPolicy
    capacity: dict[str, ClassCapacity]
    demand: dict[str, dict[str, ClassDemand]]
    current: dict[str, QueueState]
    weights: dict[str, float]


@st.composite
def quotas(draw: st.DrawFn) -> dict[str, Any]:
    guaranteed = draw(st.integers(0, 20))
    ceiling = draw(st.one_of(st.none(), st.integers(guaranteed, guaranteed + 40)))
    return (
        {"guaranteed": guaranteed}
        if ceiling is None
        else {
            "guaranteed": guaranteed,
            "max": ceiling,
        }
    )


@st.composite
def policies(draw: st.DrawFn) -> TenantPolicy:
    classes = CLASSES[: draw(st.integers(1, len(CLASSES)))]
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True))
    tenants = []
    for name in names:
        chosen = draw(st.lists(st.sampled_from([c["name"] for c in classes]), unique=True))
        tenants.append(
            {
                "name": name,
                "namespaces": [name],
                "weight": draw(st.sampled_from([0.5, 1, 1, 2, 3, 7.5])),
                "allowedClasses": chosen,
                "quota": {c: draw(quotas()) for c in chosen},
            }
        )
    rebalance = {
        "minChange": draw(st.integers(0, 3)),
        "maxStepPercent": draw(st.sampled_from([10, 25, 50, 100])),
        "maxWeightFactor": draw(st.sampled_from([1, 2, 4])),
    }
    return policy(tenants, classes=classes, name="generated", rebalance=rebalance)


@st.composite
def cases(draw: st.DrawFn, *, with_current: bool | None = None) -> Case:
    policy = draw(policies())
    capacity = {}
    for gpu_class in policy.spec.gpu_classes:
        total = draw(st.integers(0, 120))
        capacity[gpu_class.name] = ClassCapacity(
            gpu_class.name, gpu_class.resource, total, 0, draw(st.integers(0, total))
        )
    demand: dict[str, dict[str, ClassDemand]] = {}
    current: dict[str, QueueState] = {}
    weights: dict[str, float] = {}
    has_current = draw(st.booleans()) if with_current is None else with_current
    for tenant in policy.spec.tenants:
        demand[tenant.name] = {
            name: ClassDemand(draw(st.integers(0, 40)), draw(st.integers(0, 40)))
            for name in tenant.quota
        }
        if draw(st.booleans()):
            weights[tenant.name] = draw(st.floats(0.1, 10))
        if has_current and draw(st.integers(0, 4)):
            current[tenant.name] = QueueState(
                tenant.queue,
                "cohort",
                1.0,
                {
                    name: ResourceQuota(draw(st.integers(0, 80)), None, None)
                    for name in tenant.quota
                    if draw(st.integers(0, 5))
                },
            )
    return Case(policy, capacity, demand, current, weights)
