"""What a reader of `quotaguard simulate` sees: every arm as a column beside the bound, the
idle breakdown, a verdict that opens with what quotaguard adds over none and over a pool."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pytest

from quotaguard.policy.loader import load_policy_file
from quotaguard.simulate.arms import ARMS
from quotaguard.simulate.simulation import Simulation, simulate
from quotaguard.simulate.simulation_page import render_html
from quotaguard.simulate.simulation_report import render_text, result_json
from quotaguard.simulate.trace import load_trace, load_trace_text
from quotaguard.simulate.verdict import verdict
from quotaguard.simulate.words import IDLE_LABELS

ROOT = Path(__file__).parents[2]
SMALL = ROOT / "tests" / "simulate" / "small.yaml"


@pytest.fixture(scope="module")
def small() -> Simulation:
    policy = load_policy_file(ROOT / "config" / "policy.yaml")
    return simulate(policy, load_trace(SMALL))


def _sections(text: str) -> list[str]:
    """The text after its lead sentence, split where a blank line is."""
    return text.split("\n\n")[1:]


def test_the_summary_table_has_one_column_per_arm_and_the_bound(small):
    summary = _sections(render_text(small))[1].splitlines()
    assert summary[0].split() == [*ARMS, "bound"]
    document = result_json(small)
    utilisation = summary[1].split()
    assert utilisation[:2] == ["GPU", "utilisation"]
    shown = [f"{100 * document[arm]['utilization']:.1f}%" for arm in ARMS]
    assert utilisation[2:] == [*shown, f"{100 * document['bound']['utilization']:.1f}%"]
    labels = [line[:21].strip() for line in summary[1:]]
    for label in ("useful utilisation", "unplaceable", "fragmented GPU-hours", "p95 wait"):
        assert label in labels


# Two 4-GPU nodes; two 3-GPU jobs spread one per node (LeastAllocated), then a 2-GPU job:
# 2 GPUs are idle in total, but 1 per node, so it waits for an hour on fragmentation.
H100 = (
    "{labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}, allocatable: {nvidia.com/gpu: '4'}}"
)
GPUS = "{nvidia.com/gpu"
FRAGMENTING = f"""\
horizon: 2h
nodes: [{H100.replace("{", "{name: a, ", 1)}, {H100.replace("{", "{name: b, ", 1)}]
manifests:
  three: &three {{spec: {{containers: [{{name: m, resources: {{limits: {GPUS}: 3}}}}}}]}}}}
  two: &two {{spec: {{containers: [{{name: m, resources: {{limits: {GPUS}: 2}}}}}}]}}}}
workloads:
  - {{at: 0, duration: 1h, namespace: training, count: 2, uses: 0.5, pod: *three}}
  - {{at: 0, duration: 1h, namespace: training, pod: *two}}
