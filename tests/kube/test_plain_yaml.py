"""The one-pass YAML reader gives what PyYAML's safe loader gives, errors included, faster."""

from __future__ import annotations

import time

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.kube.documents import DocumentError, Limits, full_load_yaml, load_yaml

SMALL = Limits("test input", 1_000_000, max_depth=8, max_nodes=2_000)

# plain scalars YAML 1.1 resolves to something other than a string, and their near misses
TRICKY = [
    *("yes", "No", "ON", "off", "y", "true", "False", "null", "~", "Null", "NULL", ""),
    *("0", "-0", "+12", "1_000", "0x1F", "0b101", "0o17", "017", "09", "190:20:30", "1e3"),
    *("1.5", "-.5", "1.0e+3", ".inf", "-.Inf", ".NaN", "1_0.5", "6.8523015e+5", "1:2.5"),
    *("2001-12-14", "2001-12-14t21:59:43.10-05:00", "=", "<<x", "9223372036854775807"),
    *("a b", "100Mi", "nvidia.com/gpu", "- x", "#", "'q'", '"d"', "x: y"),
]
scalars = st.one_of(
    st.sampled_from(TRICKY),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8),
    st.integers(-(2**63) + 1, 2**63 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(scalars, inner, max_size=4),
    max_leaves=20,
)


def outcome(reader, text):
    try:
        return ("read", repr(reader(text, "in.yaml", SMALL)))
    except DocumentError as exc:
        return ("refused", str(exc))


@settings(max_examples=300, deadline=None)
@given(values, st.sampled_from([None, True, False]), st.sampled_from([None, "'", '"']))
def test_any_dumped_document_reads_as_the_safe_loader_reads_it(value, flow, style):
    try:
        text = yaml.safe_dump(value, default_flow_style=flow, default_style=style)
    except yaml.YAMLError:
        return
    assert outcome(load_yaml, text) == outcome(full_load_yaml, text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*TRICKY, ": ", "\n", "  ", "- ", "{", "}", "[", "]", ", "])))
def test_any_text_of_yaml_tokens_reads_or_fails_as_the_safe_loader_does(pieces):
    text = "".join(pieces)
    assert outcome(load_yaml, text) == outcome(full_load_yaml, text)


@pytest.mark.parametrize(
    "text",
    [
        "a: &x [1, 2]\nb: *x\n",  # anchors: the full loader shares the list
        "base: &b {x: 1}\nmore: {<<: *b, y: 2}\n",  # merge keys
        "? [a, b]\n: 1\n",  # a collection as a key: the loader's own error
        "a: !!str 12\nb: !!int '7'\n",  # explicit tags
        "a: 1\na: 2\n",  # duplicate key
        "a: [1, 2\n",  # syntax error
        "a: 99999999999999999999\n",  # past 64 bits
        "---\n---\na: 1\n--- ~\n",  # empty documents are dropped
    ],
)
def test_what_the_one_pass_reader_leaves_to_the_loader_reads_the_same(text):
    assert outcome(load_yaml, text) == outcome(full_load_yaml, text)


def test_a_large_trace_reads_in_a_fraction_of_the_safe_loaders_time():
    item = "- {at: 12, duration: 300, namespace: team-a, uses: 0.5, pod: {spec: {containers: "
    item += "[{name: main, resources: {limits: {nvidia.com/gpu: '1'}}}]}}}\n"
    text = "workloads:\n" + item * 3000
    limits = Limits("trace", 10_000_000, max_nodes=1_000_000)
    started = time.process_time()
    fast = load_yaml(text, "t.yaml", limits)
    fast_cpu = time.process_time() - started
    started = time.process_time()
    full = full_load_yaml(text, "t.yaml", limits)
    full_cpu = time.process_time() - started
    assert fast == full
    assert fast_cpu < full_cpu / 2
