"""What the controller writes, decided without the API: cuts first, raises after."""

from __future__ import annotations

from quotaguard.quota.cluster import ResourceQuota
from quotaguard.quota.demand import ClassDemand
from quotaguard.quota.diff import writes_for
from quotaguard.quota.queues import QueueState
from quotaguard.quota.quota_planner import plan
from tests.quota.helpers import h100, policy

TWO = policy(
    [{"name": "a", "quota": {"h100": {}}}, {"name": "b", "quota": {"h100": {}}}],
    maxStepPercent=100,
)
WANT = {"a": {"h100": ClassDemand(0, 20)}, "b": {"h100": ClassDemand(0, 20)}}


def holding(**nominals: int) -> dict[str, QueueState]:
    return {
        name: QueueState(name, "example", 1.0, {"h100": ResourceQuota(nominal, None, nominal)})
        for name, nominal in nominals.items()
    }


def test_cuts_come_in_the_first_pass_and_raises_in_the_second() -> None:
    current = holding(a=8, b=2)
    result = plan(TWO, h100(10), WANT, current=current)
    cuts, raises = writes_for(result, current)
    assert [w.queue for w in cuts] == ["a"]
    assert [w.queue for w in raises] == ["b"]
    assert cuts[0].quotas["h100"].nominal == 5
    assert raises[0].quotas["h100"].nominal == 4  # one step: 100% of the 2 it holds
    assert [q.class_name for q in raises[0].change.quotas] == ["h100"]


def test_nothing_to_write_when_the_queues_hold_the_plan() -> None:
    current = holding(a=5, b=5)
    result = plan(TWO, h100(10), WANT, current=current)
    assert writes_for(result, current) == ((), ())
