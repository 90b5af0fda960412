"""`spec.scheduling.schedulerName`: under Kueue the webhook sends a tenant's GPU pods to the
scheduler profile that packs them, leaves a scheduler the workload names alone and other
pods to the default, and validation accepts the profile's name."""

from __future__ import annotations

import copy

import pytest

from quotaguard.admission import make_review, mutate, review_offline, validate
from quotaguard.policy.loader import PolicyInvalid

from .builders import applied, container, gpu, jobset, of_kind, pod, template

PACKING = {"schedulerName": "quotaguard-gpu"}


@pytest.fixture(scope="module")
def packing(make_policy):
    return make_policy(scheduling=PACKING)


def patched_of(policy, obj, namespace="training"):
    response, patched = review_offline(policy, make_review(obj, namespace=namespace))
    assert response["response"]["allowed"], response
    return patched


@pytest.mark.parametrize("written", [None, "", "default-scheduler"])
def test_a_tenants_gpu_pod_goes_to_the_packing_profile(packing, written):
    obj = pod(gpu(2)) if written is None else pod(gpu(2), schedulerName=written)
    assert patched_of(packing, obj)["spec"]["schedulerName"] == "quotaguard-gpu"


def test_without_the_field_the_pod_keeps_the_default_scheduler(make_policy):
    assert "schedulerName" not in patched_of(make_policy(), pod(gpu(2)))["spec"]


def test_a_scheduler_the_workload_names_is_kept_and_judged_as_before(make_policy):
    policy = make_policy(scheduling=PACKING, allowedSchedulers=["gang"])
    patched = patched_of(policy, pod(gpu(1), schedulerName="gang"))
    assert patched["spec"]["schedulerName"] == "gang"


def test_only_the_gpu_templates_of_a_workload_are_packed(packing):
    obj = jobset(
        ("driver", template(container(limits={"cpu": "1"}))),
        ("workers", template(gpu(1))),
    )
    jobs = patched_of(packing, obj)["spec"]["replicatedJobs"]
    specs = {job["name"]: job["template"]["spec"]["template"]["spec"] for job in jobs}
    assert specs["workers"]["schedulerName"] == "quotaguard-gpu"
    assert "schedulerName" not in specs["driver"]


def test_pods_of_exempt_namespaces_and_pods_without_gpus_are_left_alone(packing):
    assert "schedulerName" not in patched_of(packing, pod(gpu(1)), namespace="kube-system")["spec"]
    cpu_pod = pod(container(limits={"cpu": "1"}))
    assert "schedulerName" not in patched_of(packing, cpu_pod)["spec"]


def test_validation_accepts_the_profile_and_still_refuses_another(packing):
    assert validate(packing, pod(gpu(1), schedulerName="quotaguard-gpu"), "training").allowed
    refused = validate(packing, pod(gpu(1), schedulerName="gang"), "training")
    assert refused.rules == ("scheduler-not-allowed",)
    assert "allowedSchedulers: default-scheduler, quotaguard-gpu" in refused.message


def test_a_policy_naming_a_packing_profile_under_volcano_is_refused(make_policy):
    with pytest.raises(PolicyInvalid, match="binpack"):
        make_policy(backend="volcano", scheduling=PACKING)


def test_an_update_that_drops_the_packing_scheduler_gets_it_back(packing, make_policy):
    """A Deployment applied again from its manifest (no schedulerName) keeps its pods on the
    packing profile; a scheduler the user set themselves and then removed is not put back."""
    manifest = of_kind("Deployment", template(gpu(1)))
    stored = applied(manifest, mutate(packing, manifest, "training"))
    pod_spec = stored["spec"]["template"]["spec"]
    assert pod_spec["schedulerName"] == "quotaguard-gpu"
    again = copy.deepcopy(stored)
    del again["spec"]["template"]["spec"]["schedulerName"]
    decision = mutate(packing, again, "training", operation="UPDATE", old_object=stored)
    assert applied(again, decision)["spec"]["template"]["spec"]["schedulerName"] == "quotaguard-gpu"

    own = make_policy(scheduling=PACKING, allowedSchedulers=["gang"])
    written = of_kind("Deployment", template(gpu(1), schedulerName="gang"))
    kept = applied(written, mutate(own, written, "training"))
    dropped = copy.deepcopy(kept)
    del dropped["spec"]["template"]["spec"]["schedulerName"]
    decision = mutate(own, dropped, "training", operation="UPDATE", old_object=kept)
    assert "schedulerName" not in applied(dropped, decision)["spec"]["template"]["spec"]
