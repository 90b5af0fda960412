"""Node updates from the layout plan: nothing in recommend mode, cordon first, guarded patches."""

from __future__ import annotations

from dataclasses import replace

from quotaguard.geometry.layout_planner import plan_layouts
from quotaguard.geometry.node_updates import next_updates, patch_body
from quotaguard.geometry.progress import PROGRESS_ANNOTATION, Progress, Update

from .helpers import demand, node, policy, sharing_policy, views

NOW = 50_000.0


def _with_mode(the_policy, mode):
    geometry = the_policy.spec.geometry.model_copy(update={"mode": mode})
    spec = the_policy.spec.model_copy(update={"geometry": geometry})
    return the_policy.model_copy(update={"spec": spec})


def test_recommend_mode_writes_nothing():
    the_policy = _with_mode(policy(), "recommend")
    seen = views(the_policy, [node("n0"), node("n1")])
    plan = plan_layouts(the_policy, seen, demand(small={"mig-1g": 100}), now=NOW)
    assert any(row.action == "start" for row in plan.nodes)
    assert next_updates(the_policy, plan, seen, NOW) == []


def test_apply_cordons_the_started_node_and_steps_the_changing_one():
    the_policy = policy(maxChanging=2)
    progress = Progress("all-balanced", "all-1g.10gb", "draining", NOW - 60, cordoned=True)
    nodes = [
        node("a"),
        node("b", unschedulable=True, annotations={PROGRESS_ANNOTATION: progress.to_annotation()}),
    ]
    seen = views(the_policy, nodes)
    plan = plan_layouts(the_policy, seen, demand(small={"mig-1g": 100}), now=NOW)
    updates = {view.name: update for view, update in next_updates(the_policy, plan, seen, NOW)}
    assert updates["a"].unschedulable is True and updates["a"].outcome == "started"
    # b is idle and cordoned: it gets its label now.
    assert updates["b"].labels == {"nvidia.com/mig.config": "all-1g.10gb"}


def test_patch_body():
    progress = Progress(None, "all-3g.40gb", "draining", 1, cordoned=True)
    body = patch_body(Update(unschedulable=True, progress=progress), "42")
    assert body == {
        "metadata": {
            "resourceVersion": "42",
            "annotations": {PROGRESS_ANNOTATION: progress.to_annotation()},
        },
        "spec": {"unschedulable": True},
    }
    done = patch_body(Update(unschedulable=False, clear=True, changed_at=99.4), None)
    assert done == {
        "metadata": {
            "annotations": {
                PROGRESS_ANNOTATION: None,
                "quotaguard.dev/layout-changed-at": "99",
            }
        },
        "spec": {"unschedulable": False},
    }
    assert patch_body(Update(labels={"x": None}), "1")["metadata"]["labels"] == {"x": None}


def test_a_change_to_a_time_slicing_config_sets_both_labels_and_ends_once_shared_gpus_are_offered():
    the_policy = sharing_policy()
    toward = Progress("all-balanced", "ts-4", "draining", NOW - 60, cordoned=True)
    draining = node(
        "n0", unschedulable=True, annotations={PROGRESS_ANNOTATION: toward.to_annotation()}
    )

    def updates(the_node):
        seen = views(the_policy, [the_node])
        plan = plan_layouts(the_policy, seen, demand(notebooks={"shared": 32}), now=NOW)
        return [update for _, update in next_updates(the_policy, plan, seen, NOW)]

    [relabel] = updates(draining)  # idle: the labels now
    assert relabel.labels == {
        "nvidia.com/mig.config": "all-disabled",
        "nvidia.com/device-plugin.config": "ts-4",
    }
    assert relabel.progress is not None
    labels = {**draining.labels, **relabel.labels, "nvidia.com/mig.config.state": "success"}
    applying = replace(
        draining,
        labels=labels,
        annotations={PROGRESS_ANNOTATION: relabel.progress.to_annotation()},
        allocatable={"nvidia.com/gpu": 8},  # MIG off, the device plugin not yet sharing
    )
    assert updates(applying) == []  # waits for the shared GPUs
    [done] = updates(replace(applying, allocatable={"nvidia.com/gpu.shared": 32}))
    assert (done.outcome, done.unschedulable, done.clear) == ("succeeded", False, True)
