"""mig-parted configs: parsing with located problems, the built-in names, what a node offers."""

from __future__ import annotations

import pytest

from quotaguard.policy.migconfig import (
    builtin_configs,
    builtin_document,
    config_problems,
    gpu_model,
    layout_problems,
    node_resources,
    parse_mig_configs,
    resolve,
)

DOCUMENT = {
    "version": "v1",
    "mig-configs": {
        "mixed-node": [
            {"devices": [0, 1], "mig-enabled": False},
            {
                "devices": [2, 3],
                "mig-enabled": True,
                "mig-devices": {"1g.10gb": 7},
            },
        ],
        "h100-only": [
            {
                "devices": "all",
                "device-filter": "0x233010de",
                "mig-enabled": True,
                "mig-devices": {"3g.40gb": 2},
            }
        ],
    },
}


def test_parse_and_offer_per_gpu_index():
    configs, problems = parse_mig_configs(DOCUMENT)
    assert problems == []
    assert node_resources(configs["mixed-node"], "A100-80GB", 4) == {
        "nvidia.com/gpu": 2,
        "nvidia.com/mig-1g.10gb": 14,
    }


def test_device_filter_selects_the_gpu_model():
    configs, _ = parse_mig_configs(DOCUMENT)
    h100 = configs["h100-only"]
    assert node_resources(h100, "H100-80GB", 8) == {"nvidia.com/mig-3g.40gb": 16}
    # No entry applies to an A100: its GPUs stay whole.
    assert node_resources(h100, "A100-80GB", 2) == {"nvidia.com/gpu": 2}
    assert config_problems(h100, "A100-80GB") == [
        "config 'h100-only' has no entry for A100-80GB (check device-filter)"
    ]


@pytest.mark.parametrize(
    ("document", "path", "fragment"),
    [
        ({"mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}}, ("version",), "v1"),
        ({"version": "v1", "mig-configs": {}}, ("mig-configs",), "config names"),
        ({"version": "v1", "mig-configs": {"a": []}}, ("mig-configs", "a"), "non-empty"),
        (
            {"version": "v1", "mig-configs": {"a": [{"devices": "some", "mig-enabled": True}]}},
            ("mig-configs", "a", 0, "devices"),
            "GPU indexes",
        ),
        (
            {"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": "yes"}]}},
            ("mig-configs", "a", 0, "mig-enabled"),
            "true or false",
        ),
        (
            {
                "version": "v1",
                "mig-configs": {
                    "a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": -1}}]
                },
            },
            ("mig-configs", "a", 0, "mig-devices", "1g.10gb"),
            "whole number",
        ),
        (
            {"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enable": True}]}},
            ("mig-configs", "a", 0, "mig-enable"),
            "unknown field",
        ),
        ("not a mapping", (), "mapping"),
    ],
)
def test_problems_are_located(document, path, fragment):
    _, problems = parse_mig_configs(document, ())
    assert any(p.path == path and fragment in p.message for p in problems), problems


def test_a_config_with_problems_is_left_out():
    document = {
        "version": "v1",
        "mig-configs": {
            "bad": [{"devices": "all"}],
            "good": [{"devices": "all", "mig-enabled": False}],
        },
    }
    configs, problems = parse_mig_configs(document)
    assert set(configs) == {"good"}
    assert problems


def test_layouts_checked_against_the_catalogue():
    assert layout_problems({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, "A100-80GB") == []
    assert layout_problems({"3g.40gb": 2}, "A100-80GB") == []
    assert layout_problems({"4g.40gb": 1, "3g.40gb": 1}, "A100-80GB") == []
    # 1g.5gb is an A100-40GB profile.
    assert "does not exist on A100-80GB" in layout_problems({"1g.5gb": 7}, "A100-80GB")[0]
    assert "at most 3 fit" in layout_problems({"2g.20gb": 4}, "A100-80GB")[0]
    # Each fits alone, but not together: 3 + 3 + 2 compute slices.
    assert "needs 8 compute" in layout_problems({"3g.40gb": 2, "2g.20gb": 1}, "A100-80GB")[0]
    # 6 compute slices, but 4 + 2 x 2 + 1 = 9 of the 8 memory slices.
    devices = {"3g.40gb": 1, "1g.20gb": 2, "1g.10gb": 1}
    assert "9 memory slices" in layout_problems(devices, "A100-80GB")[0]


def test_builtin_names_per_gpu():
    a100 = builtin_configs("A100-80GB")
    assert {"all-1g.10gb", "all-2g.20gb", "all-3g.40gb", "all-balanced", "all-disabled"} <= set(
        a100
    )
    assert node_resources(a100["all-balanced"], "A100-80GB", 8) == {
        "nvidia.com/mig-1g.10gb": 16,
        "nvidia.com/mig-2g.20gb": 8,
        "nvidia.com/mig-3g.40gb": 8,
    }
    assert node_resources(a100["all-disabled"], "A100-80GB", 8) == {"nvidia.com/gpu": 8}
    assert "all-1g.5gb" in builtin_configs("A100-40GB")
    assert node_resources(builtin_configs("A30-24GB")["all-balanced"], "A30-24GB", 1) == {
        "nvidia.com/mig-1g.6gb": 2,
        "nvidia.com/mig-2g.12gb": 1,
    }
    assert builtin_configs("T4") == {}
    for gpu, configs in (("A100-80GB", a100), ("H200-141GB", builtin_configs("H200-141GB"))):
        for config in configs.values():
            assert config_problems(config, gpu) == [], config.name


def test_builtin_document_parses_back_to_the_same_offers():
    configs, problems = parse_mig_configs(builtin_document())
    assert problems == []
    for gpu in ("A100-40GB", "A100-80GB", "H100-94GB", "A30-24GB"):
        for name, config in builtin_configs(gpu).items():
            assert node_resources(configs[name], gpu, 2) == node_resources(config, gpu, 2)


def test_given_configs_win_over_builtin_ones():
    configs, _ = parse_mig_configs(
        {
            "version": "v1",
            "mig-configs": {"all-balanced": [{"devices": "all", "mig-enabled": False}]},
        }
    )
    mine = resolve("all-balanced", "A100-80GB", configs)
    assert mine is not None and node_resources(mine, "A100-80GB", 1) == {"nvidia.com/gpu": 1}
    assert resolve("all-3g.40gb", "A100-80GB", configs) is not None
    assert resolve("no-such", "A100-80GB", configs) is None


@pytest.mark.parametrize(
    ("labels", "model"),
    [
        ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, "A100-80GB"),
        ({"nvidia.com/gpu.product": "NVIDIA-A100-PCIE-40GB"}, "A100-40GB"),
        ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}, "A100-80GB"),
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "H100-80GB"),
        ({"nvidia.com/gpu.product": "NVIDIA-H100-NVL"}, "H100-94GB"),
        (
            {"nvidia.com/gpu.product": "NVIDIA-H100-PCIe", "nvidia.com/gpu.memory": "81559"},
            "H100-80GB",
        ),
        ({"nvidia.com/gpu.product": "NVIDIA-H200"}, "H200-141GB"),
        ({"nvidia.com/gpu.product": "NVIDIA-A30"}, "A30-24GB"),
        ({"nvidia.com/gpu.product": "Tesla-T4"}, None),
        ({}, None),
    ],
)
def test_gpu_model_from_feature_discovery_labels(labels, model):
    assert gpu_model(labels) == model
