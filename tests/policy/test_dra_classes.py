"""GPU classes backed by DRA DeviceClasses, as `quotaguard validate` reports them."""

from __future__ import annotations

import textwrap

from quotaguard.policy.loader import load_policy_documents, load_policy_text

DRA_POLICY = textwrap.dedent(
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
            selector: device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"
        - name: mig-1g
          memory: 10Gi
          slices: 1
          dra:
            deviceClassName: mig.nvidia.com
            attributes: {gpu.nvidia.com/profile: 1g.10gb}
        - name: a100
          resource: nvidia.com/gpu
          memory: 80Gi
          dra:
            deviceClassName: gpu.nvidia.com
            selector: >-
              device.attributes['gpu.nvidia.com'].productName in
              ['NVIDIA A100-SXM4-80GB', 'NVIDIA A100 80GB PCIe']
      tenants:
        - name: a
          namespaces: [a]
          allowedClasses: [mig-1g]
    """
)


def problems(text: str) -> list[str]:
    return [str(p) for d in load_policy_documents(text, "p.yaml") for p in d.problems]


def test_a_dra_policy_is_valid_and_keeps_its_backings() -> None:
    assert problems(DRA_POLICY) == []
    policy = load_policy_text(DRA_POLICY)
    h100, mig, a100 = policy.spec.gpu_classes
    assert h100.resource_name is None and h100.resource == "deviceclass/gpu.nvidia.com"
    assert mig.dra is not None and mig.dra.selection.pinned() == {
        "gpu.nvidia.com/profile": frozenset({"1g.10gb"})
    }
    assert a100.resource == "nvidia.com/gpu"
    # only the class with an extended resource is reached by pods' resource requests
    assert [c.name for c in policy.classes_by_resource["nvidia.com/gpu"]] == ["a100"]
    assert policy.gpu_device_classes == {"gpu.nvidia.com", "mig.nvidia.com"}


def test_a_class_with_neither_resource_nor_dra_is_located() -> None:
    text = DRA_POLICY.replace(
        "      dra:\n        deviceClassName: mig.nvidia.com\n"
        "        attributes: {gpu.nvidia.com/profile: 1g.10gb}\n",
        "",
    )
    found = problems(text)
    assert found == [
        "p.yaml:12:7: spec.gpuClasses[1]: a GPU class needs a resource (an extended resource "
        "such as nvidia.com/gpu), dra (a DeviceClass), or both"
    ]


def test_a_selector_quotaguard_cannot_read_is_an_error_at_the_selector() -> None:
    text = DRA_POLICY.replace(
        'selector: device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"',
        "selector: device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
    )
    (found,) = problems(text)
    assert found.startswith("p.yaml:11:19: spec.gpuClasses[0].dra.selector: quotaguard cannot read")
    assert "device.capacity" in found


def test_an_or_selector_is_not_read_as_a_conjunction() -> None:
    text = DRA_POLICY.replace(
        '== "NVIDIA H100 80GB HBM3"', '== "NVIDIA H100 80GB HBM3" || device.driver == "x"'
    )
    assert any("dra.selector: quotaguard cannot read" in p for p in problems(text))


def test_an_unqualified_attribute_is_located_with_its_domain_suggested() -> None:
    text = DRA_POLICY.replace("gpu.nvidia.com/profile: 1g.10gb", "profile: 1g.10gb")
    (found,) = problems(text)
    assert found.startswith("p.yaml:17:31: spec.gpuClasses[1].dra.attributes.profile:")
    assert "gpu.nvidia.com/profile" in found


def test_a_bad_device_class_name_is_a_schema_error() -> None:
    text = DRA_POLICY.replace("deviceClassName: mig.nvidia.com", "deviceClassName: MIG_class")
    (found,) = problems(text)
    assert "spec.gpuClasses[1].dra.deviceClassName" in found


def test_classes_no_attribute_tells_apart_are_warned() -> None:
    text = DRA_POLICY.replace(
        '        selector: device.attributes["gpu.nvidia.com"].productName'
        ' == "NVIDIA H100 80GB HBM3"\n',
        "",
    )
    (found,) = problems(text)
    assert "warning: spec.gpuClasses[2].dra:" in found
    assert 'classes "h100" and "a100" both take devices' in found


def test_a_rewrite_to_a_class_without_resource_is_an_error() -> None:
    text = DRA_POLICY + "      rewrite:\n        - to: mig-1g\n"
    (found,) = problems(text)
    assert found.startswith("p.yaml:31:15: spec.tenants[0].rewrite[0].to: class 'mig-1g' has no")
