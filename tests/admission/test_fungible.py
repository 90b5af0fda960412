"""A rewrite target that lists several GPU models (`to: [h100, a100]`): the request keeps the
resource they share, no nodeSelector is set, and Kueue's flavor picks the model."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaguard.admission import make_review, mutate, review_offline, validate
from quotaguard.admission.names import KUEUE_QUEUE_LABEL
from quotaguard.commands.review import summarize
from quotaguard.policy.loader import load_policy_text
from quotaguard.policy.model import TenantPolicy

from .builders import applied, gpu, job, pod, template, volcano_job
from .strategies import NAMESPACES, workloads

SAMPLE = Path(__file__).resolve().parents[2] / "config" / "policy.yaml"
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def _sample() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    return document


def _with_models(rule_to: object, **training: Any) -> TenantPolicy:
    """The sample policy with an A100 class (and a time-sliced one of each model); training
    may use both models and its catch-all rule targets `rule_to`."""
    document = _sample()
    spec = document["spec"]
    spec["gpuClasses"] += [
        {"name": "a100", "resource": "nvidia.com/gpu", "memory": "80Gi", "nodeSelector": A100},
    ]
    shared = next(c for c in spec["gpuClasses"] if c["name"] == "shared")
    shared["nodeSelector"] = H100
    spec["gpuClasses"].append(
        {**shared, "name": "shared-a100", "nodeSelector": A100, "replicas": 2}
    )
    tenant = next(t for t in spec["tenants"] if t["name"] == "training")
    tenant["allowedClasses"] += ["a100", "shared", "shared-a100"]
    tenant["quota"]["a100"] = {"guaranteed": 0, "max": 16}
    tenant["rewrite"].append({"to": rule_to})
    tenant.update(training)
    return load_policy_text(yaml.safe_dump(document), "fungible.yaml")


@pytest.fixture(scope="module")
def models() -> TenantPolicy:
    return _with_models(["h100", "a100"])


def ops(decision) -> list[tuple[str, str]]:
    return [(op["op"], op["path"]) for op in decision.patch]


def test_a_list_keeps_nvidia_gpu_sets_no_node_selector_and_stamps_the_queue(models):
    decision = mutate(models, pod(gpu(4)), "training")
    assert decision.allowed
    patched = applied(pod(gpu(4)), decision)
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 4}
    assert "nodeSelector" not in patched["spec"]
    assert patched["metadata"]["labels"] == {KUEUE_QUEUE_LABEL: "training"}
    assert (
        decision.audit["kept"] == "main: nvidia.com/gpu=4 on h100 or a100 (Kueue picks the flavor)"
    )
    assert "rewritten" not in decision.audit
    assert any("rule 2" in warning for warning in decision.warnings)


def test_a_plain_target_on_the_same_policy_still_pins_the_model():
    policy = _with_models("a100")
    patched = applied(pod(gpu(4)), mutate(policy, pod(gpu(4)), "training"))
    assert patched["spec"]["nodeSelector"] == A100


def test_a_job_template_keeps_its_request_and_the_job_gets_the_queue(models):
    obj = job(template(gpu(2)))
    patched = applied(obj, mutate(models, obj, "training"))
    spec = patched["spec"]["template"]["spec"]
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 2}
    assert "nodeSelector" not in spec
    assert patched["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"


def test_a_node_selector_that_keeps_one_model_of_the_list_is_left_to_kueue(models):
    obj = pod(gpu(2), nodeSelector=A100)
    decision = mutate(models, obj, "training")
    assert decision.allowed
    assert applied(obj, decision)["spec"]["nodeSelector"] == A100
    assert "on a100 (Kueue" in decision.audit["kept"]


def test_a_node_selector_that_rules_out_every_model_is_denied_with_what_to_do(models):
    obj = pod(gpu(2), nodeSelector={"nvidia.com/gpu.product": "NVIDIA-L4"})
    decision = mutate(models, obj, "training")
    assert not decision.allowed
    assert decision.rules == ("node-selector-conflict",)
    assert "may run on h100 or a100" in decision.message
    assert "remove that nodeSelector" in decision.message


NOT_A_MODEL = {"nvidia.com/gpu.product": "NVIDIA-L4", "zone": "b"}


@pytest.mark.parametrize(
    ("obj", "container", "where"),
    [
        (pod(gpu(2), nodeSelector=NOT_A_MODEL), "main", ""),
        (
            volcano_job(("worker", template(gpu(2), nodeSelector=NOT_A_MODEL))),
            "worker/main",
            " of worker",
        ),
    ],
    ids=["pod", "volcano task"],
)
def test_the_denial_of_a_node_selector_against_every_model_names_the_task_and_every_key(
    models, obj, container, where
):
    decision = mutate(models, obj, "training")
    assert decision.message == (
        f'tenant "training": container "{container}" may run on h100 or a100, but the '
        f"nodeSelector{where} (nvidia.com/gpu.product=NVIDIA-L4, zone=b) rules out every one of "
        "them; remove that nodeSelector (Kueue picks the flavor) or pick a class with "
        "quotaguard.dev/gpu-class"
    )


def test_a_list_of_shared_classes_moves_to_their_resource_without_a_selector():
    policy = _with_models(["shared", "shared-a100"])
    obj = pod(gpu(1))
    decision = mutate(policy, obj, "training")
    patched = applied(obj, decision)
    assert patched["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu.shared": "1"},
        "requests": {"nvidia.com/gpu.shared": "1"},
    }
    assert "nodeSelector" not in patched["spec"]
    # mutated again (reinvocation), the resource Kueue picks a flavor of is not pinned
    assert mutate(policy, patched, "training").patch == ()


def test_max_gpus_per_pod_is_judged_against_the_largest_class_kueue_may_pick():
    # a time-sliced A100 unit is half a GPU, a time-sliced H100 unit a quarter
    policy = _with_models(["shared", "shared-a100"], maxGPUsPerPod=0.25)
    obj = pod(gpu(1))
    patched = applied(obj, mutate(policy, obj, "training"))
    decision = validate(policy, patched, "training")
    assert decision.rules == ("max-gpus-per-pod",)
    assert "0.5" in decision.message
    pinned = copy.deepcopy(patched)
    pinned["spec"]["nodeSelector"] = H100  # only the H100 flavor is left: a quarter
    assert validate(policy, pinned, "training").allowed


def test_max_gpus_per_pod_counts_whole_gpus_of_a_list(models):
    patched = applied(pod(gpu(9)), mutate(models, pod(gpu(9)), "training"))
    decision = validate(models, patched, "training")
    assert decision.rules == ("max-gpus-per-pod",)
    assert validate(
        models, applied(pod(gpu(8)), mutate(models, pod(gpu(8)), "training")), "training"
    ).allowed


def test_review_summary_says_what_was_kept_and_why(models):
    review = make_review(pod(gpu(4)), namespace="training", uid="u")
    response, _ = review_offline(models, review)
    text = summarize("Pod/work", review, response)
    assert "  kept: main: nvidia.com/gpu=4 on h100 or a100 (Kueue picks the flavor)" in text
    assert "  because: tenant training, rule 2" in text


def _as_lists(document: dict[str, Any]) -> dict[str, Any]:
    """Every plain rewrite target `to: X` written as a list of one, `to: [X]`."""
    listed = copy.deepcopy(document)
    for tenant in listed["spec"]["tenants"]:
        for rule in tenant.get("rewrite", []):
            rule["to"] = [rule["to"]]
    return listed


@pytest.fixture(scope="module")
def both(models) -> tuple[TenantPolicy, TenantPolicy]:
    document = _sample()
    plain = load_policy_text(yaml.safe_dump(document), "plain.yaml")
    return plain, load_policy_text(yaml.safe_dump(_as_lists(document)), "listed.yaml")


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(workloads(), st.sampled_from(NAMESPACES))
def test_a_list_of_one_class_behaves_exactly_as_the_class(both, obj, namespace):
    plain, listed = both
    assert mutate(listed, obj, namespace) == mutate(plain, obj, namespace)
    decision = mutate(plain, obj, namespace)
    final = applied(obj, decision) if decision.allowed else obj
    assert validate(listed, final, namespace) == validate(plain, final, namespace)


@SETTINGS
@given(workloads(), st.sampled_from(NAMESPACES))
def test_mutating_a_mutated_object_again_changes_nothing_with_lists(models, obj, namespace):
    first = mutate(models, obj, namespace)
    if not first.allowed:
        return
    second = mutate(models, applied(obj, first), namespace)
    assert second.allowed
    assert second.patch == ()
