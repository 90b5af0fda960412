"""`spec.geometry` as `quotaguard validate` reports it: every config checked for the pool's GPU."""

from __future__ import annotations

import textwrap

import pytest

from quotaguard.policy.loader import load_policy_documents, load_policy_text

POLICY = textwrap.dedent(
    """\
    apiVersion: quotaguard.dev/v1alpha1
    kind: TenantPolicy
    metadata:
      name: p
    spec:
      gpuClasses:
        - name: a100
          resource: nvidia.com/gpu
          memory: 80Gi
        - name: mig-1g
          resource: nvidia.com/mig-1g.10gb
          memory: 10Gi
          slices: 1
        - name: mig-2g
          resource: nvidia.com/mig-2g.20gb
          memory: 20Gi
          slices: 2
        - name: mig-3g
          resource: nvidia.com/mig-3g.40gb
          memory: 40Gi
          slices: 3
        - name: shared
          resource: nvidia.com/gpu.shared
          memory: 80Gi
          sharing: time-slicing
          replicas: 4
      geometry:
        mode: apply
        reconfigureTime: 5m
        migConfigs:
          version: v1
          mig-configs:
            half-and-half:
              - devices: [0, 1, 2, 3]
                mig-enabled: true
                mig-devices: {"1g.10gb": 7}
              - devices: [4, 5, 6, 7]
                mig-enabled: true
                mig-devices: {"3g.40gb": 2}
        sharingConfigs:
          ts-4: {replicas: 4}
        pools:
          - name: a100
            nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
            configs: [all-balanced, all-1g.10gb, all-3g.40gb, half-and-half, ts-4]
            maxChanging: 25%
            minDwell: 30m
            drain: wait
    """
)


def problems(text: str) -> list[str]:
    return [str(p) for d in load_policy_documents(text, "p.yaml") for p in d.problems]


def test_the_contract_example_is_valid_and_typed():
    assert problems(POLICY) == []
    geometry = load_policy_text(POLICY).spec.geometry
    assert geometry is not None
    pool = geometry.pools[0]
    assert (geometry.mode, geometry.reconfigure_time, pool.min_dwell) == ("apply", 300, 1800)
    assert pool.drain == "wait"
    assert [pool.changing_allowed(n) for n in (1, 4, 8, 10)] == [1, 1, 2, 2]
    assert geometry.sharing_configs["ts-4"].resource == "nvidia.com/gpu.shared"


def test_defaults():
    text = POLICY.replace("    mode: apply\n", "").replace("        drain: wait\n", "")
    text = text.replace("        maxChanging: 25%\n", "").replace("        minDwell: 30m\n", "")
    geometry = load_policy_text(text).spec.geometry
    assert geometry is not None
    pool = geometry.pools[0]
    assert (geometry.mode, pool.drain, pool.max_changing, pool.min_dwell) == (
        "recommend",
        "idle-only",
        1,
        1800,
    )


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            '{"3g.40gb": 2}',
            '{"3g.40gb": 3}',
            "spec.geometry.pools[0].configs[3]: 3 x 3g.40gb on one A100-80GB: at most 2 fit",
        ),
        (
            '{"1g.10gb": 7}',
            '{"1g.5gb": 7}',
            "spec.geometry.pools[0].configs[3]: profile '1g.5gb' does not exist on A100-80GB",
        ),
        (
            'mig-enabled: true\n            mig-devices: {"1g',
            'mig-enabled: yes please\n            mig-devices: {"1g',
            "p.yaml:35:26: spec.geometry.migConfigs.mig-configs.half-and-half[0].mig-enabled: "
            "must be true or false",
        ),
        ("maxChanging: 25%", "maxChanging: 250%", "spec.geometry.pools[0].maxChanging"),
        ("drain: wait", "drain: evict", "spec.geometry.pools[0].drain: must be 'wait' or"),
        ("minDwell: 30m", "minDwell: soon", "spec.geometry.pools[0].minDwell"),
        (
            "nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}",
            "nodeSelector: {pool: a}",
            "cannot tell the GPU model of pool 'a100' to find the built-in config 'all-balanced'",
        ),
        (
            "    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}",
            "    gpu: B200\n        nodeSelector: {pool: a}",
            "spec.geometry.pools[0].gpu: unknown GPU model 'B200'",
        ),
        ("ts-4: {replicas: 4}", "half-and-half: {replicas: 4}", "names a MIG config too"),
    ],
)
def test_each_error(old, new, expected):
    assert old in POLICY
    found = [p for p in problems(POLICY.replace(old, new)) if "warning" not in p]
    assert any(expected in p for p in found), found


def test_a_config_neither_the_policy_nor_the_catalogue_defines_is_a_warning():
    # it may be in the GPU operator's ConfigMap, which the controller reads at run time
    found = problems(POLICY.replace("all-3g.40gb, half", "all-3g.20gb, half"))
    assert any(
        p.startswith(
            "p.yaml:45:46: warning: spec.geometry.pools[0].configs[2]: unknown config "
            "'all-3g.20gb'; known for A100-80GB:"
        )
        and p.endswith("default-mig-parted-config defines it")
        for p in found
    ), found


def test_a_layout_no_class_counts_is_a_warning():
    text = POLICY.replace("nvidia.com/mig-2g.20gb", "nvidia.com/mig-2g.10gb")
    found = problems(text)
    assert any(
        "warning: spec.geometry.pools[0].configs[0]: config 'all-balanced' offers "
        "nvidia.com/mig-2g.20gb, which no GPU class counts" in p
        for p in found
    ), found


def test_a_sharing_config_whose_replicas_its_class_does_not_count_is_a_warning():
    # the class values a unit at 1/4 GPU; ts-4 as ts-8 would offer each GPU 8 times
    assert "ts-4: {replicas: 4}" in POLICY
    found = problems(POLICY.replace("ts-4: {replicas: 4}", "ts-4: {replicas: 8}"))
    assert any(
        "warning: spec.geometry.pools[0].configs[4]: config 'ts-4' offers each GPU 8 times as "
        "nvidia.com/gpu.shared, but class 'shared' counts 4 replicas per GPU" in p
        for p in found
    ), found


def test_an_explicit_gpu_model_finds_built_in_configs():
    text = POLICY.replace(
        "    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}",
        "    gpu: A100-80GB\n        nodeSelector: {pool: a}",
    )
    assert problems(text) == []
