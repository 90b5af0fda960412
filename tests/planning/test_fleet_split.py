"""The fleet planner's invariants: no worker over its capacity, fleet guarantees kept while the
workers that answer have room, the manager's quota the sum of the workers', and a worker that
does not answer keeping its quotas."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.planning.fleet_split import FleetSplit, WorkerState, split_fleet
from quotaguard.policy.model import TenantPolicy
from tests.policies import policy

CLUSTERS = ("east", "west", "north")
TENANTS = ("alpha", "beta", "gamma")


def _fleet(clusters: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "clusters": [
            {
                "name": name,
                "kubeConfig": {"location": f"{name}-kubeconfig"},
                "tenants": (clusters or {}).get(name, {}),
            }
            for name in CLUSTERS
        ]
    }


@st.composite
def fleets(
    draw: st.DrawFn, *, cluster_caps: bool
) -> tuple[TenantPolicy, list[WorkerState], dict[str, dict[str, int]]]:
    tenants = []
    for name in TENANTS:
        guaranteed = draw(st.integers(0, 12))
        ceiling = draw(st.one_of(st.none(), st.integers(guaranteed, 40)))
        quota: dict[str, Any] = {"guaranteed": guaranteed}
        if ceiling is not None:
            quota["max"] = ceiling
        tenants.append({"name": name, "weight": draw(st.integers(1, 4)), "quota": {"h100": quota}})
    per_cluster: dict[str, dict[str, Any]] = {}
    if cluster_caps:
        for cluster in CLUSTERS:
            for tenant in TENANTS:
                if draw(st.booleans()):
                    per_cluster.setdefault(cluster, {})[tenant] = {
                        "h100": {"max": draw(st.integers(0, 10))}
                    }
    workers = [
        WorkerState(
            name,
            reachable=draw(st.booleans()),
            capacity={"h100": draw(st.integers(0, 24))},
            usage={t: {"h100": draw(st.integers(0, 8))} for t in TENANTS},
            quotas={t: {"h100": draw(st.integers(0, 8))} for t in TENANTS},
            reason="connection refused",
        )
        for name in CLUSTERS
    ]
    pending = {t: {"h100": draw(st.integers(0, 30))} for t in TENANTS}
    return policy(tenants, fleet=_fleet(per_cluster)), workers, pending


def _placed(split: FleetSplit, tenant: str, reachable: list[WorkerState]) -> int:
    return sum(split.workers[w.name].get(tenant, {}).get("h100", 0) for w in reachable)


@settings(max_examples=300, deadline=None)
@given(fleets(cluster_caps=True))
def test_no_worker_is_planned_over_its_capacity_nor_a_tenant_over_its_ceilings(case: Any) -> None:
    fleet_policy, workers, pending = case
    split = split_fleet(fleet_policy, workers, pending)
    assert fleet_policy.spec.fleet is not None
    for worker in workers:
        if not worker.reachable:
            continue
        planned = split.workers[worker.name]
        assert sum(q.get("h100", 0) for q in planned.values()) <= worker.capacity["h100"]
        for tenant in TENANTS:
            terms = fleet_policy.spec.fleet.cluster_quota(worker.name, tenant, "h100")
            if terms is not None and terms.max is not None:
                assert planned.get(tenant, {}).get("h100", 0) <= terms.max
    reachable = [w for w in workers if w.reachable]
    for tenant in TENANTS:
        ceiling = fleet_policy.tenants_by_name[tenant].quota["h100"].max
        if ceiling is not None:
            assert _placed(split, tenant, reachable) <= ceiling


@settings(max_examples=300, deadline=None)
@given(fleets(cluster_caps=False))
def test_fleet_guarantees_hold_on_the_workers_that_answer_while_they_have_room(case: Any) -> None:
    fleet_policy, workers, pending = case
    split = split_fleet(fleet_policy, workers, pending)
    reachable = [w for w in workers if w.reachable]
    room = sum(w.capacity["h100"] for w in reachable)
    guarantees = {t: fleet_policy.tenants_by_name[t].quota["h100"].guaranteed for t in TENANTS}
    if sum(guarantees.values()) <= room:
        for tenant, guaranteed in guarantees.items():
            assert _placed(split, tenant, reachable) >= guaranteed
        assert not split.problems
    else:
        assert any("scaled" in problem for problem in split.problems)


@settings(max_examples=300, deadline=None)
@given(fleets(cluster_caps=True))
def test_the_manager_holds_the_sum_and_an_unreachable_worker_keeps_its_quotas(case: Any) -> None:
    fleet_policy, workers, pending = case
    split = split_fleet(fleet_policy, workers, pending)
    reachable = [w for w in workers if w.reachable]
    for tenant in TENANTS:
        assert split.manager.get(tenant, {}).get("h100", 0) == _placed(split, tenant, reachable)
    for worker in workers:
        if not worker.reachable:
            assert split.workers[worker.name] == worker.quotas
            assert split.unreachable[worker.name] == "connection refused"
    assert split.capacity["h100"] == sum(w.capacity["h100"] for w in reachable)


def test_demand_on_the_manager_moves_quota_to_the_worker_with_room() -> None:
    fleet_policy = policy(
        [
            {"name": "alpha", "quota": {"h100": {"guaranteed": 2, "max": 16}}},
            {"name": "beta", "quota": {"h100": {"guaranteed": 2, "max": 16}}},
        ],
        fleet=_fleet(),
    )
    workers = [
        WorkerState("east", True, {"h100": 8}, usage={"beta": {"h100": 8}}),
        WorkerState("west", True, {"h100": 8}),
        WorkerState("north", True, {"h100": 0}),
    ]
    quiet = split_fleet(fleet_policy, workers, {})
    busy = split_fleet(fleet_policy, workers, {"alpha": {"h100": 6}})
    assert quiet.workers["east"]["beta"]["h100"] == 8  # where beta's work runs
    assert busy.workers["west"]["alpha"]["h100"] >= 6
    assert busy.workers["east"]["beta"]["h100"] == 8
    assert busy.manager["alpha"]["h100"] == busy.workers["west"]["alpha"]["h100"]


def test_a_worker_down_moves_a_guarantee_to_the_others() -> None:
    fleet_policy = policy(
        [
            {"name": "alpha", "quota": {"h100": {"guaranteed": 6}}},
            {"name": "beta", "quota": {"h100": {"guaranteed": 2}}},
        ],
        fleet=_fleet(),
    )
    up = [
        WorkerState("east", True, {"h100": 8}, usage={"alpha": {"h100": 6}}),
        WorkerState("west", True, {"h100": 8}),
    ]
    before = split_fleet(fleet_policy, up, {})
    assert before.workers["east"]["alpha"]["h100"] >= 6
    down = [
        WorkerState("east", False, quotas=before.workers["east"], reason="timed out"),
        up[1],
    ]
    after = split_fleet(fleet_policy, down, {})
    assert after.workers["east"] == before.workers["east"]
    assert after.workers["west"]["alpha"]["h100"] >= 6
    assert after.workers["west"]["beta"]["h100"] >= 2
    assert after.unreachable == {"east": "timed out"}


def test_a_per_cluster_guarantee_is_placed_on_its_cluster() -> None:
    fleet_policy = policy(
        [{"name": "alpha", "quota": {"h100": {"guaranteed": 4, "max": 4}}}],
        fleet=_fleet({"north": {"alpha": {"h100": {"guaranteed": 3}}}}),
    )
    workers = [WorkerState(name, True, {"h100": 8}) for name in CLUSTERS]
    split = split_fleet(fleet_policy, workers, {})
    assert split.workers["north"]["alpha"]["h100"] >= 3
    assert split.manager["alpha"]["h100"] == 4
