"""The bound with compatibility: never above the fluid bound, equal to it when every workload
may run anywhere, and blind to idle GPUs a waiting workload may not use."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.simulate.bound import fluid_bound
from quotaguard.simulate.flowbound import FlowJob, flow_bound

CLASSES = ("h100", "a100", "l40s", "mig-1g")


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[FlowJob], dict[str, float]]:
    capacity = {name: float(draw(st.integers(0, 16))) for name in CLASSES}
    jobs = [
        FlowJob(
            at=float(draw(st.integers(0, 3000))),
            rate=draw(st.sampled_from((0.25, 1.0, 2.0, 4.0, 8.0))),
            work=float(draw(st.integers(1, 20_000))),
            classes=frozenset(draw(st.sets(st.sampled_from(CLASSES), min_size=1))),
        )
        for _ in range(draw(st.integers(0, 25)))
    ]
    return jobs, capacity


@settings(max_examples=150, deadline=None)
@given(case=cases())
def test_never_above_the_fluid_bound(case):
    jobs, capacity = case
    total = sum(capacity.values())
    fluid = fluid_bound(((job.at, job.rate, job.work) for job in jobs), total, 3600, 60)
    assert flow_bound(jobs, capacity, total, 3600, 60) <= fluid + 1e-6


@settings(max_examples=150, deadline=None)
@given(case=cases())
def test_equal_to_the_fluid_bound_when_everything_runs_anywhere(case):
    jobs, capacity = case
    anywhere = [FlowJob(job.at, job.rate, job.work, frozenset(CLASSES)) for job in jobs]
    total = sum(capacity.values())
    fluid = fluid_bound(((job.at, job.rate, job.work) for job in jobs), total, 3600, 60)
    assert flow_bound(anywhere, capacity, total, 3600, 60) == pytest.approx(fluid, abs=1e-6)


@settings(max_examples=150, deadline=None)
@given(case=cases())
def test_no_class_serves_more_than_it_holds(case):
    jobs, capacity = case
    for name in CLASSES:
        only = [job for job in jobs if job.classes == frozenset({name})]
        served = flow_bound(only, capacity, sum(capacity.values()), 3600, 60)
        assert served <= capacity[name] * 3600 + 1e-6


def test_idle_gpus_of_another_model_do_not_count():
    # 8 H100s busy with 16 H100-only GPUs of demand, 8 A100s idle: the fluid bound lends the
    # A100s to the H100 work, the flow does not
    jobs = [FlowJob(0.0, 8.0, 8.0 * 3600, frozenset({"h100"})) for _ in range(2)]
    capacity = {"h100": 8.0, "a100": 8.0}
    fluid = fluid_bound(((job.at, job.rate, job.work) for job in jobs), 16.0, 3600, 60)
    assert fluid == pytest.approx(16 * 3600)
    assert flow_bound(jobs, capacity, 16.0, 3600, 60) == pytest.approx(8 * 3600)


def test_a_flexible_workload_moves_aside_for_one_that_has_no_choice():
    # the flexible job came first and took the A100s; the A100-only job arriving later gets
    # them once the flexible one moves to the idle H100s
    flexible = FlowJob(0.0, 8.0, 8.0 * 3600, frozenset({"a100", "h100"}))
    bound_to_a100 = FlowJob(600.0, 8.0, 8.0 * 3000, frozenset({"a100"}))
    served = flow_bound([flexible, bound_to_a100], {"a100": 8.0, "h100": 8.0}, 16.0, 3600, 60)
    assert served == pytest.approx(8 * 3600 + 8 * 3000)


def test_the_cluster_total_caps_every_class_together():
    # a layout can offer 8 whole GPUs or 56 slices, never both at once
    jobs = [
        FlowJob(0.0, 8.0, 8.0 * 3600, frozenset({"h100"})),
        FlowJob(0.0, 8.0, 8.0 * 3600, frozenset({"mig-1g"})),
    ]
    served = flow_bound(jobs, {"h100": 8.0, "mig-1g": 8.0}, 8.0, 3600, 60)
    assert served == pytest.approx(8 * 3600)
