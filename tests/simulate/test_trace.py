"""Traces: what is read, and every problem located as FILE:LINE:COLUMN."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from quotaguard.simulate.trace import TraceInvalid, load_trace, load_trace_text

GOOD = textwrap.dedent(
    """\
    horizon: 2h
    nodes:
      - {name: gpu-1, allocatable: {nvidia.com/gpu: "8", cpu: "64"}, labels: {zone: a}}
      - name: gpu-2
        allocatable: {nvidia.com/gpu: 8}
        taints: [nvidia.com/gpu.unhealthy]
    workloads:
      - at: 0
        duration: 1h
        namespace: research
        count: 3
        every: 90s
        pod: {spec: {containers: [{name: main}]}}
      - {at: 60, duration: 30, namespace: nb-a, pod: {spec: {containers: []}}}
    """
)


def test_a_trace_is_read_with_durations_counts_and_nodes():
    trace = load_trace_text(GOOD, "t.yaml")
    assert trace.horizon == 7200
    assert [node.name for node in trace.nodes] == ["gpu-1", "gpu-2"]
    assert trace.nodes[0].allocatable == {"nvidia.com/gpu": 8}  # cpu is not scheduled here
    assert trace.nodes[1].taints == ("nvidia.com/gpu.unhealthy",)
    first = trace.workloads[0]
    assert (first.duration, first.count) == (3600, 3)
    assert list(first.arrival_times()) == [0, 90, 180]
    assert trace.size == 4


def test_a_workload_priority_defaults_to_zero_and_must_be_an_int32():
    trace = load_trace_text(GOOD.replace("count: 3\n", "count: 3\n    priority: -7\n"), "t.yaml")
    assert [w.priority for w in trace.workloads] == [-7, 0]
    for bad, shown in (("high", "'high'"), ("2147483648", "2147483648"), ("1.5", "1.5")):
        text = GOOD.replace("count: 3\n", f"count: 3\n    priority: {bad}\n")
        with pytest.raises(TraceInvalid) as caught:
            load_trace_text(text, "b.yaml")
        assert caught.value.problems == [
            f"b.yaml:12:15: workloads[0].priority: must be a whole number (int32), not {shown}"
        ]


def test_without_a_horizon_the_span_ends_when_the_last_arrival_could_finish():
    trace = load_trace_text(GOOD.replace("horizon: 2h\n", ""), "t.yaml")
    assert trace.end == 180 + 3600


def test_json_traces_are_read_too(tmp_path: Path):
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps(
            {
                "nodes": [{"name": "n", "allocatable": {"nvidia.com/gpu": "1"}}],
                "workloads": [{"at": 0, "duration": 5, "namespace": "x", "pod": {"spec": {}}}],
            }
        )
    )
    assert load_trace(path).size == 1


def test_a_snapshot_gives_the_nodes(tmp_path: Path):
    snapshot = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "n1"},
                "status": {
                    "allocatable": {"nvidia.com/gpu": "4"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        ],
    }
    (tmp_path / "cluster.json").write_text(json.dumps(snapshot))
    path = tmp_path / "t.yaml"
    path.write_text(
        "snapshot: cluster.json\nworkloads: [{at: 0, duration: 5, namespace: x, pod: {spec: {}}}]\n"
    )
    trace = load_trace(path)
    assert trace.nodes[0].allocatable == {"nvidia.com/gpu": 4}
    snapshot["items"] = []
    (tmp_path / "cluster.json").write_text(json.dumps(snapshot))
    with pytest.raises(TraceInvalid) as caught:
        load_trace(path)
    assert any("the snapshot holds no Node" in p for p in caught.value.problems)


def problems_of(text: str) -> list[str]:
    with pytest.raises(TraceInvalid) as caught:
        load_trace_text(text, "bad.yaml")
    return caught.value.problems


def test_every_problem_is_reported_at_its_line_and_column():
    text = GOOD.replace("duration: 1h", "duration: soon").replace("count: 3", "count: 0")
    problems = problems_of(text)
    assert "bad.yaml:9:15: workloads[0].duration: must be seconds or a duration" in problems[0]
    assert problems[1].startswith("bad.yaml:11:12: workloads[0].count: must be a whole number")


def test_checkpoint_every_is_an_optional_positive_duration():
    text = GOOD.replace("count: 3\n", "count: 3\n    checkpointEvery: 30m\n")
    assert [w.checkpoint_every for w in load_trace_text(text, "t.yaml").workloads] == [1800, None]
    for bad in ("0", "soon"):
        text = GOOD.replace("count: 3\n", f"count: 3\n    checkpointEvery: {bad}\n")
        with pytest.raises(TraceInvalid) as caught:
            load_trace_text(text, "b.yaml")
        (problem,) = caught.value.problems
        assert problem.startswith("b.yaml:12:22: workloads[0].checkpointEvery: must be")


def test_unknown_fields_are_errors():
    problems = problems_of(GOOD.replace("every: 90s", "evry: 90s"))
    assert problems == [
        "bad.yaml:12:5: workloads[0].evry: unknown field 'evry'; allowed: "
        "at, checkpointEvery, cluster, count, dra, duration, every, name, namespace, pod, "
        "priority, uses"
    ]


def test_missing_fields_and_missing_cluster_are_named():
    problems = problems_of("workloads:\n  - {at: 0, namespace: x, pod: {spec: {}}}\n")
    assert "bad.yaml:1:1: a trace needs nodes (a list) or snapshot (a file)" in problems
    assert any("workloads[0].duration: required field is missing" in p for p in problems)


def test_bad_node_counts_are_errors():
    problems = problems_of(GOOD.replace('nvidia.com/gpu: "8", cpu', 'nvidia.com/gpu: "1.5", cpu'))
    assert problems == [
        "bad.yaml:3:49: nodes[0].allocatable.nvidia.com/gpu: "
        "must be a whole number of devices, not '1.5'"
    ]


def test_syntax_errors_name_the_line():
    problems = problems_of("nodes: [\nworkloads: 1\n")
    assert len(problems) == 1
    assert problems[0].startswith("bad.yaml:") and "not YAML" in problems[0]


def test_an_unreadable_file_is_one_line_naming_it(tmp_path: Path):
    with pytest.raises(TraceInvalid) as caught:
        load_trace(tmp_path / "missing.yaml")
    assert caught.value.problems[0].startswith(f"{tmp_path / 'missing.yaml'}: cannot read")


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("duration", ".nan", "must be seconds or a duration"),
        ("duration", ".inf", "must be seconds or a duration"),
        ("duration", "'99999999999h'", "must be seconds or a duration"),
        ("count", "1000000000", "must be a whole number from 1 to 1,000,000"),
    ],
)
def test_times_and_counts_that_cannot_be_simulated_are_refused_at_once(field, value, expected):
    original = {"duration": "duration: 1h", "count": "count: 3"}[field]
    text = GOOD.replace(original, f"{field}: {value}", 1)
    with pytest.raises(TraceInvalid) as caught:
        load_trace_text(text, "b.yaml")
    assert any(f"workloads[0].{field}: {expected}" in p for p in caught.value.problems), (
        caught.value.problems
    )
