"""One node's layout change, step by step: cordon, wait, relabel, success, uncordon; failures."""

from __future__ import annotations

from quotaguard.geometry.progress import Limits, Observed, Progress, backoff, start, step

BALANCED = {"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8}
SMALL = {"nvidia.com/mig-1g.10gb": 56}
LABELS_OF = {
    "all-balanced": {"nvidia.com/mig.config": "all-balanced"},
    "all-1g.10gb": {"nvidia.com/mig.config": "all-1g.10gb"},
}
EXPECTED = {"all-balanced": BALANCED, "all-1g.10gb": SMALL}
WAIT = Limits("wait", drain_timeout=600, change_timeout=900)
IDLE = Limits("idle-only", drain_timeout=600, change_timeout=900)


def seen(config="all-balanced", state="success", allocatable=None, pods=0, cordoned=True):
    return Observed(
        unschedulable=cordoned,
        gpu_pods=pods,
        labels={"nvidia.com/mig.config": config, "nvidia.com/mig.config.state": state},
        allocatable=BALANCED if allocatable is None else allocatable,
    )


def go(progress, observed, now, limits=WAIT):
    return step(progress, observed, limits=limits, labels_of=LABELS_OF, expected=EXPECTED, now=now)


def test_the_whole_way():
    update = start("all-balanced", "all-1g.10gb", seen(cordoned=False), 0)
    assert update.unschedulable is True and update.outcome == "started"
    progress = update.progress
    assert progress is not None and progress.phase == "draining" and progress.cordoned
    # Busy: nothing happens until the GPU pods are gone.
    assert go(progress, seen(pods=2), 60).empty
    relabel = go(progress, seen(), 120)
    assert relabel.labels == {"nvidia.com/mig.config": "all-1g.10gb"}
    assert relabel.unschedulable is None
    progress = relabel.progress
    assert progress is not None and progress.phase == "applying" and progress.attempts == 1
    # Pending, then success with the old allocatable: still waiting.
    assert go(progress, seen("all-1g.10gb", "pending"), 150).empty
    assert go(progress, seen("all-1g.10gb", "success"), 160).empty
    done = go(progress, seen("all-1g.10gb", "success", SMALL), 200)
    assert done.unschedulable is False and done.clear and done.changed_at == 200
    assert done.event is not None and done.event[0] == "LayoutChanged"
    assert done.outcome == "succeeded"


def test_a_node_cordoned_before_is_not_uncordoned():
    progress = start("all-balanced", "all-1g.10gb", seen(cordoned=True), 0).progress
    assert progress is not None and not progress.cordoned
    applying = go(progress, seen(), 10).progress
    done = go(applying, seen("all-1g.10gb", "success", SMALL), 20)
    assert done.unschedulable is None and done.clear


def test_drain_gives_up_at_its_deadline_and_idle_only_at_once():
    progress = start("all-balanced", "all-1g.10gb", seen(cordoned=False), 0).progress
    assert go(progress, seen(pods=1), 599).empty
    gave_up = go(progress, seen(pods=1), 600)
    assert gave_up.outcome == "given-up" and gave_up.unschedulable is False and gave_up.clear
    assert gave_up.changed_at is None
    idle = go(progress, seen(pods=1), 1, IDLE)
    assert idle.outcome == "given-up" and "idle-only" in idle.event[1]


def test_failed_backs_off_stays_cordoned_then_rolls_back():
    progress = Progress("all-balanced", "all-1g.10gb", "applying", 0, True, "all-1g.10gb", 1)
    failed = go(progress, seen("all-1g.10gb", "failed"), 30)
    assert failed.outcome == "failed" and failed.unschedulable is None and not failed.clear
    assert failed.event[2] == "Warning" and "out of capacity" in failed.event[1]
    state = failed.progress
    assert state.phase == "failed" and state.retry_at == 30 + backoff(1)
    assert go(state, seen("all-1g.10gb", "failed"), 30 + backoff(1) - 1).empty
    retry = go(state, seen("all-1g.10gb", "failed"), 30 + backoff(1))
    assert retry.labels == {"nvidia.com/mig.config": "all-balanced"}  # back where it came from
    assert retry.progress.applying == "all-balanced" and retry.progress.attempts == 2
    back = go(retry.progress, seen("all-balanced", "success", BALANCED), 1000)
    assert back.outcome == "rolled-back" and back.unschedulable is False and back.changed_at == 1000


def test_a_change_without_success_times_out():
    progress = Progress("all-balanced", "all-1g.10gb", "applying", 0, True, "all-1g.10gb", 1)
    assert go(progress, seen("all-1g.10gb", "pending"), 899).empty
    late = go(progress, seen("all-1g.10gb", "pending"), 900)
    assert late.outcome == "failed" and "changeTimeout" in late.progress.detail


def test_backoff_doubles_up_to_an_hour():
    assert [backoff(n) for n in (1, 2, 3, 5, 9)] == [300, 600, 1200, 3600, 3600]


def test_annotation_round_trip_and_garbage():
    progress = Progress("a", "b", "failed", 1.5, True, "b", 2, 99.0, "x")
    assert Progress.from_annotation(progress.to_annotation()) == progress
    for text in (
        None,
        "",
        "{",
        "[]",
        '{"phase": "draining"}',
        '{"source": null, "target": "b", "phase": "sleeping", "since": 0, "cordoned": true}',
    ):
        assert Progress.from_annotation(text) is None
