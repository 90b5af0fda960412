"""Faulty GPUs (with their quiet period) and idle pods, judged from DCGM series."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.policy.model import GpuHealth, Rebalance
from quotaguard.telemetry.facts import judge
from quotaguard.telemetry.health import HealthMemory, judge_health
from quotaguard.telemetry.idle import judge_idle
from quotaguard.telemetry.series import (
    ECC_DBE_VOLATILE,
    GPU_UTIL,
    GR_ENGINE_ACTIVE,
    ROW_REMAP_FAILURE,
    UNCORRECTABLE_REMAPPED_ROWS,
    XID,
    Series,
)
from tests.telemetry.builders import dcgm_labels, metrics, ramp, series

NODES = frozenset({"n1", "n2"})
QUIET = GpuHealth(quiet_period=300)


def faulty(
    found: object,
    settings: GpuHealth = QUIET,
    memory: HealthMemory | None = None,
    now: float | None = None,
):  # type: ignore[no-untyped-def]
    verdict, memory = judge_health(found, nodes=NODES, settings=settings, memory=memory, now=now)  # type: ignore[arg-type]
    return [(g.node, g.gpu, g.reason) for g in verdict.faulty], memory


def test_critical_xid_takes_out_its_gpu_and_ignored_ones_do_not() -> None:
    found = metrics(
        series(XID, dcgm_labels("n1", 3), (100, 79)),
        series(XID, dcgm_labels("n1", 4), (100, 13)),  # an application error
        series(XID, dcgm_labels("n2", 0, hostname_key="hostname"), (100, 48)),
        series(XID, dcgm_labels("n2", 1), (100, 0)),
    )
    rows, _ = faulty(found)
    assert rows == [("n1", "3", "XID 79"), ("n2", "0", "XID 48")]
    only_79, _ = faulty(found, GpuHealth(critical_xids=[79]))
    assert only_79 == [("n1", "3", "XID 79")]


def test_row_remap_failure_dbe_errors_and_growing_remapped_rows() -> None:
    found = metrics(
        series(ROW_REMAP_FAILURE, dcgm_labels("n1", 0), (100, 1)),
        series(ECC_DBE_VOLATILE, dcgm_labels("n1", 1), (100, 2)),
        series(UNCORRECTABLE_REMAPPED_ROWS, dcgm_labels("n1", 2), (90, 1), (100, 2)),
        series(UNCORRECTABLE_REMAPPED_ROWS, dcgm_labels("n1", 3), (90, 4), (100, 4)),
    )
    rows, _ = faulty(found)
    assert rows == [
        ("n1", "0", "row remapping failed"),
        ("n1", "1", "2 double-bit ECC errors"),
        ("n1", "2", "uncorrectable remapped rows grew to 2"),
    ]


def test_remapped_rows_growth_across_two_scrapes_is_seen_through_the_memory() -> None:
    first = metrics(series(UNCORRECTABLE_REMAPPED_ROWS, dcgm_labels("n1", 0), (100, 3)))
    rows, memory = faulty(first)
    assert rows == []
    second = metrics(series(UNCORRECTABLE_REMAPPED_ROWS, dcgm_labels("n1", 0), (160, 4)))
    rows, _ = faulty(second, memory=memory)
    assert rows == [("n1", "0", "uncorrectable remapped rows grew to 4")]


def test_a_gpu_comes_back_only_after_the_quiet_period() -> None:
    labels = dcgm_labels("n1", 3)
    rows, memory = faulty(metrics(series(XID, labels, (100, 79))))
    assert rows == [("n1", "3", "XID 79")]
    # The XID is cleared (GPU reset): still out for the rest of the quiet period.
    rows, memory = faulty(metrics(series(XID, labels, (200, 0))), memory=memory)
    assert rows == [("n1", "3", "XID 79, 200s of quiet period left")]
    rows, memory = faulty(metrics(series(XID, labels, (399, 0))), memory=memory)
    assert [r[:2] for r in rows] == [("n1", "3")]
    rows, memory = faulty(metrics(series(XID, labels, (400, 0))), memory=memory)
    assert rows == [] and memory.last_fault == {}


def test_a_range_query_alone_carries_the_quiet_period() -> None:
    labels = dcgm_labels("n1", 3)
    history = [*ramp(0, 100, 10, 79), *ramp(110, 300, 10, 0)]
    rows, _ = faulty(metrics(Series(XID, labels, tuple(history))))
    assert rows == [("n1", "3", "XID 79, 100s of quiet period left")]


def test_mig_instances_of_a_faulty_gpu_are_counted_per_profile() -> None:
    found = metrics(
        series(XID, dcgm_labels("n1", 0, mig=("1g.10gb", 7)), (100, 94)),
        series(XID, dcgm_labels("n1", 0, mig=("1g.10gb", 8)), (100, 0)),
        series(XID, dcgm_labels("n1", 0, mig=("3g.40gb", 1)), (100, 0)),
        series(XID, dcgm_labels("n1", 1, mig=("1g.10gb", 7)), (100, 0)),
    )
    verdict, _ = judge_health(found, nodes=NODES, settings=QUIET)
    assert [(g.gpu, dict(g.mig_instances)) for g in verdict.faulty] == [
        ("0", {"1g.10gb": 2, "3g.40gb": 1})
    ]


def test_unlabelled_and_unknown_node_series_are_counted_not_trusted() -> None:
    found = metrics(
        series(XID, {"gpu": "0", "UUID": "GPU-x"}, (100, 79)),
        series(XID, dcgm_labels("elsewhere", 0), (100, 79)),
    )
    verdict, _ = judge_health(found, nodes=NODES, settings=QUIET)
    assert verdict.faulty == ()
    assert verdict.warnings == {"missing labels": 1, "unknown node": 1}


def test_a_pod_idle_for_idle_for_is_idle_and_a_busy_sample_breaks_it() -> None:
    notebook = dcgm_labels("n1", 0, pod=("nb", "notebook-0"))
    trainer = dcgm_labels("n1", 1, pod=("train", "job-0"))
    short = dcgm_labels("n1", 2, pod=("nb", "notebook-1"))
    found = metrics(
        Series(GR_ENGINE_ACTIVE, notebook, tuple(ramp(0, 1800, 60, 0.03))),
        Series(GR_ENGINE_ACTIVE, trainer, (*ramp(0, 1700, 60, 0.01), (1800, 0.9))),
        Series(GR_ENGINE_ACTIVE, short, tuple(ramp(1200, 1800, 60, 0.0))),
    )
    pods = judge_idle(found, idle_below=5, idle_for=1800, nodes=NODES)
    assert {key: pod.idle for key, pod in pods.items()} == {
        ("nb", "notebook-0"): True,
        ("nb", "notebook-1"): False,  # seen for 10 minutes only
        ("train", "job-0"): False,
    }
    assert pods[("nb", "notebook-0")].idle_seconds == 1800
    assert pods[("nb", "notebook-0")].mean_percent == 3.0


def test_every_gpu_of_a_pod_must_be_idle_and_gpu_util_stands_in_for_gr_engine() -> None:
    half = [dcgm_labels("n1", g, pod=("t", "two-gpus")) for g in (0, 1)]
    util_only = dcgm_labels("n2", 0, pod=("t", "util"))
    found = metrics(
        series(GR_ENGINE_ACTIVE, half[0], (100, 0.0)),
        series(GR_ENGINE_ACTIVE, half[1], (100, 0.6)),
        series(GPU_UTIL, half[1], (100, 0)),  # GR engine activity wins where both exist
        series(GPU_UTIL, util_only, (100, 2)),
        single_sample=True,
    )
    pods = judge_idle(found, idle_below=5, idle_for=1800, nodes=NODES)
    assert pods[("t", "two-gpus")].idle is False
    assert pods[("t", "util")].idle is True and pods[("t", "util")].single_sample


def test_facts_from_a_single_scrape_say_how_idleness_was_judged() -> None:
    found = metrics(
        series(GR_ENGINE_ACTIVE, dcgm_labels("n1", 0, pod=("nb", "a")), (100, 0.0)),
        series(XID, dcgm_labels("n1", 1), (100, 79)),
        single_sample=True,
    )
    facts, _ = judge(found, nodes=NODES, rebalance=Rebalance())
    assert facts.idle_pods == {("nb", "a")}
    assert (
        facts.summary()["note"] == "idleness judged on a single sample per series, not over idleFor"
    )
    assert facts.summary()["faultyGpus"] == 1


labels_strategy = st.dictionaries(
    st.sampled_from(
        ["gpu", "UUID", "Hostname", "hostname", "namespace", "pod", "GPU_I_ID", "GPU_I_PROFILE"]
    ),
    st.sampled_from(["", "0", "1", "n1", "n2", "x", "1g.10gb"]),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [XID, ROW_REMAP_FAILURE, UNCORRECTABLE_REMAPPED_ROWS, GR_ENGINE_ACTIVE, GPU_UTIL]
            ),
            labels_strategy,
            st.lists(
                st.tuples(st.floats(0, 1000), st.floats(-1e9, 1e9, allow_nan=False)),
                min_size=1,
                max_size=5,
            ),
        ),
        max_size=12,
    ),
    st.floats(0, 2000),
)
def test_faults_are_only_on_known_nodes_and_the_memory_forgets_after_the_quiet_period(
    raw: list[tuple[str, dict[str, str], list[tuple[float, float]]]], now: float
) -> None:
    found = metrics(*(Series(m, labels, tuple(sorted(points))) for m, labels, points in raw))
    facts, memory = judge(found, nodes=NODES, rebalance=Rebalance(), now=now)
    assert all(gpu.node in NODES for gpu in facts.faulty)
    assert all(
        now - at < Rebalance().gpu_health.quiet_period for at, _ in memory.last_fault.values()
    )
    later, _ = judge(metrics(), nodes=NODES, rebalance=Rebalance(), memory=memory, now=now + 10_000)
    assert later.faulty == ()


def test_labels_renamed_by_a_scrape_that_has_its_own_name_the_workload() -> None:
    # A ServiceMonitor scrape without honorLabels: namespace/pod are the exporter's own pod,
    # the exporter's labels come as exported_*.
    relabelled = {
        **dcgm_labels("n1", 0),
        "namespace": "gpu-operator",
        "pod": "nvidia-dcgm-exporter-x7k2p",
        "exported_namespace": "nb",
        "exported_pod": "notebook-0",
        "exported_container": "main",
    }
    found = metrics(series(GR_ENGINE_ACTIVE, relabelled, (100, 0.0)), single_sample=True)
    pods = judge_idle(found, idle_below=5, idle_for=1800, nodes=NODES)
    assert list(pods) == [("nb", "notebook-0")] and pods[("nb", "notebook-0")].idle


def test_activity_of_pods_the_cluster_does_not_have_is_dropped() -> None:
    # Under a scrape that does not honour the exporter's labels, a GPU nobody holds carries the
    # exporter pod's own namespace/pod: not an allocation, and not a warning either.
    exporter_pod = {**dcgm_labels("n1", 1), "namespace": "gpu-operator", "pod": "dcgm-x7k2p"}
    found = metrics(
        series(GR_ENGINE_ACTIVE, dcgm_labels("n1", 0, pod=("nb", "a")), (100, 0.0)),
        series(GR_ENGINE_ACTIVE, exporter_pod, (100, 0.0)),
        single_sample=True,
    )
    everything, _ = judge(found, nodes=NODES, rebalance=Rebalance())
    assert everything.idle_pods == {("nb", "a"), ("gpu-operator", "dcgm-x7k2p")}
    facts, _ = judge(found, nodes=NODES, rebalance=Rebalance(), pods=[("nb", "a")])
    assert facts.idle_pods == {("nb", "a")} and facts.summary()["idlePods"] == 1
    assert facts.warnings == {}
