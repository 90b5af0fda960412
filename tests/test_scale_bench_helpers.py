"""The scale bench's own arithmetic (bench/bench_scale_e2e.py, bench/pyspy_profile.py): the
convergence check counts what the step limit allows and reads the controller's report as it is
shaped; the profile summary adds up py-spy's stacks."""

from __future__ import annotations

from typing import Any

from bench.bench_scale_e2e import (
    burst_demand,
    implied_by,
    not_landed,
    off_target,
    on_capacity,
    own_time,
    per_interval,
    pod_tenant,
    steps_to,
    watch_events,
    watch_version,
    webhook_latencies,
)
from bench.pyspy_profile import summarize

REBALANCE = {"maxStepPercent": 25, "minChange": 1}


def report(*rows: tuple[str, int, int, int | None]) -> dict[str, Any]:
    """(queue, held, planned nominal, target) per tenant."""
    return {
        "tenants": [
            {
                "queue": queue,
                "classes": [
                    {
                        "class": "h100",
                        "nominal": nominal,
                        "target": target,
                        "current": None if held is None else {"nominal": held},
                    }
                ],
            }
            for queue, held, nominal, target in rows
        ]
    }


def test_steps_follow_the_step_limit_both_ways() -> None:
    assert steps_to(20, 20, REBALANCE) == 0
    assert steps_to(20, 25, REBALANCE) == 1  # 25% of 20
    assert steps_to(20, 40, REBALANCE) == 4  # 20 -> 25 -> 31 -> 38 -> 40
    assert steps_to(3, 4, REBALANCE) == 1  # at least minChange
    assert steps_to(40, 20, REBALANCE) == 3  # 40 -> 30 -> 23 -> 20


def test_the_slowest_queue_sets_the_implied_intervals() -> None:
    plan = report(("a", 20, 25, 40), ("b", 10, 10, 10), ("c", None, 5, 5))
    assert implied_by(plan, REBALANCE) == steps_to(20, 40, REBALANCE)
    assert off_target(plan) == ["a/h100: 25 -> 40"]
    written = report(("a", 20, 25, 40))
    assert not_landed(report(("a", 25, 31, 40)), written) == []
    assert not_landed(report(("a", 20, 25, 40)), written) == ["a/h100: holds 20, written 25"]


def test_profile_shares_count_self_and_inclusive_time_once_per_stack() -> None:
    collapsed = "\n".join(
        [
            'process 1:"python";thread (0x1);main (/x/quotaguard/controller/loop.py:10);'
            "plan (/x/quotaguard/quota/planner.py:5) 3",
            "main (/x/quotaguard/controller/loop.py:10);main (/x/quotaguard/controller/loop.py:12)"
            ";loads (/usr/lib/python3.11/json/__init__.py:346) 1",
        ]
    )
    found = summarize(collapsed)
    assert found["samples"] == 4
    assert dict(found["self_percent"]) == {
        "plan (quotaguard/quota/planner.py)": 75.0,
        "loads (json/__init__.py)": 25.0,
    }
    assert dict(found["inclusive_percent"])["main (quotaguard/controller/loop.py)"] == 100.0


HOOK = "apiserver_admission_webhook_admission_duration_seconds_bucket"


def buckets(name: str, kind: str, counts: dict[str, int]) -> str:
    labels = f'name="{name}",operation="CREATE",rejected="false",type="{kind}"'
    return "".join(f'{HOOK}{{{labels},le="{le}"}} {n}\n' for le, n in counts.items())


def test_added_latency_is_read_per_quotaguard_webhook_from_the_api_servers_histogram() -> None:
    before = buckets("pods.mutate.quotaguard.dev", "admit", {"0.005": 50, "0.025": 50, "+Inf": 50})
    after = (
        buckets("pods.mutate.quotaguard.dev", "admit", {"0.005": 150, "0.025": 250, "+Inf": 250})
        + buckets("pods.validate.quotaguard.dev", "validating", {"0.005": 100, "+Inf": 100})
        + buckets("pod-webhook.kueue", "admit", {"0.005": 0, "+Inf": 100})  # not ours
    )
    found, added = webhook_latencies(before, after, created=100)
    assert set(found) == {"pods.mutate.quotaguard.dev", "pods.validate.quotaguard.dev"}
    mutate = found["pods.mutate.quotaguard.dev"]
    assert mutate["calls"] == 200  # only the phase's calls: 250 - 50
    assert mutate["p50_ms"] == 5.0 and 20 < mutate["p99_ms"] <= 25
    # two mutating calls and one validating call per Pod: their p99s added up
    assert added == round(2 * mutate["p99_ms"] + found["pods.validate.quotaguard.dev"]["p99_ms"], 2)
    assert webhook_latencies(before, before, created=100) == ({}, None)
    yardstick, _ = webhook_latencies(before, after, created=100, owner=".kueue")
    assert (
        set(yardstick) == {"pod-webhook.kueue"} and yardstick["pod-webhook.kueue"]["calls"] == 100
    )


