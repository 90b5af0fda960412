"""No arm beats the bound: on small random inventories and traces, every arm's utilisation and
useful utilisation stay at or under `bound.utilization` (demand and capacity alone)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaguard.policy.loader import load_policy_file
from quotaguard.policy.model import TenantPolicy
from quotaguard.simulate.preemption import PRESETS
from quotaguard.simulate.simulation import simulate
from quotaguard.simulate.simulation_report import result_json
from quotaguard.simulate.trace import load_trace_text

POLICY = Path(__file__).parents[2] / "config" / "policy.yaml"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
NAMESPACES = ("training", "research-nlp", "inference", "serving-chat", "nb-a", "default")
MEMORY = (None, "6Gi", "10Gi", "20Gi", "36Gi", "64Gi")


@pytest.fixture(scope="module")
def policy() -> TenantPolicy:
    return load_policy_file(POLICY)


@st.composite
def nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = [
        {"name": f"gpu-{i}", "labels": H100, "allocatable": {"nvidia.com/gpu": str(gpus)}}
        for i, gpus in enumerate(draw(st.lists(st.integers(1, 8), min_size=1, max_size=3)))
    ]
    if draw(st.booleans()):
        slices = {
            "nvidia.com/mig-1g.10gb": str(draw(st.integers(0, 14))),
            "nvidia.com/mig-3g.40gb": str(draw(st.integers(0, 4))),
        }
        found.append({"name": "mig", "allocatable": slices})
    if draw(st.booleans()):
        shared = {"nvidia.com/gpu.shared": str(draw(st.integers(1, 16)))}
        found.append({"name": "shared", "allocatable": shared})
    return found


def _pod(gpus: int, memory: str | None, pods: int) -> dict[str, Any]:
    limits = {"limits": {"nvidia.com/gpu": str(gpus)}}
    template: dict[str, Any] = {"spec": {"containers": [{"name": "m", "resources": limits}]}}
    if memory is not None:
        template["metadata"] = {"annotations": {"quotaguard.dev/gpu-memory": memory}}
    if pods == 1:
        return template
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {"parallelism": pods, "template": template},
    }


@st.composite
def workloads(draw: st.DrawFn) -> list[dict[str, Any]]:
    return [
        {
            "at": draw(st.integers(0, 7200)),
            "duration": draw(st.integers(60, 4 * 3600)),
            "namespace": draw(st.sampled_from(NAMESPACES)),
            "count": draw(st.integers(1, 3)),
            "every": draw(st.integers(1, 1800)),
            "uses": draw(st.integers(1, 10)) / 10,
            "priority": draw(st.sampled_from((0, 100))),
            "pod": _pod(
                draw(st.integers(1, 8)), draw(st.sampled_from(MEMORY)), draw(st.integers(1, 3))
            ),
        }
        for _ in range(draw(st.integers(1, 8)))
    ]


@settings(
    max_examples=int(os.environ.get("QUOTAGUARD_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    inventory=nodes(),
    trace=workloads(),
    preemption=st.sampled_from(("never", "reclaim")),
    scoring=st.sampled_from(("LeastAllocated", "MostAllocated")),
)
def test_no_arm_exceeds_the_bound(policy, inventory, trace, preemption, scoring):
    text = json.dumps({"horizon": "3h", "nodes": inventory, "workloads": trace})
    simulation = simulate(
        policy,
        load_trace_text(text, "random.json"),
        preemption=PRESETS[preemption],
        scoring=scoring,
    )
    for name, metrics in simulation.metrics.items():
        overall = metrics.overall
        assert overall.utilization <= simulation.bound + 1e-9, (name, text)
        # and under the bound of the arms that run the pods as it does
        assert overall.utilization <= simulation.arm_bounds[name] + 1e-9, (name, text)
        assert simulation.arm_bounds[name] <= simulation.bound
        assert overall.useful_utilization <= overall.utilization + 1e-9, (name, text)
    document = result_json(simulation)
    for name in simulation.metrics:
        assert document[name]["usefulUtilization"] <= document["bound"]["utilization"]
        assert document[name]["utilization"] <= document["bound"]["utilization"]
        assert document[name]["utilization"] <= document["bound"]["arms"][name]
