"""The Prometheus series of the quota report: what a dashboard sums and joins with Kueue's."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from quotaguard.metrics.controller_metrics import (
    QUOTA_LABELS,
    WATCH_SERIES,
    class_facts,
    leadership_changed,
    publish_report,
    quota_families,
    record_writes,
)
from quotaguard.metrics.registry import REGISTRY
from quotaguard.policy.loader import load_policy_text
from quotaguard.quota.class_capacity import capacities_from_totals
from quotaguard.quota.demand import ClassDemand
from quotaguard.quota.quota_planner import plan
from quotaguard.quota.quota_report import build_report

POLICY = load_policy_text(
    """
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {name: metrics}
spec:
  cohort: gpu-pool
  gpuClasses:
    - {name: h100, resource: nvidia.com/gpu, memory: 80Gi, flavor: h100-whole}
    - {name: mig, resource: nvidia.com/mig-1g.10gb, memory: 10Gi, slices: 1}
  tenants:
    - {name: research, namespaces: [research], queue: research-cq,
       quota: {h100: {guaranteed: 4, max: 16}}}
    - {name: serving, namespaces: [serving], weight: 2,
       quota: {mig: {guaranteed: 7}, h100: {guaranteed: 2, max: 8}}}
""",
    "metrics.yaml",
)


def a_report(research_usage: int = 6) -> dict[str, Any]:
    capacity = capacities_from_totals(POLICY, {"h100": 16, "mig": 14}, {})
    wanted = {"research": {"h100": ClassDemand(usage=research_usage, pending=3)}}
    report = build_report(plan(POLICY, capacity, wanted))
    row = report["tenants"][0]["classes"][0]
    row["current"] = {"nominal": 4, "borrowingLimit": 12, "lendingLimit": 0}
    return report


def samples(report: dict[str, Any]) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in quota_families(report, class_facts(POLICY)):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def value(series: list[tuple[dict[str, str], float]], **labels: str) -> float:
    (found,) = [v for got, v in series if all(got.get(k) == w for k, w in labels.items())]
    return found


def test_quota_series_carry_the_labels_kueue_uses_and_a_gpu_equivalent() -> None:
    series = samples(a_report())
    for name in ("quotaguard_quota_nominal", "quotaguard_quota_usage_gpus"):
        for labels, _ in series[name]:
            assert tuple(labels) == QUOTA_LABELS
            assert labels["cohort"] == "gpu-pool"
    nominal = series["quotaguard_quota_nominal"]
    assert value(nominal, tenant="research", cluster_queue="research-cq", flavor="h100-whole")
    guaranteed = series["quotaguard_quota_guaranteed"]
    mig_units = value(guaranteed, tenant="serving", resource="nvidia.com/mig-1g.10gb")
    mig_gpus = value(
        series["quotaguard_quota_guaranteed_gpus"], tenant="serving", **{"class": "mig"}
    )
    assert mig_units == 7 and mig_gpus == 1.0  # seven 1g slices are one GPU
    # Whole GPUs: the companion is the same number, so a sum over classes is in GPUs.
    research = value(nominal, tenant="research", **{"class": "h100"})
    gpus = value(series["quotaguard_quota_nominal_gpus"], tenant="research", **{"class": "h100"})
    assert gpus == research


def test_current_value_and_recommendation_side_by_side() -> None:
    series = samples(a_report())
    h100 = {"tenant": "research", "class": "h100"}
    target = value(series["quotaguard_quota_nominal"], **h100)
    current = value(series["quotaguard_quota_current_nominal"], **h100)
    assert current == 4 and target != current
    assert value(series["quotaguard_quota_current_borrowing_limit"], **h100) == 12
    # A queue that was not read (no `current`) has no current series, not a made-up zero.
    assert {labels["tenant"] for labels, _ in series["quotaguard_quota_current_nominal"]} == {
        "research"
    }


def test_capacity_and_guarantees_per_class() -> None:
    series = samples(a_report())
    assert value(series["quotaguard_class_capacity"], **{"class": "mig"}) == 14
    assert value(series["quotaguard_class_capacity_gpus"], **{"class": "mig"}) == 2.0
    assert value(series["quotaguard_class_guaranteed"], **{"class": "h100"}) == 6
    capacity = series["quotaguard_class_capacity"]
    assert value(capacity, **{"class": "h100"}, flavor="h100-whole", resource="nvidia.com/gpu")


def scraped(name: str) -> list[tuple[dict[str, str], float]]:
    text = generate_latest(REGISTRY).decode()
    return [
        (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def test_only_the_leader_publishes_quota_series_and_a_tenant_that_left_has_none() -> None:
    publish_report(a_report(), POLICY, leader=True, at=1000.0, interval=60)
    assert scraped("quotaguard_quota_nominal")
    without = {**a_report(), "tenants": a_report()["tenants"][1:]}
    publish_report(without, POLICY, leader=True, at=1060.0, interval=60)
    assert {labels["tenant"] for labels, _ in scraped("quotaguard_quota_nominal")} == {"serving"}
    assert scraped("quotaguard_controller_last_plan_timestamp_seconds") == [({}, 1060.0)]
    leadership_changed(False)
    assert scraped("quotaguard_quota_nominal") == []
    assert scraped("quotaguard_controller_leader") == [({}, 0.0)]
    publish_report(a_report(), POLICY, leader=False, at=1120.0, interval=60)
    assert scraped("quotaguard_quota_nominal") == []  # the standby plans but does not publish
    assert scraped("quotaguard_controller_last_plan_timestamp_seconds") == [({}, 1120.0)]


@dataclass(frozen=True)
class Outcome:
    result: str


def test_last_write_moves_only_when_a_queue_changed() -> None:
    record_writes([Outcome("updated")], at=500.0)
    record_writes([Outcome("unchanged"), Outcome("conflict")], at=600.0)
    assert scraped("quotaguard_controller_last_write_timestamp_seconds") == [({}, 500.0)]


def test_build_info_and_no_created_series() -> None:
    ((labels, one),) = scraped("quotaguard_build_info")
    assert one == 1 and labels["version"]
    text = generate_latest(REGISTRY).decode()
    assert "_created" not in text
    for family in text_string_to_metric_families(text):
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples), family.name


@dataclass
class Counts:
    lists: int = 0
    events: int = 0
    skipped_lines: int = 0
    gone: int = 0
    errors: int = 0


@dataclass
class FakeWatch:
    name: str
    resource_version: str | None = None
    synced: bool = True
    stats: Counts = field(default_factory=Counts)


@pytest.fixture
def watches() -> Iterator[dict[str, FakeWatch]]:
    live: dict[str, FakeWatch] = {}
    WATCH_SERIES.read_from(lambda: tuple(live.values()))
    yield live
    WATCH_SERIES.read_from(None)


def by_resource(name: str) -> dict[str, float]:
    return {labels["resource"]: v for labels, v in scraped(name)}


def test_watch_series_are_each_watchs_counters_as_they_are_when_scraped(
    watches: dict[str, FakeWatch],
) -> None:
    pods = FakeWatch("pods", "123456789012", stats=Counts(2, 900, 40, 1, 3))
    watches["pods"] = pods
    watches["nodes"] = FakeWatch("nodes", "77", synced=False, stats=Counts(lists=1, events=5))
    assert by_resource("quotaguard_watch_events_total") == {"pods": 900, "nodes": 5}
    assert by_resource("quotaguard_watch_skipped_events_total") == {"pods": 40, "nodes": 0}
    assert by_resource("quotaguard_watch_lists_total") == {"pods": 2, "nodes": 1}
    restarts = scraped("quotaguard_watch_restarts_total")
    assert value(restarts, resource="pods", reason="gone") == 1
    assert value(restarts, resource="pods", reason="error") == 3
    versions = by_resource("quotaguard_watch_resource_version")
    assert versions == {"pods": 123456789012, "nodes": 77}
    assert by_resource("quotaguard_watch_synced") == {"pods": 1, "nodes": 0}
    pods.stats.events, pods.resource_version = 950, "123456789099"
    assert by_resource("quotaguard_watch_events_total")["pods"] == 950
    assert by_resource("quotaguard_watch_resource_version")["pods"] == 123456789099


@pytest.mark.parametrize("opaque", [None, "", "abc", "12a", "-5", "1.5", "٣"])
def test_a_resource_version_that_is_no_integer_has_no_series(
    watches: dict[str, FakeWatch], opaque: str | None
) -> None:
    watches["workloads"] = FakeWatch("workloads", opaque, stats=Counts(events=3))
    watches["nodes"] = FakeWatch("nodes", "42")
    assert by_resource("quotaguard_watch_resource_version") == {"nodes": 42}
    assert by_resource("quotaguard_watch_events_total") == {"workloads": 3, "nodes": 0}


def test_a_watch_the_controller_dropped_has_no_series(watches: dict[str, FakeWatch]) -> None:
    watches["pods"] = FakeWatch("pods", "10")
    watches["clusterqueues"] = FakeWatch("clusterqueues", "11")
    del watches["pods"]
    for name in ("quotaguard_watch_events_total", "quotaguard_watch_synced"):
        assert set(by_resource(name)) == {"clusterqueues"}
    watches.clear()
    assert scraped("quotaguard_watch_synced") == []


def test_watch_series_asked_for_by_name_are_served_without_the_rest(
    watches: dict[str, FakeWatch],
) -> None:
    watches["pods"] = FakeWatch("pods", "991", stats=Counts(events=12))
    names = ["quotaguard_watch_events_total", "quotaguard_watch_resource_version"]
    text = generate_latest(REGISTRY.restricted_registry(names)).decode()
    found = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert found == {
        "quotaguard_watch_events_total": 12,
        "quotaguard_watch_resource_version": 991,
    }
