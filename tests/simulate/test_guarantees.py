"""What a guarantee was worth per arm: restore episodes, fair shares, lending idle guarantees."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaguard.policy.loader import load_policy_file
from quotaguard.simulate.guarantees import restore_episodes, weighted_fair_shares
from quotaguard.simulate.simulation import Simulation, simulate
from quotaguard.simulate.simulation_report import result_json
from quotaguard.simulate.trace import load_trace_text

POLICY = """\
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {{name: two-teams}}
spec:
  backend: kueue
  cohort: pool
  rebalance: {{lendIdleGuarantees: {lend}}}
  gpuClasses:
    - {{name: h100, resource: nvidia.com/gpu, memory: 80Gi}}
  tenants:
    - name: research
      namespaces: [research]
      queue: research
      localQueue: research
      quota: {{h100: {{guaranteed: 16, max: 32}}}}
    - name: batch
      namespaces: [batch]
      queue: batch
      localQueue: batch
      quota: {{h100: {{guaranteed: 16, max: 32}}}}
"""
JOB = "{spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: '8'}}}]}}"
# batch fills the cluster for 2h while research is idle; research's own work returns at 1h
TRACE = textwrap.dedent(
    f"""\
    horizon: 3h
    nodes:
      - {{name: a, allocatable: {{nvidia.com/gpu: "16"}}}}
      - {{name: b, allocatable: {{nvidia.com/gpu: "16"}}}}
    workloads:
      - {{at: 0, duration: 2h, namespace: batch, count: 4, pod: {JOB}}}
      - {{at: 3600, duration: 30m, namespace: research, count: 2, pod: {JOB}}}
    """
)


def _run(tmp_path: Path, *, lend: bool) -> Simulation:
    path = tmp_path / f"policy-{lend}.yaml"
    path.write_text(POLICY.format(lend=str(lend).lower()))
    return simulate(load_policy_file(path), load_trace_text(TRACE, "t.yaml"))


def test_a_pool_and_the_default_controller_never_lend_an_idle_guarantee(tmp_path):
    document = result_json(_run(tmp_path, lend=False))
    for arm in ("pool", "dynamic"):
        assert document[arm]["lentGpuHours"] == 0
        # batch runs 2 of its 4 jobs at once: 16 GPUs of research's stay idle for an hour
        assert document[arm]["tenants"]["batch"]["gpuHours"] == pytest.approx(16 * 2 + 16 * 1)


def test_lending_idle_guarantees_puts_them_to_work_and_gives_them_back(tmp_path):
    simulation = _run(tmp_path, lend=True)
    document = result_json(simulation)
    dynamic, pool = document["dynamic"], document["pool"]
    # the first hour, research's 16 idle GPUs ran batch's other two jobs (and again once
    # research's work was done)
    assert dynamic["lentGpuHours"] >= 16
    assert pool["lentGpuHours"] == 0
    assert dynamic["utilization"] > pool["utilization"]
    # research's work returned at 1h and took its guarantee back at once, by evicting the
    # two borrowed jobs (an hour each of 8 GPUs thrown away)
    assert dynamic["guarantees"] == 1.0
    assert dynamic["tenants"]["research"]["p95Wait"] == 0
    assert dynamic["preempted"] == 2
    assert dynamic["gpuHoursLost"] == pytest.approx(16)


def test_the_json_and_the_table_carry_the_guarantee_figures(tmp_path):
    document = result_json(_run(tmp_path, lend=False))
    for arm in ("none", "static", "pool", "dynamic"):
        figures = document[arm]
        for key in ("guarantees", "lentGpuHours", "weightedFairness", "fairGpuHours"):
            assert isinstance(figures[key], float | int), key
        assert set(figures["guaranteeRestore"]) == {"p50", "p95", "episodes"}
        assert set(figures["guaranteedWait"]) == {"mean", "p95", "workloads"}
        assert 0 < figures["weightedFairness"] <= 1
        assert "fairGpuHours" in figures["tenants"]["batch"]


def test_an_episode_lasts_from_the_first_short_sample_to_the_first_that_is_not():
    times = [0.0, 60.0, 120.0, 180.0, 240.0]
    usage = [0, 0, 8, 16, 0]
    waiting = [0, 8, 8, 0, 8]
    # short at 60 and 120 (waiting, under 16), restored at 180; short again at 240 to the end
    assert restore_episodes(times, usage, waiting, 16, horizon=300.0) == [
        (120.0, True),
        (60.0, False),
    ]


DEMANDS = st.dictionaries(
    st.sampled_from("abcdef"), st.floats(min_value=0, max_value=100), min_size=1
)


@given(DEMANDS, st.floats(min_value=0, max_value=300), st.data())
def test_fair_shares_are_work_conserving_weighted_max_min(demand, capacity, data):
    weights = {name: data.draw(st.floats(min_value=0.1, max_value=10)) for name in demand}
    shares = weighted_fair_shares(demand, weights, capacity)
    assert all(-1e-6 <= shares[name] <= demand[name] + 1e-6 for name in demand)
    assert sum(shares.values()) == pytest.approx(
        min(capacity, sum(demand.values())), rel=1e-6, abs=1e-6
    )
    # tenants held below their demand all got the same share per weight, no less than anyone
    below = [shares[n] / weights[n] for n in demand if shares[n] < demand[n] - 1e-6]
    if below:
        level = max(below)
        assert min(below) == pytest.approx(level, rel=1e-6, abs=1e-6)
        assert all(shares[n] / weights[n] <= level + 1e-6 for n in demand)
