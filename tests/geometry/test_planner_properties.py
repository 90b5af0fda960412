"""Invariants of the layout planner over generated pools, demands and guarantees."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.geometry.layout_planner import plan_layouts
from quotaguard.geometry.pool_layouts import class_offers
from quotaguard.geometry.progress import CHANGED_AT_ANNOTATION, PROGRESS_ANNOTATION, Progress
from quotaguard.policy.migconfig import builtin_configs, node_resources
from quotaguard.quota.demand import ClassDemand

from .helpers import CONFIGS, node, pod, policy, views

NOW = 1_000_000.0
CLASS_NAMES = ("mig-1g", "mig-2g", "mig-3g")


@st.composite
def cases(draw):
    guarantees = {name: draw(st.integers(0, 24)) for name in CLASS_NAMES}
    tenants = [
        {
            "name": f"t{i}",
            "weight": draw(st.sampled_from([1, 2, 3])),
            "quota": {name: {"guaranteed": guarantees[name]}},
        }
        for i, name in enumerate(CLASS_NAMES)
    ]
    max_changing = draw(st.sampled_from([1, 2, 3, "25%", "50%"]))
    drain = draw(st.sampled_from(["wait", "idle-only"]))
    the_policy = policy(tenants, maxChanging=max_changing, drain=drain)
    count = draw(st.integers(1, 7))
    nodes, pods = [], []
    for index in range(count):
        name = f"n{index}"
        config = draw(st.sampled_from(CONFIGS))
        annotations = {}
        kind = draw(st.sampled_from(["plain", "plain", "dwell", "changing", "busy", "cordoned"]))
        if kind == "dwell":
            annotations[CHANGED_AT_ANNOTATION] = str(NOW - 60)
        if kind == "changing":
            progress = Progress(
                config, draw(st.sampled_from(CONFIGS)), "applying", NOW - 5, cordoned=True
            )
            annotations[PROGRESS_ANNOTATION] = progress.to_annotation()
        if kind == "busy":
            pods.append(pod(name))
        nodes.append(
            node(
                name,
                config,
                gpus=draw(st.integers(1, 8)),
                annotations=annotations,
                unschedulable=kind in ("changing", "cordoned"),
            )
        )
    demand = {
        f"t{i}": {name: ClassDemand(0, draw(st.integers(0, 120)))}
        for i, name in enumerate(CLASS_NAMES)
    }
    return the_policy, nodes, pods, demand, guarantees


def _capacity(the_policy, view, layout):
    offers = node_resources(builtin_configs("A100-80GB")[layout], "A100-80GB", view.gpus)
    labels = {**view.labels, "nvidia.com/mig.config": layout}
    return class_offers(the_policy, offers, labels)


def _distributable(units):
    return int(units * Fraction(100) / 100)


def _sum(rows):
    total = {}
    for row in rows:
        for name, amount in row.items():
            total[name] = total.get(name, 0) + amount
    return total


@settings(max_examples=150, deadline=None)
@given(cases())
def test_guarantees_stay_coverable_now_and_after(case):
    the_policy, nodes, pods, demand, guarantees = case
    seen = views(the_policy, nodes, pods)
    result = plan_layouts(the_policy, seen, demand, now=NOW)
    rows = {n.name: n for n in result.nodes}
    serving = [v for v in seen if v.progress is None]
    before = _sum(v.capacity for v in serving)
    during = _sum(v.capacity for v in serving if rows[v.name].action != "start")
    final_before = _sum(
        [v.capacity for v in serving]
        + [_capacity(the_policy, v, v.progress.target) for v in seen if v.progress is not None]
    )
    final = _sum(
        [
            _capacity(the_policy, v, rows[v.name].target)
            if rows[v.name].target != v.current and rows[v.name].target
            else v.capacity
            for v in serving
        ]
        + [_capacity(the_policy, v, v.progress.target) for v in seen if v.progress is not None]
    )
    for name, guaranteed in guarantees.items():
        if not guaranteed:
            continue
        assert _distributable(during.get(name, 0)) >= min(guaranteed, before.get(name, 0)), name
        assert final.get(name, 0) >= min(guaranteed, final_before.get(name, 0)), name


@settings(max_examples=150, deadline=None)
@given(cases())
def test_no_more_nodes_change_at_once_than_allowed(case):
    the_policy, nodes, pods, demand, _ = case
    seen = views(the_policy, nodes, pods)
    result = plan_layouts(the_policy, seen, demand, now=NOW)
    pool = the_policy.spec.geometry.pools[0]
    allowed = pool.changing_allowed(len(seen))
    already = sum(1 for v in seen if v.progress is not None)
    starting = sum(1 for n in result.nodes if n.action == "start")
    assert already + starting <= max(allowed, already)
    if already >= allowed:
        assert starting == 0


@settings(max_examples=60, deadline=None)
@given(cases())
def test_same_inputs_same_plan(case):
    the_policy, nodes, pods, demand, _ = case
    first = plan_layouts(the_policy, views(the_policy, nodes, pods), demand, now=NOW)
    again = plan_layouts(
        the_policy,
        views(the_policy, list(reversed(nodes)), pods),
        dict(reversed(list(demand.items()))),
        now=NOW,
    )
    assert first == again


@settings(max_examples=60, deadline=None)
@given(cases())
def test_a_plan_carried_out_is_not_undone(case):
    """Hysteresis: once the started changes are in place and demand holds, those nodes are not
    sent back at once (minDwell), and nothing flaps between two layouts."""
    the_policy, nodes, pods, demand, _ = case
    seen = views(the_policy, nodes, pods)
    result = plan_layouts(the_policy, seen, demand, now=NOW)
    done = []
    for original in nodes:
        row = result.node(original.name)
        if row is not None and row.action == "start":
            done.append(
                node(
                    original.name,
                    row.target,
                    gpus=int(original.labels["nvidia.com/gpu.count"]),
                    annotations={CHANGED_AT_ANNOTATION: str(NOW + 600)},
                )
            )
        else:
            done.append(original)
    later = plan_layouts(the_policy, views(the_policy, done, pods), demand, now=NOW + 660)
    for row in result.nodes:
        if row.action == "start":
            assert later.node(row.name).action in ("keep", "wait")
            assert later.node(row.name).target == row.target
