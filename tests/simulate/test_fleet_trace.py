"""A trace that names clusters: what is read, and every mistake located as FILE:LINE:COLUMN."""

from __future__ import annotations

import textwrap

import pytest

from quotaguard.simulate.trace import TraceInvalid, load_trace_text

FLEET = textwrap.dedent(
    """\
    horizon: 2h
    clusters:
      - name: east
        nodes:
          - {name: gpu, count: 2, allocatable: {nvidia.com/gpu: "8"}}
      - name: west
        nodes:
          - {name: gpu, allocatable: {nvidia.com/gpu: "8"}}
        down: [{from: 30m, to: 1h}]
    workloads:
      - {at: 0, duration: 1h, namespace: research, pod: {spec: {containers: []}}}
      - {at: 0, duration: 1h, namespace: product, cluster: west, pod: {spec: {containers: []}}}
    """
)


def problems_of(text: str) -> list[str]:
    with pytest.raises(TraceInvalid) as caught:
        load_trace_text(text, "fleet.yaml")
    return caught.value.problems


def test_a_fleet_trace_names_its_workers_and_where_work_is_created():
    trace = load_trace_text(FLEET, "fleet.yaml")
    assert [c.name for c in trace.clusters] == ["east", "west"]
    assert [n.name for n in trace.clusters[0].nodes] == ["gpu-001", "gpu-002"]
    # the single-cluster arms see every worker's nodes, named by their cluster
    assert [n.name for n in trace.nodes] == ["east/gpu-001", "east/gpu-002", "west/gpu"]
    assert [w.cluster for w in trace.workloads] == [None, "west"]
    west = trace.clusters[1]
    assert west.down == ((1800.0, 3600.0),)
    assert west.answers(1799) and not west.answers(1800) and west.answers(3600)


def test_a_trace_without_clusters_has_none():
    trace = load_trace_text(FLEET.split("clusters:")[0] + "nodes: [{name: a}]\n" + _workloads())
    assert trace.clusters == () and [n.name for n in trace.nodes] == ["a"]


def _workloads() -> str:
    return "workloads:\n  - {at: 0, duration: 1h, namespace: r, pod: {spec: {}}}\n"


def test_a_workload_naming_an_unknown_cluster_is_located():
    problems = problems_of(FLEET.replace("cluster: west", "cluster: north"))
    assert problems == [
        "fleet.yaml:12:56: workloads[1].cluster: unknown cluster 'north'; "
        "the trace's clusters: east, west"
    ]


def test_a_cluster_named_twice_is_located():
    problems = problems_of(FLEET.replace("name: west", "name: east"))
    assert "fleet.yaml:6:11: clusters[1].name: cluster 'east' appears twice" in problems


def test_clusters_and_top_level_nodes_together_are_an_error():
    problems = problems_of(FLEET.replace("clusters:", "nodes: [{name: a}]\nclusters:"))
    assert problems == ["fleet.yaml:2:1: nodes: give either clusters or nodes/snapshot, not both"]


def test_a_workload_naming_a_cluster_in_a_trace_without_clusters_is_an_error():
    text = "nodes: [{name: a}]\n" + _workloads().replace("namespace: r", "namespace: r, cluster: x")
    (problem,) = problems_of(text)
    assert problem.startswith("fleet.yaml:3:50: workloads[0].cluster: the trace names no clusters")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("name: west", "name: manager"), "clusters[1].name: `manager` is the cluster"),
        (("name: west", "name: West_1"), "clusters[1].name: a cluster needs a name (a DNS label)"),
        (("- name: west\n    nodes:", "- name: west\n    nodez:"), "clusters[1]: a cluster needs"),
        (("to: 1h", "to: 10m"), "clusters[1].down[0].to: must be after from"),
        (('nvidia.com/gpu: "8"}}\n  - name', 'nvidia.com/gpu: "x"}}\n  - name'), "clusters[0]."),
    ],
)
def test_every_mistake_in_a_cluster_is_located(change, expected):
    problems = problems_of(FLEET.replace(*change))
    assert any(expected in problem for problem in problems), problems
    assert all(problem.startswith("fleet.yaml:") for problem in problems)
