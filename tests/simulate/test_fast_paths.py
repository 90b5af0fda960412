"""The simulate engine's shortcuts (placement passes by gang, admission passes that skip shapes
that cannot fit) change its speed, never its answer: every arm's run on random small traces is
what the plain passes give."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaguard.policy.loader import load_policy_file
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.cluster import Node
from quotaguard.simulate import arm_replay
from quotaguard.simulate.placement import Cluster, PodNeed
from quotaguard.simulate.placing import Placing, PlainPlacing
from quotaguard.simulate.preemption import PRESETS
from quotaguard.simulate.queued import QueuedWorkload
from quotaguard.simulate.queueing import QueueModel
from quotaguard.simulate.simulation import Simulation, simulate
from quotaguard.simulate.simulation_report import result_json
from quotaguard.simulate.trace import load_trace_text

SAMPLE_POLICY = Path(__file__).parents[2] / "config" / "policy.yaml"
TENANTS = ("training", "inference", "nb-alice", "nb-bob")


@pytest.fixture(scope="module")
def policy() -> TenantPolicy:
    return load_policy_file(SAMPLE_POLICY)


def _pod(gpus: int, pods: int) -> str:
    limits = f"{{limits: {{nvidia.com/gpu: '{gpus}'}}}}"
    template = f"{{spec: {{containers: [{{name: main, resources: {limits}}}]}}}}"
    if pods == 1:
        return template
    return (
        f"{{apiVersion: batch/v1, kind: Job, spec: {{parallelism: {pods}, template: {template}}}}}"
    )


workload = st.tuples(
    st.integers(0, 3 * 3600),  # at
    st.integers(60, 2 * 3600),  # duration
    st.sampled_from(TENANTS),
    st.sampled_from((1, 2, 4, 8)),
    st.sampled_from((1, 1, 1, 2, 3)),  # pods
    st.sampled_from((0, 0, 100)),  # priority
)


def _trace(nodes: int, rows: list[tuple[int, int, str, int, int, int]]) -> str:
    lines = ["horizon: 4h", "nodes:"]
    lines += [
        f"  - {{name: gpu-{index}, labels: {{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}, "
        f"allocatable: {{nvidia.com/gpu: '{4 if index % 2 else 8}'}}}}"
        for index in range(nodes)
    ]
    lines.append("workloads:")
    lines += [
        f"  - {{at: {at}, duration: {duration}, namespace: {tenant}, priority: {priority}, "
        f"pod: {_pod(gpus, pods)}}}"
        for at, duration, tenant, gpus, pods, priority in rows
    ]
    return "\n".join(lines) + "\n"


def _both(
    policy: TenantPolicy, text: str, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> tuple[Simulation, Simulation]:
    fast = simulate(policy, load_trace_text(text, "t.yaml"), **options)
    with monkeypatch.context() as patched:
        patched.setattr(arm_replay, "Placing", PlainPlacing)
        patched.setattr(arm_replay, "QueueModel", functools.partial(QueueModel, plain=True))
        plain = simulate(policy, load_trace_text(text, "t.yaml"), **options)
    return fast, plain


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    nodes=st.integers(1, 4),
    rows=st.lists(workload, min_size=1, max_size=40),
    preemption=st.sampled_from(sorted(PRESETS)),
)
def test_every_arm_runs_as_the_plain_passes_run_it(
    policy: TenantPolicy,
    monkeypatch: pytest.MonkeyPatch,
    nodes: int,
    rows: list[tuple[int, int, str, int, int, int]],
    preemption: str,
) -> None:
    fast, plain = _both(policy, _trace(nodes, rows), monkeypatch, preemption=PRESETS[preemption])
    assert fast.runs == plain.runs
    assert result_json(fast) == result_json(plain)


def test_a_crowded_trace_waits_for_nodes_and_preempts_as_the_plain_passes_do(
    policy: TenantPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [
        (60 * index, 1800 + 97 * index % 3600, TENANTS[index % 4], (1, 2, 4, 8)[index % 4],
         1 + index % 3, 100 * (index % 5 == 0))
        for index in range(120)
    ]  # fmt: skip
    fast, plain = _both(policy, _trace(3, rows), monkeypatch)
    runs = fast.runs.values()
    assert any(run.unplaceable for run in runs) and any(run.preempted for run in runs)
    assert fast.runs == plain.runs
    assert result_json(fast) == result_json(plain)


def _cluster(policy: TenantPolicy) -> Cluster:
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    return Cluster(
        policy,
        [Node(f"gpu-{n}", True, False, (), labels, {"nvidia.com/gpu": 8}) for n in range(3)],
    )


step = st.one_of(
    st.tuples(st.just("add"), st.integers(1, 3), st.sampled_from((1, 2, 4, 8)), st.integers(0, 1)),
    st.tuples(st.just("evict"), st.integers(0, 50), st.just(0), st.just(0)),
    st.tuples(st.just("place"), st.just(0), st.just(0), st.just(0)),
    st.tuples(st.just("release"), st.integers(0, 50), st.just(0), st.just(0)),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(step, max_size=80))
def test_a_placement_pass_by_gang_places_what_the_plain_pass_places(
    policy: TenantPolicy, steps: list[tuple[str, int, int, int]]
) -> None:
    sides = [
        (Placing(), _cluster(policy), set[int]()),
        (PlainPlacing(), _cluster(policy), set[int]()),
    ]
    running: list[int] = []
    assignments: dict[int, Any] = {}
    waiting: list[int] = []
    for number, (action, first, units, priority) in enumerate(steps):
        if action == "add":
            gang = (PodNeed(first, (("h100", units),)),)
            for placing, _, _ in sides:
                workload = QueuedWorkload(number, "training", (), 0.0, priority, float(number))
                placing.add(workload, gang)
            waiting.append(number)
        elif action == "evict" and waiting:
            ident = waiting.pop(first % len(waiting))
            for placing, _, _ in sides:
                placing.remove(ident)
        elif action == "place":
            answers = [
                [(w.id, assignment) for w, assignment in placing.place(cluster, unplaceable)]
                for placing, cluster, unplaceable in sides
            ]
            assert answers[0] == answers[1]
            for ident, assignment in answers[0]:
                waiting.remove(ident)
                running.append(ident)
                assignments[ident] = assignment
        elif action == "release" and running:
            ident = running.pop(first % len(running))
            for _, cluster, _ in sides:
                cluster.release(assignments[ident])
        assert sides[0][2] == sides[1][2]
        assert len(sides[0][0]) == len(sides[1][0]) == len(waiting)
        assert sides[0][0].count("training") == sides[1][0].count("training")
