"""The layout planner on worked examples: what a platform team would see in `quotaguard plan`."""

from __future__ import annotations

from quotaguard.geometry.layout_planner import plan_layouts
from quotaguard.geometry.progress import CHANGED_AT_ANNOTATION, PROGRESS_ANNOTATION, Progress

from .helpers import demand, node, pod, policy, views

NOW = 100_000.0


def test_small_slice_demand_moves_one_node_to_all_1g():
    the_policy = policy()
    nodes = [node(f"n{i}") for i in range(4)]
    # 4 balanced nodes offer 64 x 1g; 120 are wanted, nothing else: two all-1g nodes (+40
    # each) cover it, a third would serve no more.
    result = plan_layouts(
        the_policy, views(the_policy, nodes), demand(small={"mig-1g": 120}), now=NOW
    )
    targets = {n.name: (n.target, n.action) for n in result.nodes}
    assert list(targets.values()).count(("all-1g.10gb", "start")) == 1  # maxChanging 1
    assert sorted(target or "" for target, _ in targets.values()) == [
        "all-1g.10gb",
        "all-1g.10gb",
        "all-balanced",
        "all-balanced",
    ]
    first = next(n for n in result.nodes if n.action == "start")
    assert "all-1g.10gb serves" in first.reason and "mig-1g +40" in first.reason
    assert result.out_of_capacity == {first.name}
    waiting = [n for n in result.nodes if n.action == "wait"]
    assert len(waiting) == 1 and "maxChanging 1 of pool a100 reached" in waiting[0].reason


def test_demand_that_fits_keeps_every_layout():
    the_policy = policy()
    nodes = [node(f"n{i}") for i in range(2)]
    result = plan_layouts(
        the_policy,
        views(the_policy, nodes),
        demand(small={"mig-1g": 20}, large={"mig-3g": 10}),
        now=NOW,
    )
    assert {n.action for n in result.nodes} == {"keep"}
    assert result.changes == ()


def test_a_change_must_gain_a_whole_gpu():
    the_policy = policy()
    nodes = [node("n0")]
    # 16 x 1g offered, 17 wanted: all-1g.10gb would serve 1/7 GPU more, and lose the rest.
    result = plan_layouts(
        the_policy, views(the_policy, nodes), demand(small={"mig-1g": 17}), now=NOW
    )
    assert result.nodes[0].action == "keep"


def test_guarantees_stay_coverable():
    tenants = [
        {"name": "small", "quota": {"mig-1g": {"guaranteed": 0}}},
        {"name": "large", "quota": {"mig-3g": {"guaranteed": 8}}},
    ]
    the_policy = policy(tenants, maxChanging=4)
    nodes = [node(f"n{i}") for i in range(2)]
    # Each balanced node offers 8 x 3g; the guarantee of 8 needs one of them to stay balanced
    # (or go all-3g), even though 1g demand alone would take both.
    result = plan_layouts(
        the_policy, views(the_policy, nodes), demand(small={"mig-1g": 200}), now=NOW
    )
    targets = sorted(n.target or "" for n in result.nodes)
    assert targets == ["all-1g.10gb", "all-balanced"]


def test_guarantees_stay_coverable_while_nodes_change():
    tenants = [
        {"name": "small", "quota": {"mig-1g": {"guaranteed": 0}}},
        {"name": "large", "quota": {"mig-3g": {"guaranteed": 8}}},
    ]
    the_policy = policy(tenants, maxChanging=4)
    nodes = [node("a", "all-3g.40gb"), node("b", "all-3g.40gb")]
    # Ending with one all-1g node is fine, but while it changes the other must cover 8 x 3g:
    # it does (16), so the change starts.
    result = plan_layouts(
        the_policy, views(the_policy, nodes), demand(small={"mig-1g": 100}), now=NOW
    )
    assert [n.action for n in result.nodes].count("start") == 1
    # With one node of 3g only, nothing may change: the guarantee needs it now and later.
    alone = plan_layouts(
        the_policy,
        views(the_policy, [node("a", "all-3g.40gb", gpus=4)]),
        demand(small={"mig-1g": 100}),
        now=NOW,
    )
    assert alone.nodes[0].action == "keep"


