"""Which resource Kueue counts a DRA class under: declared, read from Kueue's Configuration,
and checked by `quotaguard validate`."""

from __future__ import annotations

import textwrap

from hypothesis import given
from hypothesis import strategies as st

from quotaguard.policy.kueue_dra import device_class_mappings, with_kueue_resources
from quotaguard.policy.loader import load_policy_documents, load_policy_text

POLICY = textwrap.dedent(
    """\
    apiVersion: quotaguard.dev/v1alpha1
    kind: TenantPolicy
    metadata:
      name: p
    spec:
      gpuClasses:
        - name: h100
          memory: 80Gi
          dra:
            deviceClassName: gpu.nvidia.com
        - name: a100
          resource: nvidia.com/gpu
          memory: 80Gi
          nodeSelector: {nvidia.com/gpu.product: A100}
      tenants:
        - name: a
          namespaces: [a]
    """
)

KUEUE_CONFIGURATION = textwrap.dedent(
    """\
    apiVersion: config.kueue.x-k8s.io/v1beta2
    kind: Configuration
    resources:
      deviceClassMappings:
        - name: example.com/gpu
          deviceClassNames: [gpu.nvidia.com]
    """
)


def problems(text: str) -> list[str]:
    return [str(p) for d in load_policy_documents(text, "p.yaml") for p in d.problems]


def test_a_declared_kueue_resource_is_what_queues_count() -> None:
    text = POLICY.replace(
        "deviceClassName: gpu.nvidia.com\n",
        "deviceClassName: gpu.nvidia.com\n        kueueResource: example.com/gpu\n",
    )
    assert problems(text) == []
    policy = load_policy_text(text)
    assert policy.classes_by_name["h100"].resource == "example.com/gpu"


def test_kueues_configuration_names_the_resource_of_a_claim_only_class() -> None:
    policy = load_policy_text(POLICY)
    assert policy.classes_by_name["h100"].resource == "deviceclass/gpu.nvidia.com"
    mappings, unread = device_class_mappings(KUEUE_CONFIGURATION)
    assert (mappings, unread) == ({"gpu.nvidia.com": "example.com/gpu"}, [])
    merged, disagreements = with_kueue_resources(policy, mappings)
    assert disagreements == []
    assert merged.classes_by_name["h100"].resource == "example.com/gpu"
    assert merged.classes_by_name["a100"].resource == "nvidia.com/gpu"
    # the views built from the classes are of the new policy, not the old one's
    assert merged.gpu_resources >= {"nvidia.com/gpu"}
    assert policy.classes_by_name["h100"].resource == "deviceclass/gpu.nvidia.com"


def test_a_class_kueue_counts_under_another_name_is_said_not_moved() -> None:
    text = POLICY.replace(
        "deviceClassName: gpu.nvidia.com\n",
        "deviceClassName: gpu.nvidia.com\n        kueueResource: example.com/h100\n",
    )
    policy = load_policy_text(text)
    merged, disagreements = with_kueue_resources(policy, {"gpu.nvidia.com": "example.com/gpu"})
    assert merged.classes_by_name["h100"].resource == "example.com/h100"
    assert disagreements == [
        "class 'h100': Kueue counts DeviceClass 'gpu.nvidia.com' under 'example.com/gpu', but "
        "the class's queues count 'example.com/h100': its claims hold no quota of the class; "
        "make them one name"
    ]
    _, unmapped = with_kueue_resources(policy, {})
    assert "no deviceClassMappings entry lists it" in unmapped[0]


def test_validate_locates_a_kueue_resource_that_cannot_hold() -> None:
    both = POLICY.replace(
        "deviceClassName: gpu.nvidia.com\n",
        "deviceClassName: gpu.nvidia.com\n        kueueResource: example.com/gpu\n",
    ).replace(
        "- name: h100\n      memory", "- name: h100\n      resource: nvidia.com/h100\n      memory"
    )
    (found,) = problems(both)
    assert found.startswith(
        "p.yaml:12:24: spec.gpuClasses[0].dra.kueueResource: the class is counted under its "
        "resource 'nvidia.com/h100'"
    )
    volcano = POLICY.replace("spec:\n", "spec:\n  backend: volcano\n").replace(
        "deviceClassName: gpu.nvidia.com\n",
        "deviceClassName: gpu.nvidia.com\n        kueueResource: example.com/gpu\n",
    )
    assert any("Volcano counts DRA devices as deviceclass/" in p for p in problems(volcano))
    bad_name = POLICY.replace(
        "deviceClassName: gpu.nvidia.com\n",
        "deviceClassName: gpu.nvidia.com\n        kueueResource: Not A Name\n",
    )
    assert any("kueueResource" in p for p in problems(bad_name))


def test_unreadable_kueue_configurations_are_said() -> None:
    assert device_class_mappings(":\n  - [")[0] == {}
    assert "is not YAML" in device_class_mappings(":\n  - [")[1][0]
    assert device_class_mappings("resources: {}") == ({}, [])
    assert device_class_mappings("resources: {deviceClassMappings: 3}")[1] == [
        "resources.deviceClassMappings is not a list"
    ]
    assert (
        "needs a name"
        in device_class_mappings("resources: {deviceClassMappings: [{name: x}]}")[1][0]
    )


@given(st.text(max_size=200))
def test_any_configuration_text_is_read_or_said(text: str) -> None:
    mappings, unread = device_class_mappings(text)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in mappings.items())
    assert all(isinstance(problem, str) for problem in unread)


@given(
    st.dictionaries(
        st.sampled_from(["gpu.nvidia.com", "mig.nvidia.com", "other.example.com"]),
        st.sampled_from(["example.com/gpu", "nvidia.com/gpu", "whole-gpus"]),
    )
)
def test_kueues_mappings_only_ever_name_claim_only_classes(mappings: dict[str, str]) -> None:
    policy = load_policy_text(POLICY)
    merged, said = with_kueue_resources(policy, mappings)
    before = {c.name: c for c in policy.spec.gpu_classes}
    assert [c.name for c in merged.spec.gpu_classes] == list(before)
    for gpu_class in merged.spec.gpu_classes:
        old = before[gpu_class.name]
        if old.resource_name is not None or old.dra is None:
            assert gpu_class.resource == old.resource  # an extended resource never moves
        else:
            expected = mappings.get(old.dra.device_class_name, old.resource)
            assert gpu_class.resource == expected
        assert gpu_class.resource in merged.gpu_resources
    assert all(isinstance(problem, str) for problem in said)
