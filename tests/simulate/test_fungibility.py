"""Flavor fungibility: a workload whose rewrite target lists several GPU models
(`to: [h100, a100]`) is admitted on the first flavor, in its queue's order, that has quota
and fits, then the next; `whenCanBorrow` decides whether borrowing on an earlier flavor goes
before a later one within nominal quota."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from quotaguard.policy.loader import load_policy_file, load_policy_text
from quotaguard.simulate.arrivals import verdict_of
from quotaguard.simulate.cohort import CohortConfig, QueueConfig, Quota
from quotaguard.simulate.queued import QueuedWorkload
from quotaguard.simulate.queueing import QueueModel
from quotaguard.simulate.simulation import simulate
from quotaguard.simulate.trace import load_trace, load_trace_text
from tests import policies
from tests.policies import A100_MODEL, H100_MODEL

H100, A100 = (("h100", 4),), (("a100", 4),)


def cohort(*, borrow_next: bool, h100_nominal: int = 4) -> QueueModel:
    training = QueueConfig(
        "training",
        {"h100": Quota(h100_nominal, borrowing_limit=4), "a100": Quota(8, borrowing_limit=0)},
        borrow_next=borrow_next,
    )
    other = QueueConfig("other", {"h100": Quota(4), "a100": Quota(0)})  # lends its h100
    resources = {"h100": "nvidia.com/gpu", "a100": "nvidia.com/gpu"}
    return QueueModel(CohortConfig((training, other), resources), {"h100": 8, "a100": 8})


def submit(model: QueueModel, ident: int) -> QueuedWorkload:
    workload = QueuedWorkload(ident, "training", H100, 0.0, options=(H100, A100))
    model.submit(workload)
    return workload


def admitted_on(model: QueueModel, count: int) -> list[str]:
    workloads = [submit(model, ident) for ident in range(count)]
    model.admit(0.0)
    return [w.request[0][0] if w.admitted_at is not None else "waiting" for w in workloads]


def test_the_first_flavor_is_used_until_its_quota_is_full_then_the_next():
    model = cohort(borrow_next=False, h100_nominal=8)
    assert admitted_on(model, 5) == ["h100", "h100", "a100", "a100", "waiting"]


def test_may_stop_search_borrows_on_the_first_flavor_before_trying_the_next():
    model = cohort(borrow_next=False)
    # h100: 4 nominal, then 4 borrowed from `other`; a100 only after that
    assert admitted_on(model, 4) == ["h100", "h100", "a100", "a100"]
    assert model.usage("training") == {"h100": 8, "a100": 8}


def test_try_next_flavor_takes_the_next_flavors_nominal_quota_before_borrowing():
    model = cohort(borrow_next=True)
    # h100 within nominal, then a100 within nominal twice, then h100 by borrowing
    assert admitted_on(model, 4) == ["h100", "a100", "a100", "h100"]


TRACE = textwrap.dedent(
    """\
    horizon: 2h
    nodes:
      - {name: h-1, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3},
         allocatable: {nvidia.com/gpu: "8"}}
      - {name: a-1, labels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB},
         allocatable: {nvidia.com/gpu: "8"}}
    workloads:
      - {at: 0, duration: 1h, namespace: training, count: 3, every: 1,
         pod: {spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: "4"}}}]}}}
    """
)


TRACE_POD = {
    "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}
}


def policy(fungibility: str = ""):
    """Training's rules list h100 then a100 (one resource, two models); `fungibility` its
    flavorFungibility line as written in YAML, or nothing."""
    training = {
        "name": "training",
        "quota": {"h100": {"guaranteed": 4, "max": 8}, "a100": {"guaranteed": 8, "max": 8}},
        **(yaml.safe_load(fungibility) or {}),
        "rewrite": [{"to": ["h100", "a100"]}],
    }
    return policies.policy(
        [training, {"name": "other", "quota": {"h100": {"guaranteed": 4}}}],
        classes=(A100_MODEL, H100_MODEL),
        name="p",
    )


def test_admission_offers_the_flavors_in_the_lists_order_not_the_policys():
    found = verdict_of(policy(), TRACE_POD, "training")
    assert found.options == ((("h100", 4),), (("a100", 4),))
    assert verdict_of(policy(), TRACE_POD, "other").options[0] == (("a100", 4),)


@pytest.mark.parametrize(
    ("fungibility", "h100", "a100"),
    [
        ("", 8, 4),  # MayStopSearch: 4 on h100, 4 borrowed on h100, then a100
        ("flavorFungibility: {whenCanBorrow: TryNextFlavor}", 4, 8),
    ],
)
def test_a_simulated_day_places_a_list_by_the_queues_flavor_order(fungibility, h100, a100):
    result = simulate(policy(fungibility), load_trace_text(TRACE, "t.yaml"), arms=("static",))
    usage = result.runs["static"].series.usage["training"]
    assert (max(usage["h100"]), max(usage["a100"])) == (h100, a100)


MODELS = Path(__file__).parents[2] / "config" / "samples" / "kueue" / "gpu-models"


def test_on_the_sample_models_day_a_list_keeps_the_second_model_busy():
    """The sample's saturated day: training asks for twice its H100s; with `to: h100` the
    A100s it may use sit idle, with `to: [h100, a100]` its work spills onto them."""
    listed = load_policy_file(MODELS / "policy.yaml")
    text = (MODELS / "policy.yaml").read_text().replace("- to: [h100, a100]", "- to: h100")
    pinned = load_policy_text(text)
    trace = load_trace(MODELS / "trace.yaml")
    spill = simulate(listed, trace, arms=("dynamic",)).metrics["dynamic"].overall.utilization
    stay = simulate(pinned, trace, arms=("dynamic",)).metrics["dynamic"].overall.utilization
    assert spill > stay + 0.1, (spill, stay)
