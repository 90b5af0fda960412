"""The catalogue against the GPU operator's default mig-parted config and GFD's product labels."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from quotaguard.policy.catalogue import (
    CATALOGUE,
    GPU_MODELS,
    parse_profile,
    profile_of_resource,
    profiles_for_gpu,
    resource_of_profile,
)
from quotaguard.policy.loader import load_policy_documents
from quotaguard.policy.migconfig import (
    builtin_configs,
    builtin_document,
    config_problems,
    gpu_model,
    layout_problems,
    node_resources,
    parse_mig_configs,
)

OPERATOR: dict[str, Any] = yaml.safe_load(
    (Path(__file__).parent.parent / "fixtures" / "gpu-operator" / "config-names.yaml").read_text()
)
OPERATOR_NAMES = [(gpu, name) for gpu, names in OPERATOR["gpus"].items() for name in names]


def test_every_catalogue_gpu_is_one_the_operator_configures():
    assert set(OPERATOR["gpus"]) == set(GPU_MODELS)


@pytest.mark.parametrize(("gpu", "name"), OPERATOR_NAMES)
def test_every_config_of_the_operator_is_built_in_and_fits(gpu, name):
    config = builtin_configs(gpu).get(name)
    assert config is not None, f"{name} is not built in for {gpu}"
    assert config_problems(config, gpu) == []
    if name != "all-balanced":
        (offered,) = node_resources(config, gpu, 1)
        assert offered == "nvidia.com/mig-" + name.removeprefix("all-")


@pytest.mark.parametrize("gpu", GPU_MODELS)
def test_the_built_in_names_are_the_operators_and_no_others(gpu):
    assert set(builtin_configs(gpu)) == {*OPERATOR["every"], *OPERATOR["gpus"][gpu]}


@pytest.mark.parametrize(
    ("name", "gpu", "devices"),
    [
        (name, gpu, devices)
        for name, per_gpu in OPERATOR["devices"].items()
        for gpu, devices in per_gpu.items()
    ],
)
def test_configs_the_operator_filters_by_gpu_give_each_gpu_its_devices(name, gpu, devices):
    entry = builtin_configs(gpu)[name].for_gpu(gpu)
    assert entry is not None and dict(entry.mig_devices) == devices


def test_the_operators_unfiltered_entries_fit_the_gpus_it_names():
    """The operator's `all-1g.12gb` has no device-filter: mig-manager applies it to any GPU,
    and it fits the H100 of a GH200 (96 GB), which once was taken for an H200."""
    configs, problems = parse_mig_configs(
        {
            "version": "v1",
            "mig-configs": {
                "all-1g.12gb": [
                    {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.12gb": 7}}
                ],
                "all-1g.24gb.gfx": [
                    {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.24gb+gfx": 4}}
                ],
            },
        }
    )
    assert problems == []
    gh200 = gpu_model({"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"})
    assert gh200 == "GH200-96GB"
    assert config_problems(configs["all-1g.12gb"], gh200) == []
    assert config_problems(configs["all-1g.12gb"], "H200-141GB") == [
        "profile '1g.12gb' does not exist on H200-141GB (offered: 1g.18gb, 1g.18gb+me, "
        "1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb)"
    ]
    assert config_problems(configs["all-1g.24gb.gfx"], "RTX-PRO-6000-96GB") == []
    assert node_resources(configs["all-1g.24gb.gfx"], "RTX-PRO-6000-96GB", 2) == {
        "nvidia.com/mig-1g.24gb.gfx": 8
    }


@pytest.mark.parametrize(
    ("devices", "gpu", "problem"),
    [
        ({"1g.10gb+me": 2}, "A100-80GB", "2 x 1g.10gb+me on one A100-80GB: at most 1 fit"),
        ({"1g.24gb+gfx": 1}, "H100-80GB", "profile '1g.24gb+gfx' does not exist on H100-80GB"),
        ({"1g.10gb-me": 1}, "H100-80GB", "profile '1g.10gb-me' does not exist on H100-80GB"),
        (
            {"2g.48gb": 2, "1g.24gb-me": 1},
            "RTX-PRO-6000-96GB",
            "needs 5 compute and 5 memory slices; one RTX-PRO-6000-96GB has 4 and 4",
        ),
        ({"3g.90gb": 2, "1g.23gb": 1}, "B200-180GB", "needs 7 compute and 9 memory slices"),
    ],
)
def test_layouts_that_cannot_be_made_say_why(devices, gpu, problem):
    found = layout_problems(devices, gpu)
    assert len(found) == 1 and problem in found[0], found


def test_media_extensions_fit_beside_plain_slices():
    assert layout_problems({"1g.10gb+me": 1, "1g.10gb": 6}, "H100-80GB") == []
    assert layout_problems({"1g.24gb+me.all": 1, "1g.24gb-me": 3}, "RTX-PRO-6000-96GB") == []


@pytest.mark.parametrize(
    ("product", "memory", "model"),
    [
        ("NVIDIA-GH200-480GB", None, "GH200-96GB"),
        ("NVIDIA-GH200-480GB", "97871", "GH200-96GB"),
        ("NVIDIA-GH200-144G-HBM3e", None, "GH200-144GB"),
        ("NVIDIA-GH200-624GB", "146432", "GH200-144GB"),
        ("NVIDIA-H200", None, "H200-141GB"),
        ("NVIDIA-H200-NVL", None, "H200-141GB"),
        ("NVIDIA-H20", None, "H20-96GB"),
        ("NVIDIA-H100-80GB-HBM3", None, "H100-80GB"),
        ("NVIDIA-H100-NVL", None, "H100-94GB"),
        ("NVIDIA-H800-NVL", None, "H100-94GB"),
        ("NVIDIA-H800", None, "H100-80GB"),
        ("NVIDIA-H100-SXM5-94GB", None, "H100-94GB"),
        ("NVIDIA-H100-PCIe", "81559", "H100-80GB"),
        ("NVIDIA-H100-96GB", None, "H100-96GB"),
        ("NVIDIA-A800-SXM4-80GB", None, "A100-80GB"),
        ("NVIDIA-A100-PCIE-40GB", None, "A100-40GB"),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", None, "A100-40GB"),
        ("NVIDIA-A100-SXM4-80GB-SHARED", None, "A100-80GB"),
        ("NVIDIA-B200", None, "B200-180GB"),
        ("NVIDIA-B200-MIG-1g.23gb", None, "B200-180GB"),
        ("NVIDIA-GB200", None, "GB200-186GB"),
        ("NVIDIA-B300-SXM6-AC", None, "B300-269GB"),
        ("NVIDIA-GB300", None, "GB300-278GB"),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", None, "RTX-PRO-6000-96GB"),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition", None, "RTX-PRO-6000-96GB"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", None, "RTX-PRO-6000-96GB"),
        ("NVIDIA-RTX-6000-Ada-Generation", None, None),
        ("NVIDIA-L40S", None, None),
        ("NVIDIA-GH100", None, None),
        ("NVIDIA-H100-PCIe", "²", "H100-80GB"),  # a digit int() refuses
        ("NVIDIA-H100-" + "9" * 5000 + "GB", None, "H100-80GB"),  # past int()'s digit limit
    ],
)
def test_gpu_model_from_the_products_gfd_publishes(product, memory, model):
    labels = {"nvidia.com/gpu.product": product}
    if memory is not None:
        labels["nvidia.com/gpu.memory"] = memory
    assert gpu_model(labels) == model


@pytest.mark.parametrize(
    ("resource", "profile"),
    [
        ("nvidia.com/mig-1g.10gb", "1g.10gb"),
        ("nvidia.com/mig-1g.10gb.me", "1g.10gb+me"),
        ("nvidia.com/mig-1g.24gb-me", "1g.24gb-me"),
        ("nvidia.com/mig-1g.24gb.gfx", "1g.24gb+gfx"),
        ("nvidia.com/mig-1g.24gb.me.all", "1g.24gb+me.all"),
        ("nvidia.com/mig-4g.96gb.gfx", "4g.96gb+gfx"),
        ("nvidia.com/mig-2g.99gb.me", "2g.99gb+me"),  # not in the catalogue: read anyway
        ("nvidia.com/mig-3g.40gb", "3g.40gb"),
        ("nvidia.com/mig-1c.3g.20gb", "1c.3g.20gb"),  # a compute instance of a 3g.20gb
    ],
)
def test_profile_of_a_device_plugin_resource(resource, profile):
    found = profile_of_resource(resource)
    assert found is not None and found.name == profile and found.resource == resource


@pytest.mark.parametrize(
    "resource",
    [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-",
        "nvidia.com/mig-big",
        "cpu",
        "nvidia.com/mig-1g." + "9" * 5000 + "gb",  # a tenant's pod may name anything
        "nvidia.com/mig-\u0661g.\u0665gb",  # digits, but not ASCII ones
    ],
)
def test_other_resources_have_no_profile(resource):
    assert profile_of_resource(resource) is None


def test_every_catalogue_profile_round_trips_through_its_resource():
    for profile in CATALOGUE:
        found = profile_of_resource(profile.resource)
        assert found is not None
        assert (found.name, found.slices, found.memory_gb) == (
            profile.name,
            profile.slices,
            profile.memory_gb,
        )


def test_profile_names_parse_into_slices_memory_and_attributes():
    parsed = parse_profile("1g.24gb+me.all")
    assert parsed is not None
    assert (parsed.slices, parsed.memory_gb, parsed.attributes, parsed.base) == (
        1,
        24,
        "+me.all",
        "1g.24gb",
    )
    assert parse_profile("1g.10gb me") is None
    shared = parse_profile("1c.3g.20gb")
    assert shared is not None
    assert (shared.compute, shared.slices, shared.base) == (1, 3, "3g.20gb")


def test_the_builtin_document_offers_what_each_gpu_builds_in():
    configs, problems = parse_mig_configs(builtin_document())
    assert problems == []
    for gpu in GPU_MODELS:
        for name, config in builtin_configs(gpu).items():
            assert node_resources(configs[name], gpu, 2) == node_resources(config, gpu, 2), name


def test_a_seven_slice_gpu_is_full_with_its_balanced_layout():
    """2 x 1g, 1 x 2g, 1 x 3g: 7 compute slices and the 8 memory slices of every such GPU."""
    for gpu in GPU_MODELS:
        if max(p.slices for p in profiles_for_gpu(gpu)) == 7:
            balanced = dict(builtin_configs(gpu)["all-balanced"].entries[0].mig_devices)
            smallest = next(iter(balanced))
            assert layout_problems(balanced, gpu) == [], gpu
            assert layout_problems({**balanced, smallest: 3}, gpu) != [], gpu


POOL_POLICY = textwrap.dedent(
    """\
    apiVersion: quotaguard.dev/v1alpha1
    kind: TenantPolicy
    metadata: {name: p}
    spec:
      gpuClasses:
        - {name: small, resource: nvidia.com/mig-{small}, memory: {memory}Gi, slices: 1,
           nodeSelector: {nvidia.com/gpu.product: {product}}}
        - {name: whole, resource: nvidia.com/gpu, memory: 80Gi,
           nodeSelector: {nvidia.com/gpu.product: {product}}}
      geometry:
        pools:
          - name: pool
            nodeSelector: {nvidia.com/gpu.product: {product}}
            configs: [all-disabled, all-{small}]
    """
)


@pytest.mark.parametrize(
    ("product", "small", "memory"),
    [
        ("NVIDIA-B200", "1g.23gb", 23),
        ("NVIDIA-GB200", "1g.23gb", 23),
        ("NVIDIA-B300-SXM6-AC", "1g.34gb", 34),
        ("NVIDIA-GB300", "1g.35gb", 35),
        ("NVIDIA-GH200-480GB", "1g.12gb", 12),
        ("NVIDIA-GH200-144G-HBM3e", "1g.18gb", 18),
        ("NVIDIA-H20", "1g.12gb", 12),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "1g.24gb", 24),
        ("NVIDIA-A100-SXM4-80GB", "1g.10gb.me", 10),
    ],
)
def test_a_pool_of_todays_gpus_is_valid(product, small, memory):
    text = (
        POOL_POLICY.replace("{small}", small)
        .replace("{memory}", str(memory))
        .replace("{product}", product)
    )
    found = [str(p) for d in load_policy_documents(text, "p.yaml") for p in d.problems]
    assert found == []


def test_a_pool_of_a_gpu_without_mig_names_the_product_not_the_missing_selector():
    text = (
        POOL_POLICY.replace("{small}", "1g.10gb")
        .replace("{memory}", "10")
        .replace("{product}", "NVIDIA-L40S")
    )
    found = [str(p) for d in load_policy_documents(text, "p.yaml") for p in d.problems]
    assert any(
        "nvidia.com/gpu.product 'NVIDIA-L40S' of pool 'pool' is no GPU of the MIG catalogue" in p
        for p in found
    ), found
    assert not any("set gpu or nodeSelector" in p for p in found), found


def test_a_short_gpu_name_is_told_the_catalogues_name():
    text = (
        POOL_POLICY.replace("{small}", "1g.23gb")
        .replace("{memory}", "23")
        .replace("{product}", "NVIDIA-B200")
        .replace("      - name: pool\n", "      - name: pool\n        gpu: B200\n")
    )
    found = [str(p) for d in load_policy_documents(text, "p.yaml") for p in d.problems]
    assert any("unknown GPU model 'B200' (did you mean B200-180GB?)" in p for p in found), found


@pytest.mark.parametrize(
    ("resource", "slices", "selector", "share"),
    [
        ("nvidia.com/mig-3g.40gb", 3, {}, "3/7"),
        ("nvidia.com/mig-1g.6gb", 1, {}, "1/4"),  # A30: four slices
        ("nvidia.com/mig-2g.48gb", 2, {}, "1/2"),  # only on RTX PRO 6000: four slices
        ("nvidia.com/mig-4g.96gb.gfx", 4, {}, "1"),
        ("nvidia.com/mig-1g.24gb", 1, {}, "1/7"),  # also H100 94/96GB: seven
        (
            "nvidia.com/mig-1g.24gb",
            1,
            {"nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"},
            "1/4",
        ),
        ("nvidia.com/mig-1g.23gb.me", 1, {"nvidia.com/gpu.product": "NVIDIA-B200"}, "1/7"),
    ],
)
def test_a_mig_class_is_its_share_of_its_gpu(resource, slices, selector, share):
    from fractions import Fraction

    from quotaguard.policy.model import GpuClass

    gpu_class = GpuClass.model_validate(
        {
            "name": "c",
            "resource": resource,
            "memory": "10Gi",
            "slices": slices,
            "nodeSelector": selector,
        }
    )
    assert gpu_class.gpu_equivalent == Fraction(share)


def test_a_faulty_gpus_media_extension_instances_are_found_by_dcgms_profile_name():
    """DCGM labels an instance `GPU_I_PROFILE="1g.10gb+me"`; its resource is `...1g.10gb.me`."""
    from dataclasses import dataclass, field

    from quotaguard.policy.model import GpuClass
    from quotaguard.quota.class_capacity import units_per_gpu
    from quotaguard.quota.cluster import Node

    @dataclass(frozen=True)
    class Faulty:
        node: str = "m"
        gpu: str = "0"
        reason: str = "XID 79"
        mig_instances: dict[str, int] = field(
            default_factory=lambda: {"1g.10gb+me": 1, "1g.10gb": 6}
        )

    media = GpuClass.model_validate(
        {"name": "me", "resource": "nvidia.com/mig-1g.10gb.me", "memory": "10Gi", "slices": 1}
    )
    node = Node("m", True, False, (), {}, {"nvidia.com/mig-1g.10gb.me": 2})
    assert units_per_gpu(media, "nvidia.com/mig-1g.10gb.me", node, Faulty()) == 1
    assert units_per_gpu(media, "nvidia.com/mig-1g.10gb", node, Faulty()) == 6


def test_a_class_spelling_a_profile_with_plus_is_told_the_device_plugins_name():
    text = (
        POOL_POLICY.replace("nvidia.com/mig-{small}", '"nvidia.com/mig-1g.10gb+me"')
        .replace("{small}", "1g.10gb")
        .replace("{memory}", "10")
        .replace("{product}", "NVIDIA-A100-SXM4-80GB")
    )
    found = [str(p) for d in load_policy_documents(text, "p.yaml") for p in d.problems]
    assert any(
        "spec.gpuClasses[0].resource: the device plugin offers MIG profile '1g.10gb+me' as "
        "nvidia.com/mig-1g.10gb.me (a resource name cannot hold a +)" in p
        for p in found
    ), found


ATTRIBUTES = st.sampled_from(["", "+me", "-me", "+gfx", "+me.all"])


@given(
    slices=st.integers(1, 7),
    memory=st.integers(1, 999),
    attributes=ATTRIBUTES,
)
def test_every_profile_name_round_trips_through_its_resource(slices, memory, attributes):
    name = f"{slices}g.{memory}gb{attributes}"
    found = profile_of_resource(resource_of_profile(name))
    assert found is not None
    assert (found.name, found.slices, found.memory_gb, found.attributes) == (
        name,
        slices,
        memory,
        attributes,
    )


@given(resource=st.text(max_size=40).map(lambda tail: "nvidia.com/mig-" + tail))
def test_any_mig_resource_name_is_read_or_refused_never_raises(resource):
    found = profile_of_resource(resource)
    assert found is None or found.resource == resource


@given(product=st.text(max_size=60), memory=st.text(max_size=8))
def test_any_product_label_is_a_catalogue_gpu_or_none(product, memory):
    found = gpu_model({"nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": memory})
    assert found is None or found in GPU_MODELS


@given(
    words=st.lists(
        st.sampled_from(["NVIDIA", "GH200", "480GB", "HBM3e", "NVL", "SXM5"]), max_size=5
    )
)
def test_a_gh200_is_never_taken_for_an_h200(words):
    found = gpu_model({"nvidia.com/gpu.product": "-".join(["GH200", *words])})
    assert found is not None and found.startswith("GH200-")
