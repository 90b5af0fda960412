"""The fleet's ClusterQueue patch: only the nominal quotas of the (flavor, resource) pairs the
queue lists change, a lending limit above the new nominal comes down to it, and the patch is
guarded by the resourceVersion it was computed from."""

from __future__ import annotations

from typing import Any

from quotaguard.controller.fleet_writes import quota_patch
from tests.policies import H100, MIG_1G, policy

FLEET = {"clusters": [{"name": "east", "kubeConfig": {"location": "east-kubeconfig"}}]}
POLICY = policy([{"name": "research"}], classes=(H100, MIG_1G), fleet=FLEET)


def queue(**h100: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "research", "resourceVersion": "42"},
        "spec": {
            "resourceGroups": [
                {
                    "flavors": [
                        {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "64"}]}
                    ]
                },
                {
                    "flavors": [
                        {"name": "h100", "resources": [{"name": "nvidia.com/gpu", **h100}]},
                        {
                            "name": "mig-1g",
                            "resources": [{"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 7}],
                        },
                    ]
                },
            ]
        },
    }


def test_only_the_planned_nominal_quotas_change_under_a_resource_version_test() -> None:
    patch = quota_patch(POLICY, queue(nominalQuota="8"), {"h100": 12})
    assert patch == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
        {
            "op": "replace",
            "path": "/spec/resourceGroups/1/flavors/0/resources/0/nominalQuota",
            "value": 12,
        },
    ]


def test_a_queue_at_its_plan_needs_no_patch() -> None:
    assert quota_patch(POLICY, queue(nominalQuota=12), {"h100": 12, "mig-1g": 7}) == []


def test_a_lending_limit_over_the_new_nominal_comes_down_to_it() -> None:
    patch = quota_patch(POLICY, queue(nominalQuota=16, lendingLimit=16), {"h100": 4})
    pointer = "/spec/resourceGroups/1/flavors/0/resources/0"
    assert patch[1:] == [
        {"op": "replace", "path": f"{pointer}/nominalQuota", "value": 4},
        {"op": "replace", "path": f"{pointer}/lendingLimit", "value": 4},
    ]


def test_a_class_the_queue_does_not_list_is_left_alone() -> None:
    bare = queue(nominalQuota=3)
    bare["spec"]["resourceGroups"][1]["flavors"].pop()
    assert quota_patch(POLICY, bare, {"mig-1g": 14}) == []
