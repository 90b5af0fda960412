"""DeviceTaintRules: the devices a rule's selector names are tainted as if their ResourceSlice
said so, and a blocking taint takes them out of capacity."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from quotaguard.policy.loader import load_policy_text
from quotaguard.quota.dracapacity import dra_capacity
from tests.controller.test_dra_loop import POLICY_TEXT, gpu_slice
from tests.quota.test_plan_kueue_mappings import DEVICE_CLASS

POLICY = load_policy_text(POLICY_TEXT, "dra.yaml")


def rule(name: str, effect: str = "NoExecute", **selector: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {"deviceSelector": selector, "taint": {"key": "example.com/xid", "effect": effect}},
    }


def capacity(*rules: dict[str, Any]) -> tuple[int, list[str]]:
    found = dra_capacity(
        POLICY, [gpu_slice("gpu-1", 4), gpu_slice("gpu-2", 4), DEVICE_CLASS, *rules]
    )
    return found.per_class().get("h100", 0), [o.gpu for o in found.outages.get("h100", ())]


def test_a_rule_naming_one_device_takes_it_out() -> None:
    assert capacity() == (8, [])
    taken = capacity(rule("one", driver="gpu.nvidia.com", pool="gpu-1", device="gpu-2"))
    assert taken == (7, ["gpu-1/gpu-2"])


def test_a_rule_naming_a_pool_takes_its_devices_and_no_effect_is_no_rule() -> None:
    pool, outages = capacity(rule("node", pool="gpu-2"))
    assert pool == 4 and outages == [f"gpu-2/gpu-{i}" for i in range(4)]
    assert capacity(rule("note", effect="None", pool="gpu-2"))[0] == 8
    assert (
        capacity(
            {
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRule",
                "metadata": {"name": "bad"},
                "spec": {"taint": "x"},
            }
        )[0]
        == 8
    )


@given(st.sets(st.integers(min_value=0, max_value=3)))
def test_capacity_is_what_no_rule_takes(tainted: set[int]) -> None:
    rules = [rule(f"r{i}", pool="gpu-1", device=f"gpu-{i}") for i in sorted(tainted)]
    left, outages = capacity(*rules)
    assert left == 8 - len(tainted) and len(outages) == len(tainted)
