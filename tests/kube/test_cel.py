"""What quotaguard reads of DRA CEL selectors: the attribute values they pin, never more."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from quotaguard.kube.cel import DRIVER, read_selector, read_selectors

NVIDIA_MIG_CLASS = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
)


def test_nvidia_mig_device_class_and_a_profile_selector() -> None:
    selection = read_selectors(
        [NVIDIA_MIG_CLASS, 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"']
    )
    assert selection.fully_read
    assert selection.pinned() == {
        DRIVER: frozenset({"gpu.nvidia.com"}),
        "gpu.nvidia.com/type": frozenset({"mig"}),
        "gpu.nvidia.com/profile": frozenset({"3g.40gb"}),
    }


def test_bracketed_names_lists_numbers_and_booleans() -> None:
    selection = read_selector(
        "(device.attributes['dra.example.com']['model'] in ['a', \"b\",]) && "
        "device.attributes['dra.example.com'].index == 3 && "
        "device.attributes['dra.example.com'].healthy == true"
    )
    assert selection.pinned() == {
        "dra.example.com/model": frozenset({"a", "b"}),
        "dra.example.com/index": frozenset({3}),
        "dra.example.com/healthy": frozenset({True}),
    }


def test_what_is_not_a_pinned_value_is_kept_unread() -> None:
    capacity = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"
    selection = read_selector(f"{NVIDIA_MIG_CLASS} && {capacity}")
    assert selection.unread == (capacity,)
    assert len(selection.conditions) == 2


def test_a_disjunction_or_conditional_pins_nothing() -> None:
    for expression in (
        f"{NVIDIA_MIG_CLASS} || device.driver == 'x'",
        f"{NVIDIA_MIG_CLASS} ? true : device.driver == 'x'",
        "!(device.driver == 'x')",
        "device.driver == 'a' && (device.driver == 'b'",
    ):
        assert read_selector(expression).conditions == (), expression


def test_an_ampersand_inside_a_string_does_not_split() -> None:
    selection = read_selector("device.driver == 'a && b'")
    assert selection.pinned() == {DRIVER: frozenset({"a && b"})}


def test_compatible_and_implies() -> None:
    mig = read_selector(NVIDIA_MIG_CLASS)
    one_g = read_selector("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'")
    three_g = read_selector("device.attributes['gpu.nvidia.com'].profile == '3g.40gb'")
    assert mig.compatible(one_g) and not one_g.compatible(three_g)
    assert mig.also(one_g).implies(one_g) and not mig.implies(one_g)
    assert mig.matches("gpu.nvidia.com", {"gpu.nvidia.com/type": "mig"})
    assert not mig.matches("gpu.nvidia.com", {"gpu.nvidia.com/type": "gpu"})


@given(st.text(max_size=80))
def test_any_text_is_read_without_error_and_pins_only_what_it_says(text: str) -> None:
    selection = read_selector(text)
    for condition in selection.conditions:
        assert condition.attribute == DRIVER or "/" in condition.attribute
        assert condition.values


def test_deep_nesting_is_read_quickly_as_unread() -> None:
    import time

    started = time.perf_counter()
    for size in (5000, 1000, 60):
        for text in (
            "(" * size + "device.driver == 'x'" + ")" * size,
            "(device.driver == 'x' && " * size + "true" + ")" * size,
        ):
            selection = read_selector(text)
            # what is read is what the text pins; past the limits, the rest stays unread
            assert all(c.values == {"x"} for c in selection.conditions)
            assert selection.unread or size <= 60
    assert time.perf_counter() - started < 2
