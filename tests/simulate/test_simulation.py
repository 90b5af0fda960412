"""Both arms on small traces: determinism, denials, waits, the JSON shape, what dynamic changes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from quotaguard.policy.loader import load_policy_file
from quotaguard.policy.model import TenantPolicy
from quotaguard.simulate.arm_metrics import jain, percentile
from quotaguard.simulate.preemption import PRESETS
from quotaguard.simulate.simulation import Simulation, simulate
from quotaguard.simulate.simulation_report import format_span, result_json, verdict
from quotaguard.simulate.trace import load_trace_text

SAMPLE_POLICY = Path(__file__).parents[2] / "config" / "policy.yaml"

NODES = textwrap.dedent(
    """\
    nodes:
      - name: gpu-1
        labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
        allocatable: {nvidia.com/gpu: "8"}
      - name: gpu-2
        labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
        allocatable: {nvidia.com/gpu: "8"}
      - name: gpu-3
        labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
        allocatable: {nvidia.com/gpu: "8"}
      - name: gpu-4
        labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
        allocatable: {nvidia.com/gpu: "8"}
      - {name: mig-1, allocatable: {nvidia.com/mig-1g.10gb: "14", nvidia.com/mig-3g.40gb: "4"}}
      - {name: shared-1, allocatable: {nvidia.com/gpu.shared: "16"}}
    """
)
TRAINING_8 = "{spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: '8'}}}]}}"
NOTEBOOK_2 = "{spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: '2'}}}]}}"
INFERENCE_8GI = (
    "{metadata: {annotations: {quotaguard.dev/gpu-memory: 8Gi}}, "
    "spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: '1'}}}]}}"
)


@pytest.fixture(scope="module")
def policy() -> TenantPolicy:
    return load_policy_file(SAMPLE_POLICY)


def run(
    policy: TenantPolicy, workloads: str, *, horizon: str = "6h", nodes: str = NODES, **options
) -> Simulation:
    text = f"horizon: {horizon}\n{nodes}workloads:\n{textwrap.indent(workloads, '  ')}"
    return simulate(policy, load_trace_text(text, "t.yaml"), **options)


BURST = f"""\
- {{at: 0, duration: 2h, namespace: training, count: 4, pod: {TRAINING_8}}}
- {{at: 60, duration: 30m, namespace: inference, count: 20, every: 30, pod: {INFERENCE_8GI}}}
- {{at: 120, duration: 30m, namespace: nb-alice, pod: {NOTEBOOK_2}}}
"""


def test_dynamic_quotas_lend_the_capacity_static_guarantees_leave_idle(policy):
    # training is guaranteed 16 of 32 H100s: with static quotas only two of its four 8-GPU
    # jobs run at once; the controller gives it the idle GPUs (up to 95% of 32, its headroom).
    # The span ends before the last jobs finish, so running sooner is more work done.
    result = run(policy, BURST, horizon="3h")
    static, dynamic = result.static.tenants["training"], result.dynamic.tenants["training"]
    assert static.mean_wait == pytest.approx(3600)  # two of four wait 2h
    assert dynamic.mean_wait == pytest.approx(1800)  # 4 x 8 > 30 distributable: one waits
    assert result.dynamic.overall.utilization > result.static.overall.utilization


def test_a_cohort_pool_already_lends_what_static_guarantees_leave_idle(policy):
    result = run(policy, BURST, horizon="3h")
    pool = result.metrics["pool"]
    assert pool.tenants["training"].mean_wait == pytest.approx(
        result.dynamic.tenants["training"].mean_wait
    )
    assert result.reference is pool  # what the verdict weighs dynamic quotas against
    assert pool.overall.utilization > result.static.overall.utilization
    # --static pool makes the static arm the pool too
    again = run(policy, BURST, horizon="3h", static_baseline="pool")
    assert again.static.overall == again.metrics["pool"].overall


def test_the_same_trace_gives_the_same_result(policy):
    assert result_json(run(policy, BURST)) == result_json(run(policy, BURST))


def test_denials_are_counted_in_both_arms_and_for_the_tenant(policy):
    result = run(policy, BURST)
    for metrics in (result.static, result.dynamic):
        assert metrics.overall.denied == 1
        assert metrics.tenants["notebooks"].denied == 1
        assert metrics.tenants["notebooks"].admitted == 0
    assert result.denial_rules() == [("shared-units", 1)]


def test_admission_runs_once_per_distinct_manifest_and_namespace(policy):
    result = run(policy, BURST)
    assert result.cache.misses == 3
    assert result.cache.hits == 4 + 20 + 1 - 3


def test_workloads_still_waiting_at_the_end_count_with_their_wait_so_far(policy):
    five = f"- {{at: 0, duration: 6h, namespace: training, count: 5, pod: {TRAINING_8}}}\n"
    result = run(policy, five, horizon="4h")
    static = result.static.tenants["training"]
    assert (static.admitted, static.waiting) == (2, 3)
    waits = sorted([0.0, 0.0, 4 * 3600.0, 4 * 3600.0, 4 * 3600.0])
    assert static.mean_wait == pytest.approx(sum(waits) / 5)
    assert static.p95_wait == 4 * 3600


def test_workloads_bigger_than_their_queue_can_ever_hold_are_left_out_of_waits(policy):
    job = f"{{apiVersion: batch/v1, kind: Job, spec: {{parallelism: 5, template: {TRAINING_8}}}}}"
    result = run(
        policy,
        f"- {{at: 0, duration: 1h, namespace: training, pod: {job}}}\n"
        f"- {{at: 0, duration: 1h, namespace: training, pod: {TRAINING_8}}}\n",
    )
    training = result.dynamic.tenants["training"]
    assert (training.never_fits, training.admitted, training.waiting) == (1, 1, 0)
    assert training.mean_wait == 0
    assert "can never be admitted" in verdict(result)


def test_the_json_has_the_fields_of_the_command_line_contract(policy):
    document = result_json(run(policy, BURST))
    arms = {"none", "static", "pool", "dynamic", "geometry"}
    assert set(document) == arms | {"reference", "bound", "preemption", "scoring", "showback"}
    assert document["reference"] == {"baseline": "pool", **document["pool"]}
    for arm in (document[name] for name in arms):
        assert arm["utilization"] <= document["bound"]["utilization"]
        assert {"usefulUtilization", "fragmentedGpuHours", "unplaceable"} <= set(arm)
        assert {"utilization", "meanWait", "p95Wait", "jainFairness", "denied", "tenants"} <= set(
            arm
        )
        assert set(arm["tenants"]) == {"inference", "notebooks", "training"}
        assert {"preempted", "gpuHoursLost"} <= set(arm)
        for tenant in arm["tenants"].values():
            assert {"utilization", "meanWait", "p95Wait", "denied"} <= set(tenant)
            assert {"preempted", "gpuHoursLost"} <= set(tenant)
        assert 0 <= arm["utilization"] <= 1
        assert 0 < arm["jainFairness"] <= 1


def test_the_dynamic_arm_runs_the_planner_every_interval(policy):
    result = run(policy, BURST, horizon="1h")
    assert result.dynamic.plans == 60  # rebalance.interval 60s
    series = result.runs["dynamic"].series
    assert len(series.times) == 60
    # the planner moved training's h100 quota above its guarantee of 16 for the burst
    assert max(series.nominal["training"]["h100"]) > 16
    assert set(result.runs["static"].series.nominal["training"]["h100"]) == {16}


def test_jain_index_and_percentile():
    assert jain([0.5, 0.5, 0.5]) == 1
    assert jain([1.0, 0.0]) == 0.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.95) == 4.0
    assert percentile([float(n) for n in range(1, 101)], 0.95) == 95.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (42, "42s"), (600, "10m"), (3600, "1h00m"), (11400, "3h10m"), (93600, "1d2h")],
)
def test_waits_read_like_people_say_them(seconds, text):
    assert format_span(seconds) == text


def test_the_verdict_names_a_max_that_keeps_work_waiting_beside_idle_gpus(policy):
    nodes = "".join(
        f"  - {{name: gpu-{n}, labels: {{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}, "
        'allocatable: {nvidia.com/gpu: "8"}}\n'
        for n in range(8)
    )
    text = (
        f"horizon: 2h\nnodes:\n{nodes}workloads:\n"
        f"  - {{at: 0, duration: 3h, namespace: training, count: 7, pod: {TRAINING_8}}}\n"
    )
    result = simulate(policy, load_trace_text(text, "t.yaml"))
    (capped,) = result.capped()
    assert (capped.tenant, capped.class_name, capped.max) == ("training", "h100", 48)
    assert capped.seconds == 2 * 3600
    assert capped.idle_units == 60 - 48  # distributable: 95% of 64, rounded down
    assert "training had h100 work waiting for 2h00m while at its max of 48" in verdict(result)


INFERENCE_36GI = (
    "{metadata: {annotations: {quotaguard.dev/gpu-memory: 36Gi}}, "
    "spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: '1'}}}]}}"
)
TRAINING_32GI = (
    "{metadata: {annotations: {quotaguard.dev/gpu-memory: 32Gi}}, "
    "spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: '1'}}}]}}"
)
# training borrows all four 3g.40gb slices (it is guaranteed none; inference is guaranteed
# four, which the static arm lends while unused); an hour later inference wants two back.
RECLAIM_SLICES = f"""\
- {{at: 0, duration: 2h, namespace: training, count: 4, pod: {TRAINING_32GI}}}
- {{at: 1h, duration: 30m, namespace: inference, count: 2, pod: {INFERENCE_36GI}}}
"""
SLICE_GPUS = 3 / 7  # a 3g.40gb slice in whole-GPU equivalents
# a second MIG node: 8 slices in all, so training's slices fit beside inference's guarantee
TWO_MIG_NODES = (
    NODES + '  - {name: mig-2, allocatable: {nvidia.com/mig-1g.10gb: "14", '
    'nvidia.com/mig-3g.40gb: "4"}}\n'
)


def test_reclaim_evicts_borrowed_work_which_restarts_from_the_beginning(policy):
    result = run(policy, RECLAIM_SLICES, nodes=TWO_MIG_NODES, preemption=PRESETS["reclaim"])
    training = result.static.tenants["training"]
    inference = result.static.tenants["inference"]
    assert inference.mean_wait == 0  # its guarantee came back at once
    assert training.preempted == 2
    assert training.lost_gpu_seconds == pytest.approx(2 * SLICE_GPUS * 3600)  # 1h each
    # the two evicted jobs run again once inference is done (1h30), for their full 2h
    assert training.mean_wait == pytest.approx((0 + 0 + 5400 + 5400) / 4)
    assert training.served == pytest.approx(1.0)
    assert training.gpu_seconds == pytest.approx(SLICE_GPUS * (4 * 7200 + 2 * 3600))
    document = result_json(result)
    assert document["static"]["preempted"] == 2
    assert document["static"]["gpuHoursLost"] == pytest.approx(2 * SLICE_GPUS, abs=0.01)
    assert document["static"]["tenants"]["training"]["preempted"] == 2
    assert document["static"]["tenants"]["inference"]["preempted"] == 0
    assert "2 workloads (0.86 GPU-hours of work thrown away) in the static arm" in verdict(result)


def test_an_evicted_job_with_checkpoints_resumes_and_loses_only_the_work_since(policy):
    # as above, but training saves its progress every 25 minutes: evicted after 1h, each job
    # keeps 50m, loses 10m, and runs the remaining 1h10m from 1h30 on
    trace = RECLAIM_SLICES.replace(
        "namespace: training,", "namespace: training, checkpointEvery: 25m,"
    )
    assert "checkpointEvery" in trace
    result = run(policy, trace, nodes=TWO_MIG_NODES, preemption=PRESETS["reclaim"])
    training = result.static.tenants["training"]
    assert training.preempted == 2
    assert training.lost_gpu_seconds == pytest.approx(2 * SLICE_GPUS * 600)
    assert training.served == pytest.approx(1.0)
    assert training.gpu_seconds == pytest.approx(SLICE_GPUS * (2 * 7200 + 2 * 3600 + 2 * 4200))
    assert training.mean_wait == pytest.approx((0 + 0 + 5400 + 5400) / 4)
    starting_over = run(policy, RECLAIM_SLICES, nodes=TWO_MIG_NODES, preemption=PRESETS["reclaim"])
    assert starting_over.static.overall.lost_gpu_seconds == pytest.approx(2 * SLICE_GPUS * 3600)
    # the resumed runs end at 2h40 instead of 3h30: three more training jobs at 2h45 all fit
    # within training's max of four slices at once; after restarts one waits for another to end
    late = f"- {{at: 2h45m, duration: 30m, namespace: training, count: 3, pod: {TRAINING_32GI}}}\n"
    resumed = run(policy, trace + late, nodes=TWO_MIG_NODES, preemption=PRESETS["reclaim"])
    restarted = run(
        policy, RECLAIM_SLICES + late, nodes=TWO_MIG_NODES, preemption=PRESETS["reclaim"]
    )
    assert [resumed.runs["static"].admitted_at[i] for i in (6, 7, 8)] == [9900, 9900, 9900]
    assert [restarted.runs["static"].admitted_at[i] for i in (6, 7, 8)] == [9900, 9900, 11700]


def test_with_preemption_never_the_owner_waits_and_nothing_is_lost(policy):
    result = run(policy, RECLAIM_SLICES, nodes=TWO_MIG_NODES, preemption=PRESETS["never"])
    for metrics in (result.static, result.dynamic):
        assert metrics.overall.preempted == 0
        assert metrics.overall.lost_gpu_seconds == 0
    assert result.static.tenants["inference"].mean_wait == pytest.approx(3600)  # until 2h
    assert "Preemption is off" in verdict(result)


def test_both_arms_and_the_reference_share_the_preemption_setting(policy):
    result = run(policy, RECLAIM_SLICES, nodes=TWO_MIG_NODES, preemption=PRESETS["never"])
    assert result.setup.preemption == PRESETS["never"]
    document = result_json(result)
    assert document["preemption"]["setting"] == "never"
    assert document["reference"]["baseline"] == "pool"
    assert document["reference"]["preempted"] == 0


def test_a_higher_priority_workload_evicts_lower_priority_work_of_its_own_queue(policy):
    # The sample ClusterQueues' withinClusterQueue: LowerPriority. Static training holds its
    # guarantee of 16 H100s with two low-priority jobs; an urgent one takes the newer's place.
    trace = f"""\
