"""The bounded YAML/JSON readers: what they refuse, where they say it is, what they keep."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from quotaguard.kube.documents import (
    MANIFEST,
    DocumentError,
    Limits,
    load_json,
    load_json_or_yaml,
    load_yaml,
    read_text,
)

SMALL = Limits("test input", 1_000_000, max_depth=10, max_nodes=1_000)


def refused(text, reader=load_yaml, limits=SMALL):
    with pytest.raises(DocumentError) as caught:
        reader(text, "in.yaml", limits)
    return caught.value


def test_an_alias_bomb_is_refused_at_the_alias_that_crosses_the_limit():
    text = "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    text += "c: [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    error = refused(text)
    assert (error.line, "aliases are expanded") == (3, "aliases are expanded")
    assert str(error).startswith("in.yaml:3:")


def test_aliases_within_the_limit_are_expanded_as_usual():
    assert load_yaml("a: &a [1, 2]\nb: *a\n", "in.yaml", SMALL) == [{"a": [1, 2], "b": [1, 2]}]


def test_a_recursive_alias_is_refused():
    assert "recursive alias" in str(refused("a: &a [1, *a]\n"))


@pytest.mark.parametrize("reader", [load_yaml, load_json])
def test_nesting_past_the_limit_is_refused_even_far_past_the_recursion_limit(reader):
    for depth in (11, 100_000):
        error = refused("[" * depth + "]" * depth, reader)
        assert "nested deeper than 10 levels" in str(error)
        assert (error.line, error.column) == (1, 11)


def test_nesting_at_the_limit_is_read():
    assert load_json("[" * 10 + "]" * 10, "in.json", SMALL) == [[[[[[[[[[]]]]]]]]]]


@pytest.mark.parametrize("reader", [load_yaml, load_json])
@pytest.mark.parametrize("number", [2**63, -(2**63), 10**400])
def test_integers_outside_64_bits_are_refused_with_their_place(reader, number):
    error = refused(f'{{"spec": 1,\n "max": {number}}}', reader)
    assert (error.line, error.column) == (2, 9)
    assert "does not fit in 64 bits" in error.message


@pytest.mark.parametrize("reader", [load_yaml, load_json])
def test_the_largest_64_bit_integers_are_read(reader):
    text = f'{{"a": {2**63 - 1}, "b": {-(2**63 - 1)}}}'
    assert reader(text, "in", SMALL) in (
        {"a": 2**63 - 1, "b": -(2**63 - 1)},
        [{"a": 2**63 - 1, "b": -(2**63 - 1)}],
    )


@pytest.mark.parametrize("reader", [load_yaml, load_json])
def test_a_duplicate_key_is_refused_where_it_repeats(reader):
    error = refused('{"a": 1,\n "b": {"c": 1, "c": 2}}', reader)
    assert error.line == 2 and "duplicate key 'c'" in error.message


def test_a_merge_key_may_be_overridden():
    assert load_yaml("base: &b {x: 1}\nd: {<<: *b, x: 2}\n", "in", SMALL)[0]["d"] == {"x": 2}


@pytest.mark.parametrize(
    "tag", ["!!binary aGk=", "!!set {a, b}", "!!omap [a: 1]", "!python/none ''"]
)
def test_yaml_only_types_are_refused(tag):
    assert "has no JSON equivalent" in refused(f"a: {tag}\n").message


def test_an_unquoted_date_stays_a_string():
    assert load_yaml("at: 2026-01-01\n", "in", SMALL) == [{"at": "2026-01-01"}]


def test_a_file_past_the_byte_limit_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"a: 1\n" * 3000)
    with pytest.raises(DocumentError) as caught:
        read_text(path, Limits("test input", 10_000))
    error = caught.value
    assert "larger than" in error.message and str(error).startswith(f"{path}:1:1:")


def test_json_or_yaml_reports_yaml_syntax_with_its_place():
    error = refused("spec: {containers: [\n", load_json_or_yaml)
    assert error.line == 2 and error.message.startswith("neither JSON nor YAML")


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63 - 1), max_value=2**63 - 1)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=30,
)


@given(json_values)
def test_anything_json_can_hold_reads_back_the_same_from_json_and_yaml(value):
    assert load_json(json.dumps(value), "in.json", MANIFEST) == value
    assert load_yaml(yaml.safe_dump(value), "in.yaml", MANIFEST) == (
        [] if value is None else [value]
    )