def test_min_dwell_and_busy_nodes_wait():
    the_policy = policy(maxChanging=4)
    recent = {CHANGED_AT_ANNOTATION: str(NOW - 60)}
    nodes = [node("fresh", annotations=recent), node("busy")]
    result = plan_layouts(
        the_policy,
        views(the_policy, nodes, [pod("busy")]),
        demand(small={"mig-1g": 200}),
        now=NOW,
    )
    by_name = {n.name: n for n in result.nodes}
    # Changed a minute ago: kept as it is (not even retargeted) until minDwell has passed.
    fresh = by_name["fresh"]
    assert fresh.action == "keep" and fresh.target == fresh.current
    assert "minDwell" in fresh.reason
    assert by_name["busy"].action == "wait" and "drain is idle-only" in by_name["busy"].reason
    waited = policy(maxChanging=4, drain="wait")
    result = plan_layouts(
        waited, views(waited, nodes, [pod("busy")]), demand(small={"mig-1g": 200}), now=NOW
    )
    assert result.node("busy").action == "start"
    assert "cordon, wait for its GPU pods" in result.node("busy").reason


def test_nodes_cordoned_by_others_unhealthy_or_changing():
    the_policy = policy(maxChanging=4)
    progress = Progress("all-balanced", "all-1g.10gb", "applying", NOW - 10, cordoned=True)
    failed = Progress("all-balanced", "all-3g.40gb", "failed", NOW - 10, cordoned=True, detail="x")
    nodes = [
        node("cordoned", unschedulable=True),
        node("down", ready=False),
        node(
            "moving",
            unschedulable=True,
            annotations={PROGRESS_ANNOTATION: progress.to_annotation()},
        ),
        node(
            "broken", unschedulable=True, annotations={PROGRESS_ANNOTATION: failed.to_annotation()}
        ),
    ]
    result = plan_layouts(
        the_policy, views(the_policy, nodes), demand(small={"mig-1g": 500}), now=NOW
    )
    by_name = {n.name: n for n in result.nodes}
    assert by_name["cordoned"].action == "skip" and "someone else" in by_name["cordoned"].reason
    assert by_name["down"].action == "skip"
    assert by_name["moving"].action == "changing" and by_name["moving"].target == "all-1g.10gb"
    assert by_name["broken"].action == "failed"
    assert result.out_of_capacity == {"moving", "broken"}


def test_mode_off_plans_nothing():
    the_policy = policy()
    off = the_policy.model_copy(
        update={
            "spec": the_policy.spec.model_copy(
                update={"geometry": the_policy.spec.geometry.model_copy(update={"mode": "off"})}
            )
        }
    )
    result = plan_layouts(off, views(off, [node("n0")]), demand(small={"mig-1g": 500}), now=NOW)
    assert result.nodes == () and result.mode == "off"


def test_weights_decide_between_tenants():
    tenants = [
        {"name": "small", "weight": 1, "quota": {"mig-1g": {}}},
        {"name": "large", "weight": 5, "quota": {"mig-3g": {}}},
    ]
    the_policy = policy(tenants)
    nodes = [node("n0")]
    # One balanced node: 16 x 1g, 8 x 2g, 8 x 3g. Both tenants want more than it offers of their
    # class; going all-3g (16 x 3g) serves the heavier tenant.
    result = plan_layouts(
        the_policy,
        views(the_policy, nodes),
        demand(small={"mig-1g": 56}, large={"mig-3g": 16}),
        now=NOW,
    )
    assert result.nodes[0].target == "all-3g.40gb"
    light = plan_layouts(
        the_policy,
        views(the_policy, nodes),
        demand(small={"mig-1g": 56}, large={"mig-3g": 16}),
        now=NOW,
        weights={"small": 5, "large": 1},
    )
    assert light.nodes[0].target == "all-1g.10gb"


def test_a_time_slicing_config_is_a_layout_too():
    from .helpers import sharing_policy

    the_policy = sharing_policy()
    result = plan_layouts(
        the_policy, views(the_policy, [node("n0")]), demand(notebooks={"shared": 32}), now=NOW
    )
    row = result.nodes[0]
    # 8 GPUs x 4 replicas = 32 shared units (8 GPUs' worth of notebooks).
    assert (row.target, row.action) == ("ts-4", "start")
    assert "shared +32" in row.reason
    layout = views(the_policy, [node("n0")])[0].pool.layouts["ts-4"]
    assert layout.labels(pool_shares=True) == {
        "nvidia.com/mig.config": "all-disabled",
        "nvidia.com/device-plugin.config": "ts-4",
    }
    back = views(the_policy, [node("n0")])[0].pool.layouts["all-balanced"]
    assert back.labels(pool_shares=True) == {
        "nvidia.com/mig.config": "all-balanced",
        "nvidia.com/device-plugin.config": None,
    }
