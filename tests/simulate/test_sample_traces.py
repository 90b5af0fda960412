"""The sample traces under config/traces: written by their generators, with `uses` where the
generator says, and traces without `uses` still read and simulated as before."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from quotaguard.policy.loader import load_policy_file
from quotaguard.simulate.simulation import simulate
from quotaguard.simulate.trace import load_trace, load_trace_text

ROOT = Path(__file__).parents[2]
TRACES = ROOT / "config" / "traces"


@pytest.fixture(scope="module")
def generators() -> Iterator[dict[str, ModuleType]]:
    sys.path.insert(0, str(TRACES))
    try:
        names = ("generate", "generate_mig_shift", "generate_saturated")
        yield {name: importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(str(TRACES))


@pytest.mark.parametrize(
    ("module", "trace", "seed"),
    [
        ("generate", "day.yaml", 20260101),
        ("generate_mig_shift", "mig-shift.yaml", 20260316),
        ("generate_saturated", "saturated.yaml", 20261203),
    ],
)
def test_each_sample_trace_is_what_its_generator_writes(generators, module, trace, seed):
    assert generators[module].render(seed) == (TRACES / trace).read_text()


def test_every_workload_of_the_sample_day_says_what_it_keeps_busy():
    trace = load_trace(TRACES / "day.yaml")
    assert all(0 < workload.uses <= 1 for workload in trace.workloads)
    notebooks = [w.uses for w in trace.workloads if w.namespace.startswith("nb-")]
    assert notebooks and max(notebooks) < 0.2  # a kernel idles between cells
    assert len({w.uses for w in trace.workloads}) > 10  # jittered, not one number per shape


def test_a_trace_without_uses_keeps_every_allocated_gpu_busy():
    policy = load_policy_file(ROOT / "config" / "policy.yaml")
    simulation = simulate(policy, load_trace(ROOT / "tests" / "simulate" / "small.yaml"))
    for metrics in simulation.metrics.values():
        overall = metrics.overall
        assert overall.busy_gpu_seconds == pytest.approx(overall.useful_gpu_seconds)
        assert metrics.idle["heldIdle"] == pytest.approx(0, abs=1e-6)


@pytest.mark.parametrize(
    ("value", "shown"), [("1.5", "1.5"), ("-0.1", "-0.1"), ("busy", "'busy'"), ("true", "True")]
)
def test_uses_must_be_a_share_from_0_to_1(value, shown):
    text = (
        "nodes: [{name: n, allocatable: {nvidia.com/gpu: '8'}}]\n"
        f"workloads:\n  - {{at: 0, duration: 1h, namespace: t, uses: {value}, pod: {{}}}}\n"
    )
    with pytest.raises(Exception) as caught:
        load_trace_text(text, "u.yaml")
    assert f"workloads[0].uses: must be a share from 0 to 1, not {shown}" in str(caught.value)
