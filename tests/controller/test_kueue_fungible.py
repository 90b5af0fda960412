"""The ClusterQueue of a tenant whose rules list several GPU models (`to: [h100, a100]`):
each model is its own flavor with its own quota, in the order the list asks Kueue to try
them, and the tenant's flavorFungibility."""

from __future__ import annotations

import copy

import pytest
import yaml

from quotaguard.controller.kueue import desired_spec, owned_spec
from quotaguard.quota.cluster import ResourceQuota
from tests import policies
from tests.policies import A100_MODEL, H100_MODEL

MIG1 = {"name": "mig1", "resource": "nvidia.com/mig-1g.10gb", "memory": "10Gi", "slices": 1}

V1BETA2 = "kueue.x-k8s.io/v1beta2"
QUOTAS = {
    "h100": ResourceQuota(nominal=8, borrowing_limit=8, lending_limit=0),
    "a100": ResourceQuota(nominal=6, borrowing_limit=6, lending_limit=2),
}


def policy(fungibility: str = "{whenCanBorrow: TryNextFlavor}"):
    """Training's rules list h100 then a100 (one resource, two models); `fungibility` its
    flavorFungibility as written in YAML."""
    training = {
        "name": "training",
        "quota": {"h100": {"guaranteed": 8, "max": 16}, "a100": {"guaranteed": 4, "max": 12}},
        "flavorFungibility": yaml.safe_load(fungibility),
        "rewrite": [{"to": ["h100", "a100"]}],
    }
    return policies.policy(
        [training, {"name": "other"}],
        classes=(A100_MODEL, H100_MODEL, MIG1),
        name="p",
        cohort="gpus",
    )


def gpu_group(spec: dict) -> dict:
    return next(g for g in spec["resourceGroups"] if "nvidia.com/gpu" in g["coveredResources"])


def quotas_by_flavor(group: dict) -> dict[str, dict[str, str]]:
    return {
        f["name"]: {k: v for k, v in f["resources"][0].items() if k != "name"}
        for f in group["flavors"]
    }


def test_a_new_queue_lists_the_models_in_the_lists_order_each_with_its_own_quota():
    chosen = policy()
    spec = desired_spec(
        {},
        chosen,
        api_version=V1BETA2,
        quotas=QUOTAS,
        weight=1,
        tenant=chosen.tenants_by_name["training"],
    )
    group = gpu_group(spec)
    assert [f["name"] for f in group["flavors"]] == ["h100", "a100", "mig1"]
    assert group["coveredResources"] == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]
    assert quotas_by_flavor(group) == {
        "h100": {"nominalQuota": "8", "borrowingLimit": "8", "lendingLimit": "0"},
        "a100": {"nominalQuota": "6", "borrowingLimit": "6", "lendingLimit": "2"},
        "mig1": {"nominalQuota": "0"},
    }
    assert spec["flavorFungibility"] == {
        "whenCanBorrow": "TryNextFlavor",
        "whenCanPreempt": "TryNextFlavor",
    }


def test_an_existing_queue_gets_the_lists_order_in_the_places_its_flavors_hold():
    chosen = policy()
    current = desired_spec({}, chosen, api_version=V1BETA2, quotas=QUOTAS, weight=1)
    flavors = gpu_group(current)["flavors"]
    assert [f["name"] for f in flavors] == ["a100", "h100", "mig1"]  # policy order
    gpu_group(current)["flavors"] = [flavors[2], flavors[0], flavors[1]]  # mig1, a100, h100
    spec = desired_spec(
        copy.deepcopy(current),
        chosen,
        api_version=V1BETA2,
        quotas=QUOTAS,
        weight=1,
        tenant=chosen.tenants_by_name["training"],
    )
    assert [f["name"] for f in gpu_group(spec)["flavors"]] == ["mig1", "h100", "a100"]


def test_a_tenant_without_lists_keeps_the_queues_order_and_its_fungibility():
    chosen = policy()
    current = {"flavorFungibility": {"whenCanBorrow": "MayStopSearch"}}
    spec = desired_spec(
        current,
        chosen,
        api_version=V1BETA2,
        quotas={},
        weight=1,
        tenant=chosen.tenants_by_name["other"],
    )
    assert [f["name"] for f in gpu_group(spec)["flavors"]] == ["a100", "h100", "mig1"]
    assert spec["flavorFungibility"] == {"whenCanBorrow": "MayStopSearch"}


def test_the_applied_part_carries_the_fungibility_only_of_a_tenant_that_sets_it():
    """Server-side apply writes only what it sends: a fungibility built but not applied would
    never reach the queue."""
    chosen = policy()
    current = {"flavorFungibility": {"whenCanBorrow": "MayStopSearch"}}
    for name, expected in (("training", "TryNextFlavor"), ("other", None)):
        tenant = chosen.tenants_by_name[name]
        desired = desired_spec(
            current, chosen, api_version=V1BETA2, quotas=QUOTAS, weight=1, tenant=tenant
        )
        owned = owned_spec(desired, api_version=V1BETA2, tenant=tenant)
        assert (owned.get("flavorFungibility") or {}).get("whenCanBorrow") == expected


@pytest.mark.parametrize(
    ("fungibility", "api_version", "expected"),
    [
        (
            "{whenCanBorrow: Borrow, whenCanPreempt: Preempt}",
            V1BETA2,
            {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"},
        ),
        (
            "{whenCanBorrow: MayStopSearch}",
            "kueue.x-k8s.io/v1beta1",
            {"whenCanBorrow": "Borrow", "whenCanPreempt": "TryNextFlavor"},
        ),
        (
            "{whenCanBorrow: TryNextFlavor}",
            V1BETA2,
            {
                "preference": "BorrowingOverPreemption",
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "TryNextFlavor",
            },
        ),
    ],
)
def test_flavor_fungibility_is_spelt_as_the_served_api_knows_it(fungibility, api_version, expected):
    chosen = policy(fungibility)
    current = {"flavorFungibility": {"preference": "BorrowingOverPreemption"}}
    spec = desired_spec(
        current,
        chosen,
        api_version=api_version,
        quotas=QUOTAS,
        weight=1,
        tenant=chosen.tenants_by_name["training"],
    )
    # Kueue refuses `preference` unless both fields are TryNextFlavor
    assert spec["flavorFungibility"] == expected
