"""`spec.showback`: prices per GPU-hour by class or GPU model, as `quotaguard validate` checks
them and as the reports read them."""

from __future__ import annotations

import textwrap

import pytest

from quotaguard.cli import main
from quotaguard.policy.loader import load_policy_documents, load_policy_text
from quotaguard.policy.prices import price_of

BASE = textwrap.dedent(
    """\
    apiVersion: quotaguard.dev/v1alpha1
    kind: TenantPolicy
    metadata: {name: p}
    spec:
      gpuClasses:
        - {name: h100, resource: nvidia.com/gpu, memory: 80Gi,
           nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
        - {name: b200, resource: nvidia.com/gpu, memory: 180Gi,
           nodeSelector: {nvidia.com/gpu.product: NVIDIA-B200}}
        - {name: mig1, resource: nvidia.com/mig-1g.10gb, memory: 10Gi, slices: 1}
    """
)


def problems(showback: str) -> list[str]:
    text = BASE + textwrap.indent(textwrap.dedent(showback), "  ")
    return [str(p) for d in load_policy_documents(text, "p.yaml") for p in d.problems]


def test_prices_and_currency_are_read() -> None:
    policy = load_policy_text(
        BASE + "  showback: {pricePerGPUHour: {h100: 2.5, B200: 5}, currency: EUR}\n"
    )
    showback = policy.spec.showback
    assert showback is not None and showback.currency == "EUR"
    assert showback.price_per_gpu_hour == {"h100": 2.5, "B200": 5.0}
    assert price_of(showback.price_per_gpu_hour, "b200", "NVIDIA-B200") == 5.0
    assert load_policy_text(BASE).spec.showback is None  # optional


@pytest.mark.parametrize(
    ("showback", "said"),
    [
        (
            "showback: {pricePerGPUHour: {h100: -1, b200: 1}}",
            "p.yaml:11:38: spec.showback.pricePerGPUHour.h100: must be greater than or equal to 0",
        ),
        (
            "showback: {pricePerGPUHour: {h100: .inf, b200: 1}}",
            "spec.showback.pricePerGPUHour.h100: must be a finite number",
        ),
        (
            "showback: {pricePerGPUHour: {h100: two, b200: 1}}",
            "spec.showback.pricePerGPUHour.h100: must be a valid number",
        ),
        (
            "showback: {pricePerGPUHour: {'h100 sxm': 1, h100: 1, b200: 1}}",
            "'h100 sxm' is neither a class name nor a GPU model",
        ),
        (
            "showback: {pricePerGPUHour: {h100: 1, b200: 1}, currency: ' USD'}",
            "spec.showback.currency: a currency is a short name such as USD",
        ),
        (
            "showback: {pricePerGpuHour: {h100: 1}}",
            "unknown field 'pricePerGpuHour' (did you mean 'pricePerGPUHour'?)",
        ),
    ],
)
def test_wrong_prices_are_located_errors(showback: str, said: str) -> None:
    found = problems(showback)
    assert any(said in problem for problem in found), found
    assert not any("warning" in problem for problem in found)


def test_a_class_of_a_named_model_without_a_price_is_a_warning() -> None:
    found = problems("showback: {pricePerGPUHour: {H100: 2.5}, currency: USD}")
    assert found == [
        "p.yaml:8:14: warning: spec.gpuClasses[1].name: class 'b200' (NVIDIA-B200) has no "
        "price in spec.showback.pricePerGPUHour: its GPU-hours are reported without a cost"
    ]


def test_two_spellings_of_one_model_and_a_currency_alone_are_warnings() -> None:
    found = problems("showback: {pricePerGPUHour: {B200: 5, h100: 1, NVIDIA-b200: 6, b200: 2}}")
    assert found == []  # b200 is a class: its own price; B200 and NVIDIA-b200 differ in words
    found = problems("showback: {pricePerGPUHour: {B_200: 5, b-200: 6, h100: 1, b200: 2}}")
    assert any("'b-200' matches the same GPU models as 'B_200'" in p for p in found), found
    assert problems("showback: {currency: USD}") == [
        "p.yaml:11:24: warning: spec.showback.currency: a currency without prices"
    ]


def test_validate_exits_1_on_a_negative_price(tmp_path, capsys) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(BASE + "  showback: {pricePerGPUHour: {h100: -2}}\n")
    assert main(["validate", str(path)]) == 1
    assert "spec.showback.pricePerGPUHour.h100: must be greater than or equal to 0" in (
        capsys.readouterr().err + capsys.readouterr().out
    )