def test_a_row_spanning_two_plans_counts_as_two_intervals() -> None:
    summary = per_interval(
        [
            {"intervals": 1, "writes": 4, "cpu_s": 0.4, "seconds": 5.0, "plan_cpu_s": 0.1},
            {"intervals": 2, "writes": 2, "cpu_s": 1.2, "seconds": 10.0, "plan_cpu_s": 0.4},
            {"intervals": 1, "writes": 0, "cpu_s": 0.2, "seconds": 5.0, "plan_cpu_s": 0.3},
        ]
    )
    assert summary["intervals"] == 4
    assert summary["writes"] == {"median": 1.0, "max": 4.0}
    assert summary["cpu_s"] == {"median": 0.6, "max": 0.6}  # 0.2, 0.4, 0.6, 0.6
    assert summary["plan_cpu_s"] == {"median": 0.2, "max": 0.3}  # 0.1, 0.2, 0.2, 0.3
    assert per_interval([])["writes"] == {"median": None, "max": None}


def test_the_burst_tenant_gets_no_steady_state_or_churn_pods() -> None:
    assert sorted({pod_tenant(serial, 4) for serial in range(12)}) == [1, 2, 3]


def test_the_burst_tenants_demand_is_what_runs_and_what_waits() -> None:
    plan = {
        "tenants": [
            {
                "queue": "t000",
                "classes": [{"class": "h100", "usage": 12, "pending": 28, "target": 40}],
            },
            {"queue": "t003", "classes": [{"class": "h100", "usage": 90, "pending": 9}]},
        ]
    }
    assert burst_demand(plan) == {"demand": 40, "target": 40}
    assert burst_demand({"tenants": []}) == {"demand": 0, "target": 0}


def test_a_plan_is_on_the_new_capacity_only_when_every_class_matches() -> None:
    arrived = on_capacity({"h100": 8640, "shared": 144})
    assert arrived({"h100": 8640, "shared": 144, "h100-1g.10gb": 3780})
    assert not arrived({"h100": 9600, "shared": 144})
    assert not arrived({"shared": 144})


WATCH = (
    'quotaguard_watch_events_total{resource="pods"} 120.0\n'
    'quotaguard_watch_events_total{resource="nodes"} 7.0\n'
    'quotaguard_watch_resource_version{resource="pods"} 9876.0\n'
    'quotaguard_watch_resource_version{resource="nodes"} 12.0\n'
)


def test_watch_events_and_versions_are_read_per_resource() -> None:
    assert watch_events(WATCH) == {"pods": 120.0, "nodes": 7.0}
    assert watch_version(WATCH) == 9876.0
    assert watch_version(WATCH, "nodes") == 12.0
    assert watch_version(WATCH, "workloads") is None


def own(counts: dict[str, int]) -> str:
    name = "quotaguard_admission_duration_seconds_bucket"
    return "".join(f'{name}{{operation="CREATE",le="{le}"}} {n}\n' for le, n in counts.items())


def test_the_webhooks_own_time_adds_up_the_replicas_over_the_phase() -> None:
    before = [own({"0.001": 10, "0.01": 10, "+Inf": 10}), own({"0.001": 0, "0.01": 0, "+Inf": 0})]
    after = [own({"0.001": 60, "0.01": 60, "+Inf": 60}), own({"0.001": 48, "0.01": 50, "+Inf": 50})]
    p50, p99 = own_time(before, after)
    assert p50 is not None and p50 <= 1.0  # 98 of the phase's 100 answers within 1 ms
    assert p99 is not None and 1.0 < p99 <= 10.0
    assert own_time(before, before) == [None, None]
