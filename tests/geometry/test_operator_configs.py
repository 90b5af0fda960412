"""Configs a pool names but the policy does not define come from the GPU operator's ConfigMap."""

from __future__ import annotations

import yaml

from quotaguard.geometry.operatorconfigs import (
    from_configmap,
    undefined_configs,
    with_operator_configs,
)
from quotaguard.geometry.pool_layouts import pool_layouts
from tests.geometry.helpers import policy

SMALL_ONLY = {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}
OPERATOR = yaml.safe_dump(
    {
        "version": "v1",
        "mig-configs": {
            "serving-small": [SMALL_ONLY],
            # the operator's all-balanced differs from the catalogue's: the ConfigMap wins
            "all-balanced": [
                {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}
            ],
            "unrelated": [{"devices": "all", "mig-enabled": False}],
        },
    }
)


def layouts_of(the_policy):
    [pool] = pool_layouts(the_policy)
    return {name: layout.offers("A100-80GB", 1) for name, layout in pool.layouts.items()}


def test_a_named_config_only_the_operator_defines_is_planned_with_its_definition():
    the_policy = policy(configs=["all-balanced", "serving-small"])
    assert undefined_configs(the_policy) == ["all-balanced", "serving-small"]
    assert "serving-small" not in layouts_of(the_policy)  # unknown without the ConfigMap
    merged, problems = with_operator_configs(the_policy, OPERATOR)
    assert problems == []
    offers = layouts_of(merged)
    assert offers["serving-small"] == {"nvidia.com/mig-1g.10gb": 7}
    assert offers["all-balanced"] == {"nvidia.com/mig-3g.40gb": 2}
    assert "unrelated" not in (merged.spec.geometry.mig_configs or {})["mig-configs"]


def test_the_policys_own_configs_win_and_need_no_configmap():
    own = {"version": "v1", "mig-configs": {"serving-small": [SMALL_ONLY]}}
    the_policy = policy(configs=["serving-small"])
    the_policy = the_policy.model_copy(
        update={
            "spec": the_policy.spec.model_copy(
                update={
                    "geometry": the_policy.spec.geometry.model_copy(update={"mig_configs": own})
                }
            )
        }
    )
    assert undefined_configs(the_policy) == []
    assert with_operator_configs(the_policy, "not: [yaml") == (the_policy, [])


def test_a_broken_or_partial_configmap_is_said_and_leaves_the_built_ins():
    the_policy = policy(configs=["all-balanced", "serving-small"])
    same, problems = with_operator_configs(the_policy, "version: v1\nmig-configs: [")
    assert same is the_policy and problems[0].startswith("config.yaml is not YAML")
    same, problems = with_operator_configs(the_policy, "version: v1\n")
    assert same is the_policy and "no mig-configs" in problems[0]
    broken = yaml.safe_dump(
        {"version": "v1", "mig-configs": {"serving-small": [{"devices": "all", "mig-enabled": 3}]}}
    )
    same, problems = with_operator_configs(the_policy, broken)
    assert same is the_policy
    assert "config 'all-balanced' is not in it" in problems
    assert any("serving-small" in p and "mig-enabled" in p for p in problems), problems
    assert layouts_of(same)["all-balanced"] == {
        "nvidia.com/mig-1g.10gb": 2,
        "nvidia.com/mig-2g.20gb": 1,
        "nvidia.com/mig-3g.40gb": 1,
    }


def test_the_configmaps_data_is_read_through_its_config_yaml_key():
    the_policy = policy(configs=["all-balanced", "serving-small"])
    found = from_configmap(the_policy, {"config.yaml": OPERATOR, "other.yaml": "x: ["})
    assert found is not None
    merged, problems = found
    assert problems == []
    assert layouts_of(merged)["serving-small"] == {"nvidia.com/mig-1g.10gb": 7}
    # broken text: the same problems as from the text itself, the policy unchanged
    same, problems = from_configmap(the_policy, {"config.yaml": "version: v1\n"}) or (None, [])
    assert same is the_policy and "no mig-configs" in problems[0]


def test_data_without_a_config_yaml_text_is_nothing_to_read():
    the_policy = policy(configs=["serving-small"])
    for data in (None, {}, {"config.yml": OPERATOR}, {"config.yaml": 3}):
        assert from_configmap(the_policy, data) is None, data


def test_a_configmap_config_that_does_not_fit_the_pools_gpu_is_said_and_not_taken():
    # validate checks the policy's own configs against the catalogue; the ConfigMap's are
    # checked when read, the same way, for the GPU of every pool that lists them
    too_big = {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 3}}
    wrong = {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}
    text = yaml.safe_dump(
        {"version": "v1", "mig-configs": {"big-3g": [too_big], "small-40": [wrong]}}
    )
    the_policy = policy(configs=["all-balanced", "big-3g", "small-40"])
    merged, problems = with_operator_configs(the_policy, text)
    assert (
        "config 'big-3g', pool 'a100': 3 x 3g.40gb on one A100-80GB: at most 2 fit; "
        "the pool does not take it"
    ) in problems
    assert any(p.startswith("config 'small-40', pool 'a100': profile '1g.5gb'") for p in problems)
    assert set(layouts_of(merged)) == {"all-balanced"}
