"""Volcano Queue fields from targets: weight, capability (max), guarantee, deserved (target)."""

from __future__ import annotations

import copy

from quotaguard.controller.volcano import desired_spec, owned_spec, queue_changes, same_spec
from quotaguard.policy.loader import load_policy_text
from quotaguard.quota.cluster import ResourceQuota

POLICY_TEXT_OF_VC = """
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {name: vc}
spec:
  backend: volcano
  gpuClasses:
    - {name: h100, resource: nvidia.com/gpu, memory: 80Gi,
       nodeSelector: {product: h100}}
    - {name: a100, resource: nvidia.com/gpu, memory: 40Gi,
       nodeSelector: {product: a100}}
    - {name: mig, resource: nvidia.com/mig-1g.10gb, memory: 10Gi, slices: 1}
  tenants:
    - name: research
      namespaces: [research]
      quota:
        h100: {guaranteed: 2, max: 10}
        a100: {guaranteed: 1, max: 4}
        mig: {guaranteed: 0}
"""
POLICY = load_policy_text(POLICY_TEXT_OF_VC, "vc.yaml")
CURRENT = {
    "weight": 1,
    "reclaimable": True,
    "capability": {"cpu": "100", "nvidia.com/gpu": "99"},
    "guarantee": {"resource": {"memory": "1Ti"}},
}


def test_fields_map_from_targets_and_classes_sharing_a_resource_add_up():
    quotas = {
        "h100": ResourceQuota(nominal=6, borrowing_limit=4, lending_limit=4),
        "a100": ResourceQuota(nominal=3, borrowing_limit=1, lending_limit=2),
        "mig": ResourceQuota(nominal=5, borrowing_limit=None, lending_limit=5),
    }
    spec = copy.deepcopy(CURRENT)
    desired = desired_spec(spec, POLICY, quotas=quotas, weight=2.6)
    assert spec == CURRENT
    assert desired["weight"] == 3
    assert desired["deserved"] == {"nvidia.com/gpu": "9", "nvidia.com/mig-1g.10gb": "5"}
    # guaranteed = nominal - lendingLimit: 2 + 1 for the two GPU products
    assert desired["guarantee"] == {
        "resource": {"memory": "1Ti", "nvidia.com/gpu": "3", "nvidia.com/mig-1g.10gb": "0"}
    }
    # capability = max (10 + 4); the MIG class has no max: no capability for it
    assert desired["capability"] == {"cpu": "100", "nvidia.com/gpu": "14"}
    assert desired["reclaimable"] is True


def test_the_applied_part_is_the_class_resources_and_the_weight_only():
    quotas = {"h100": ResourceQuota(nominal=6, borrowing_limit=4, lending_limit=4)}
    owned = owned_spec(desired_spec(CURRENT, POLICY, quotas=quotas, weight=2.6), POLICY)
    # cpu capability, memory guarantee and reclaimable stay with whoever set them
    assert owned == {
        "deserved": {"nvidia.com/gpu": "6", "nvidia.com/mig-1g.10gb": "0"},
        "guarantee": {"resource": {"nvidia.com/gpu": "2", "nvidia.com/mig-1g.10gb": "0"}},
        "weight": 3,
    }


def test_weight_is_a_whole_number_of_at_least_one():
    assert desired_spec({}, POLICY, quotas={}, weight=0.4)["weight"] == 1
    assert desired_spec({}, POLICY, quotas={}, weight=1.4)["weight"] == 1


def test_unbounded_class_makes_the_shared_resource_unbounded():
    quotas = {
        "h100": ResourceQuota(nominal=6, borrowing_limit=None, lending_limit=4),
        "a100": ResourceQuota(nominal=3, borrowing_limit=1, lending_limit=2),
    }
    desired = desired_spec(CURRENT, POLICY, quotas=quotas, weight=1)
    assert "nvidia.com/gpu" not in desired["capability"]


def test_same_spec_ignores_quantity_spelling_and_describes_changes():
    quotas = {"h100": ResourceQuota(nominal=6, borrowing_limit=4, lending_limit=4)}
    desired = desired_spec(CURRENT, POLICY, quotas=quotas, weight=1)
    stored = copy.deepcopy(desired)
    stored["deserved"]["nvidia.com/gpu"] = "6000m"
    assert same_spec(stored, desired)
    assert not same_spec(CURRENT, desired)
    assert "deserved[nvidia.com/gpu] - -> 6" in queue_changes(CURRENT, desired)


def test_the_parent_queue_is_the_policys_cohort_and_only_when_it_names_one():
    quotas = {"h100": ResourceQuota(nominal=2, borrowing_limit=8, lending_limit=0)}
    assert "parent" not in desired_spec(CURRENT, POLICY, quotas=quotas, weight=1)
    with_cohort = load_policy_text(
        POLICY_TEXT_OF_VC.replace("  backend: volcano\n", "  backend: volcano\n  cohort: ml\n"),
        "vc.yaml",
    )
    desired = desired_spec(CURRENT, with_cohort, quotas=quotas, weight=1)
    assert desired["parent"] == "ml"
    assert "parent - -> ml" in queue_changes(CURRENT, desired)
    assert not same_spec(CURRENT, desired)
