"""The ClusterQueue spec built from targets: only the GPU group, cohort and weight change."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from quotaguard.controller.kueue import (
    desired_spec,
    format_weight,
    owned_spec,
    quota_changes,
    same_spec,
)
from quotaguard.policy.loader import load_policy_file
from quotaguard.quota.cluster import ResourceQuota

POLICY = load_policy_file(Path(__file__).resolve().parents[2] / "config" / "policy.yaml")
V1BETA2 = "kueue.x-k8s.io/v1beta2"
CPU_GROUP = {
    "coveredResources": ["cpu", "memory"],
    "flavors": [
        {
            "name": "default",
            "resources": [
                {"name": "cpu", "nominalQuota": "64"},
                {"name": "memory", "nominalQuota": "256Gi"},
            ],
        }
    ],
}


def existing_spec() -> dict:
    return {
        "namespaceSelector": {},
        "preemption": {"reclaimWithinCohort": "Any"},
        "resourceGroups": [
            copy.deepcopy(CPU_GROUP),
            {
                "coveredResources": ["nvidia.com/mig-3g.40gb", "nvidia.com/mig-1g.10gb"],
                "flavors": [
                    {
                        "name": "h100-3g.40gb",
                        "resources": [
                            {"name": "nvidia.com/mig-3g.40gb", "nominalQuota": "4"},
                            {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": "0"},
                        ],
                    },
                    {
                        "name": "h100-1g.10gb",
                        "resources": [
                            {"name": "nvidia.com/mig-3g.40gb", "nominalQuota": "0"},
                            {
                                "name": "nvidia.com/mig-1g.10gb",
                                "nominalQuota": "14",
                                "borrowingLimit": "14",
                                "lendingLimit": "0",
                            },
                        ],
                    },
                ],
            },
        ],
    }


TARGETS = {
    "h100-1g.10gb": ResourceQuota(nominal=20, borrowing_limit=8, lending_limit=6),
    "h100-3g.40gb": ResourceQuota(nominal=5, borrowing_limit=None, lending_limit=1),
}


def build(spec: dict, **kw) -> dict:
    args = {"api_version": V1BETA2, "quotas": TARGETS, "weight": 1.4}
    args.update(kw)
    return desired_spec(spec, POLICY, **args)


def test_only_the_gpu_group_cohort_and_weight_change():
    spec = existing_spec()
    before = copy.deepcopy(spec)
    desired = build(spec)
    assert spec == before  # pure
    assert desired["resourceGroups"][0] == CPU_GROUP
    assert desired["namespaceSelector"] == {} and desired["preemption"] == before["preemption"]
    assert desired["cohortName"] == "gpu-pool"
    assert desired["fairSharing"] == {"weight": "1.4"}


def test_the_applied_part_leaves_every_field_quotaguard_does_not_set_to_its_manager():
    desired = build(existing_spec())
    owned = owned_spec(desired, api_version=V1BETA2)
    assert set(owned) == {"resourceGroups", "cohortName", "fairSharing"}
    assert owned["fairSharing"] == {"weight": "1.4"}  # not the rest of fairSharing
    # Kueue's resourceGroups is an atomic list: the CPU group goes along as it is
    assert owned["resourceGroups"] == desired["resourceGroups"]
    assert owned["resourceGroups"][0] == CPU_GROUP
    v1beta1 = owned_spec(
        build(existing_spec(), api_version="kueue.x-k8s.io/v1beta1"),
        api_version="kueue.x-k8s.io/v1beta1",
    )
    assert "cohort" in v1beta1 and "cohortName" not in v1beta1


def test_every_flavor_lists_every_covered_resource_in_order_with_zero_without_quota():
    group = build(existing_spec())["resourceGroups"][1]
    covered = group["coveredResources"]
    # existing order kept, the policy's missing class resources appended
    assert covered == [
        "nvidia.com/mig-3g.40gb",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
    ]
    assert [f["name"] for f in group["flavors"]] == [
        "h100-3g.40gb",
        "h100-1g.10gb",
        "h100",
        "shared",
    ]
    quotas = {}
    for flavor in group["flavors"]:
        assert [r["name"] for r in flavor["resources"]] == covered
        for entry in flavor["resources"]:
            quotas[(flavor["name"], entry["name"])] = entry
    assert quotas[("h100-1g.10gb", "nvidia.com/mig-1g.10gb")] == {
        "name": "nvidia.com/mig-1g.10gb",
        "nominalQuota": "20",
        "borrowingLimit": "8",
        "lendingLimit": "6",
    }
    # no max: no borrowingLimit at all
    assert quotas[("h100-3g.40gb", "nvidia.com/mig-3g.40gb")] == {
        "name": "nvidia.com/mig-3g.40gb",
        "nominalQuota": "5",
        "lendingLimit": "1",
    }
    # classes without a target (h100, shared) are written as 0, never left out
    assert quotas[("h100", "nvidia.com/gpu")] == {"name": "nvidia.com/gpu", "nominalQuota": "0"}
    assert quotas[("shared", "nvidia.com/gpu.shared")]["nominalQuota"] == "0"
    assert quotas[("h100", "nvidia.com/mig-1g.10gb")]["nominalQuota"] == "0"


def test_v1beta1_names_the_cohort_field_cohort():
    desired = build(existing_spec(), api_version="kueue.x-k8s.io/v1beta1")
    assert desired["cohort"] == "gpu-pool" and "cohortName" not in desired


def test_a_queue_without_a_gpu_group_gets_one_after_the_others():
    desired = build({"resourceGroups": [copy.deepcopy(CPU_GROUP)]})
    groups = desired["resourceGroups"]
    assert groups[0] == CPU_GROUP and len(groups) == 2
    assert set(groups[1]["coveredResources"]) == {
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-3g.40gb",
        "nvidia.com/gpu.shared",
    }


def test_building_twice_changes_nothing_and_spelling_of_quantities_is_no_change():
    once = build(existing_spec())
    assert build(once) == once
    stored = copy.deepcopy(once)
    stored["fairSharing"]["weight"] = "1400m"  # how the API server stores 1.4
    assert same_spec(stored, build(stored))
    assert not same_spec(existing_spec(), once)


def test_small_weight_moves_are_not_written():
    spec = build(existing_spec(), weight=1.0)
    assert build(spec, weight=1.03, weight_tolerance=0.05)["fairSharing"]["weight"] == "1"
    assert build(spec, weight=1.2, weight_tolerance=0.05)["fairSharing"]["weight"] == "1.2"


def test_changes_are_described_for_events():
    lines = quota_changes(existing_spec(), build(existing_spec()))
    assert "h100-1g.10gb/nvidia.com/mig-1g.10gb nominalQuota 14 -> 20" in lines
    assert "cohortName - -> gpu-pool" in lines
    assert "weight - -> 1.4" in lines


@pytest.mark.parametrize(
    ("weight", "text"), [(1.0, "1"), (1.4, "1.4"), (0.3333333, "0.333"), (2.5, "2.5"), (12.0, "12")]
)
def test_weight_quantity_strings(weight, text):
    assert format_weight(weight) == text
