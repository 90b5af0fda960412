"""Rewrite targets that list several GPU models (`to: [h100, a100]`), as `quotaguard validate`
reports them: located messages for every way a list can be wrong."""

from __future__ import annotations

import textwrap

import pytest

from quotaguard.policy.fungibility import class_order, flavor_order
from quotaguard.policy.loader import load_policy_documents, load_policy_text

POLICY = textwrap.dedent(
    """\
    apiVersion: quotaguard.dev/v1alpha1
    kind: TenantPolicy
    metadata:
      name: p
    spec:
      gpuClasses:
        - name: mig1
          resource: nvidia.com/mig-1g.10gb
          memory: 10Gi
          slices: 1
        - name: a100
          resource: nvidia.com/gpu
          memory: 80Gi
          flavor: a100-80gb
          nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
        - name: h100
          resource: nvidia.com/gpu
          memory: 80Gi
          nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
        - name: shared
          resource: nvidia.com/gpu.shared
          memory: 80Gi
          sharing: time-slicing
          replicas: 4
      tenants:
        - name: a
          namespaces: [a]
          allowedClasses: [h100, a100, mig1, shared]
          flavorFungibility: {whenCanBorrow: TryNextFlavor}
          rewrite:
            - when: {gpus: 1}
              to: TARGET
    """
)


def problems(target: str, policy: str = POLICY) -> list[str]:
    text = policy.replace("TARGET", target)
    return [str(p) for d in load_policy_documents(text, "p.yaml") for p in d.problems]


def test_a_list_of_models_on_one_resource_is_valid_and_orders_the_queue():
    assert problems("[h100, a100]") == []
    policy = load_policy_text(POLICY.replace("TARGET", "[h100, a100]"))
    tenant = policy.spec.tenants[0]
    assert tenant.rewrite[0].classes == ("h100", "a100")
    assert tenant.flavor_fungibility is not None and tenant.flavor_fungibility.borrow_next
    # the list's order first, the rest of the classes in the policy's order
    assert [c.name for c in class_order(policy, tenant)] == ["h100", "a100", "mig1", "shared"]
    assert flavor_order(policy, tenant) == ("h100", "a100-80gb", "mig1", "shared")
    assert flavor_order(policy, None) == ("mig1", "a100-80gb", "h100", "shared")


def test_a_list_of_one_class_is_that_class():
    policy = load_policy_text(POLICY.replace("TARGET", "[h100]"))
    rule = policy.spec.tenants[0].rewrite[0]
    assert rule.to == "h100" and not rule.fungible
    assert problems("[mig1]") == []  # as `to: mig1`
    assert problems("[nope]") == [
        "p.yaml:32:16: spec.tenants[0].rewrite[0].to[0]: rewrite target 'nope' is not a GPU class"
    ]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (
            "[h100, shared]",
            "p.yaml:32:22: spec.tenants[0].rewrite[0].to[1]: class 'shared' is on "
            "nvidia.com/gpu.shared but 'h100' is on nvidia.com/gpu; the classes of one list "
            "must share one resource (Kueue picks the flavor of one resource)",
        ),
        (
            "[h100, mig1]",
            "p.yaml:32:22: spec.tenants[0].rewrite[0].to[1]: class 'mig1' is a MIG slice "
            "(nvidia.com/mig-1g.10gb); a list is for whole or shared GPUs of several models on "
            "one resource: name the MIG class alone, or use best-fit",
        ),
        (
            "[h100, b200]",
            "p.yaml:32:22: spec.tenants[0].rewrite[0].to[1]: rewrite target 'b200' is not a GPU "
            "class; known: a100, h100, mig1, shared",
        ),
        (
            "[h100, h100]",
            "p.yaml:32:22: spec.tenants[0].rewrite[0].to[1]: class 'h100' is listed twice",
        ),
        (
            "[best-fit, h100]",
            "p.yaml:32:16: spec.tenants[0].rewrite[0].to[0]: best-fit cannot be one entry of a "
            "list; use best-fit alone, or list classes",
        ),
        (
            "[]",
            "p.yaml:32:15: spec.tenants[0].rewrite[0].to: an empty list names no GPU class; "
            "name one class or several",
        ),
        (
            "[h100, 3]",
            "p.yaml:32:15: spec.tenants[0].rewrite[0].to: every entry of a list of classes must "
            "be a class name",
        ),
    ],
)
def test_a_wrong_list_is_an_error_at_its_entry(target, expected):
    assert problems(target) == [expected]


def test_a_class_of_the_list_the_tenant_does_not_allow_is_an_error():
    policy = POLICY.replace("allowedClasses: [h100, a100, mig1, shared]", "allowedClasses: [h100]")
    assert problems("[h100, a100]", policy) == [
        "p.yaml:32:22: spec.tenants[0].rewrite[0].to[1]: rewrite target 'a100' is not in the "
        "allowedClasses of tenant 'a'"
    ]


def test_two_lists_that_order_the_models_differently_are_a_warning():
    policy = POLICY + "        - to: [a100, h100]\n"
    assert problems("[h100, a100]", policy) == [
        "p.yaml:33:15: warning: spec.tenants[0].rewrite[1].to: this list orders its classes "
        "unlike rewrite[0]; a tenant's queue tries its flavors in one order, that of its first "
        "list"
    ]


def test_flavor_fungibility_takes_kueues_values_only():
    policy = POLICY.replace("whenCanBorrow: TryNextFlavor", "whenCanBorrow: Sometimes")
    (found,) = problems("[h100, a100]", policy)
    assert found.startswith(
        "p.yaml:29:42: spec.tenants[0].flavorFungibility.whenCanBorrow: must be"
    )
    assert "'TryNextFlavor'" in found


def test_a_list_with_backend_volcano_is_a_warning_that_no_flavor_picks_the_model():
    policy = POLICY.replace("spec:\n  gpuClasses:", "spec:\n  backend: volcano\n  gpuClasses:")
    (found,) = problems("[h100, a100]", policy)
    assert found.startswith("p.yaml:33:15: warning: spec.tenants[0].rewrite[0].to: backend volcano")