- {{at: 0, duration: 2h, namespace: training, count: 2, every: 60, pod: {TRAINING_8}}}
- {{at: 10m, duration: 1h, namespace: training, priority: 100, pod: {TRAINING_8}}}
"""
    result = run(policy, trace, horizon="4h", preemption=PRESETS["reclaim"])
    training = result.static.tenants["training"]
    assert training.preempted == 1
    assert training.lost_gpu_seconds == pytest.approx(8 * (600 - 60))  # the one from 60s
    assert result.runs["static"].admitted_at[2] == 600  # the urgent job, at once
    assert result.runs["static"].admitted_at[1] == 600 + 3600  # evicted, back after it
    unchanged = run(policy, trace, horizon="4h", preemption=PRESETS["never"])
    assert unchanged.runs["static"].admitted_at[2] == 7200


def test_runs_with_preemption_are_deterministic(policy):
    first = run(policy, RECLAIM_SLICES + BURST, nodes=TWO_MIG_NODES, preemption=PRESETS["reclaim"])
    again = run(policy, RECLAIM_SLICES + BURST, nodes=TWO_MIG_NODES, preemption=PRESETS["reclaim"])
    assert first.static.overall.preempted > 0
    assert result_json(first) == result_json(again)
    assert first.runs["static"].admitted_at == again.runs["static"].admitted_at
    assert first.runs["dynamic"].lost == again.runs["dynamic"].lost


def slices_job(pods: int) -> str:
    """A training Job of `pods` pods, one 3g.40gb slice each."""
    spec = f"{{parallelism: {pods}, template: {TRAINING_32GI}}}"
    job = f"{{apiVersion: batch/v1, kind: Job, spec: {spec}}}"
    return f"- {{at: 0, duration: 1h, namespace: training, pod: {job}}}\n"


def fits_counts(metrics) -> tuple[int, int, int]:
    training = metrics.tenants["training"]
    return (training.never_fits, training.admitted, training.waiting)


def test_static_arm_admits_a_workload_that_fits_only_by_borrowing_other_queues_guarantees(policy):
    # training: guarantee 0, max 4 slices; inference's guarantee of 4 is lent (Kueue's default)
    # in the static arm. The pool and the controller never lend guarantees, and what is left
    # of 7 distributable slices above inference's 4 is 3: there it can never be admitted.
    result = run(policy, slices_job(4), nodes=TWO_MIG_NODES)
    assert fits_counts(result.static) == (0, 1, 0)
    assert result.static.tenants["training"].mean_wait == 0
    assert result.runs["static"].admitted_at == {0: 0.0}
    assert fits_counts(result.dynamic) == (1, 0, 0)
    assert result.reference is not None and fits_counts(result.reference) == (1, 0, 0)
    document = result_json(result)
    assert (document["static"]["neverFits"], document["dynamic"]["neverFits"]) == (0, 1)
    assert document["reference"]["neverFits"] == 1
    assert "can never be admitted (0 none, 0 static, 1 pool, 1 dynamic" in verdict(result)


def test_a_workload_bigger_than_its_queues_max_never_fits_in_any_arm(policy):
    result = run(policy, slices_job(5), nodes=TWO_MIG_NODES)  # max 4, 8 slices on the nodes
    assert result.reference is not None
    for metrics in (result.static, result.dynamic, result.reference):
        assert fits_counts(metrics) == (1, 0, 0)
        assert metrics.tenants["training"].mean_wait == 0


def test_static_capacity_above_the_guarantees_is_in_no_queue_so_more_never_fits(policy):
    # 24 H100s: training's guarantee is 16 and nobody else has H100 quota to lend it, so the
    # static arm can never admit it; the controller and the pool can (30 distributable).
    job = f"{{apiVersion: batch/v1, kind: Job, spec: {{parallelism: 3, template: {TRAINING_8}}}}}"
    result = run(policy, f"- {{at: 0, duration: 1h, namespace: training, pod: {job}}}\n")
    assert fits_counts(result.static) == (1, 0, 0)
    assert fits_counts(result.dynamic) == (0, 1, 0)
    assert result.reference is not None and fits_counts(result.reference) == (0, 1, 0)