"""


def test_the_idle_table_shows_fragmentation_and_held_but_idle_gpu_hours_per_arm():
    policy = load_policy_file(ROOT / "config" / "policy.yaml")
    simulation = simulate(policy, load_trace_text(FRAGMENTING, "frag.yaml"))
    idle = _sections(render_text(simulation))[2].splitlines()
    assert idle[0].split()[-len(ARMS) :] == list(ARMS)
    labels = list(IDLE_LABELS.values())
    assert [line[: len(label)] for line, label in zip(idle[1:], labels, strict=False)] == labels
    rows = {
        label: line[len(label) :].split() for line, label in zip(idle[1:4], labels[:3], strict=True)
    }
    # every arm: 2 idle GPUs for the first hour while the 2-GPU job waits
    assert rows["fragmentation"] == ["2"] * len(ARMS)
    # the two 3-GPU jobs keep half their GPUs busy for an hour: 3 GPU-hours held but idle
    assert rows["held but idle"] == ["3"] * len(ARMS)
    document = result_json(simulation)
    for arm in ARMS:
        assert document[arm]["fragmentedGpuHours"] == 2
        assert document[arm]["usefulUtilization"] < document[arm]["utilization"]
    said = verdict(simulation)
    assert "2 fragmentation" in said and "3 held but idle" in said


def test_each_tenant_has_one_row_per_figure_with_every_arm(small):
    tenants = _sections(render_text(small))[3].splitlines()
    assert tenants[0].split() == ["tenant", *ARMS]
    assert re.match(rf"^inference\s+utilisation(\s+\S+%){{{len(ARMS)}}}$", tenants[1])
    assert sum(line.startswith("training ") for line in tenants) == 1


def test_the_verdict_opens_with_what_quotaguard_adds_over_none_then_over_a_pool(small):
    said = verdict(small)
    sentences = said.split(". ")
    assert sentences[0].startswith("Against no quotaguard")
    none = small.metrics["none"].overall.utilization
    assert f"{100 * none:.1f}% GPU utilisation" in sentences[0]
    dynamic = small.metrics["dynamic"].overall.utilization
    # arms with the same figures are told once, together
    assert small.metrics["geometry"].overall == small.metrics["dynamic"].overall
    assert f"{100 * dynamic:.1f}% in the dynamic and geometry arms (the same" in sentences[0]
    assert sentences[1].startswith("Against hand-written quotas")
    assert "the dynamic and geometry arms (the same figures) add" in sentences[1]
    assert f"No arm could pass {100 * small.bound:.1f}%" in said
    idle_at = said.index("GPU-hours not kept busy in the geometry arm went to")
    assert said.index("No arm could pass") < idle_at
    for words in ("fragmentation", "wrong slice sizes", "held but idle", "no demand"):
        assert words in said[idle_at:]
    assert "Without quotaguard" in said[idle_at:]


def test_a_new_arm_appears_in_every_table_the_verdict_and_the_page(monkeypatch):
    twin = dataclasses.replace(ARMS["dynamic"], name="twin", summary="a second controller")
    monkeypatch.setitem(ARMS, "twin", twin)
    policy = load_policy_file(ROOT / "config" / "policy.yaml")
    simulation = simulate(policy, load_trace(SMALL), arms=tuple(ARMS))
    text = render_text(simulation)
    summary, idle, tenants = _sections(text)[1:4]
    assert summary.splitlines()[0].split() == [*ARMS, "bound"]
    assert idle.splitlines()[0].split()[-1] == "twin"
    assert tenants.splitlines()[0].split()[-1] == "twin"
    assert "twin:" in _sections(text)[0]
    # a copy of dynamic: told with it, as the same figures
    assert "in the dynamic, geometry and twin arms (the same" in verdict(simulation).split(". ")[0]
    assert "the dynamic, geometry and twin arms (the same figures) add" in verdict(simulation)
    page = render_html(simulation)
    assert "<th>twin</th>" in page
    assert "GPUs allocated per tenant: twin" in page
    assert "twin" in result_json(simulation)


def test_without_a_none_arm_the_verdict_starts_at_the_pool(small):
    policy = load_policy_file(ROOT / "config" / "policy.yaml")
    simulation = simulate(policy, load_trace(SMALL), arms=("static", "pool", "dynamic"))
    said = verdict(simulation)
    assert said.startswith("Against hand-written quotas")
    assert "Without quotaguard" not in said
    assert _sections(render_text(simulation))[1].splitlines()[0].split() == [
        "static",
        "pool",
        "dynamic",
        "bound",
    ]


def test_a_ten_year_span_with_one_workload_costs_what_its_content_does():
    # 87,600 hours sampled every minute would be 5 million samples per arm; once the one
    # workload is done nothing can change, and the rest of the span is counted, not replayed

    text = (
        "horizon: 87600h\n"
        f"nodes: [{H100.replace('{', '{name: a, ', 1)}]\n"
        "workloads:\n"
        f"  - {{at: 0, duration: 1h, namespace: training, pod: {{spec: {{containers: "
        f"[{{name: m, resources: {{limits: {GPUS}: 2}}}}}}]}}}}}}\n"
    )
    started = time.process_time()
    simulation = simulate(load_policy_file(ROOT / "config" / "policy.yaml"), load_trace_text(text))
    assert time.process_time() - started < 10
    span_hours = 87600 * 4  # one node of 4 GPUs
    for name, metrics in simulation.metrics.items():
        assert metrics.overall.gpu_seconds == pytest.approx(2 * 3600), name
        assert metrics.overall.utilization == pytest.approx(2 / span_hours)
        assert sum(metrics.idle.values()) / 3600 == pytest.approx(span_hours - 2, rel=1e-3)
        assert len(simulation.runs[name].series.times) < 100
    assert simulation.metrics["dynamic"].plans == 87600 * 60


def test_a_tiny_every_is_bounded_by_count():
    text = (
        "horizon: 1h\n"
        f"nodes: [{H100.replace('{', '{name: a, ', 1)}]\n"
        "workloads:\n"
        f"  - {{at: 0, duration: 1m, namespace: training, count: 2000, every: 0.001, pod: "
        f"{{spec: {{containers: [{{name: m, resources: {{limits: {GPUS}: 1}}}}}}]}}}}}}\n"
    )
    trace = load_trace_text(text)
    assert trace.size == 2000
    simulation = simulate(load_policy_file(ROOT / "config" / "policy.yaml"), trace)
    assert simulation.metrics["pool"].overall.workloads == 2000
