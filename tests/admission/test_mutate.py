"""Mutation rows of the admission contract: rewrite, place, queue, provenance."""

from __future__ import annotations

import pytest

from quotaguard.admission import mutate
from quotaguard.admission.names import (
    DECIDED_ANNOTATION,
    KUEUE_QUEUE_LABEL,
    REWRITTEN_ANNOTATION,
    TENANT_ANNOTATION,
    VOLCANO_QUEUE_ANNOTATION,
)

from .builders import (
    applied,
    container,
    gpu,
    job,
    jobset,
    limits_of,
    owner,
    pod,
    recorded,
    requests_of,
    template,
    volcano_job,
)

H100_NODES = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def rewritten(policy, obj, namespace):
    decision = mutate(policy, obj, namespace)
    assert decision.allowed, decision.message
    return applied(obj, decision)


# --- 1. Rewrite GPU requests -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "annotations", "count", "resource"),
    [
        # inference: best-fit on the memory hint, smallest MIG class that covers it
        ("inference", {"quotaguard.dev/gpu-memory": "8Gi"}, 1, "nvidia.com/mig-1g.10gb"),
        ("inference", {"quotaguard.dev/gpu-memory": "10Gi"}, 1, "nvidia.com/mig-1g.10gb"),
        ("inference", {"quotaguard.dev/gpu-memory": "11Gi"}, 1, "nvidia.com/mig-3g.40gb"),
        ("serving-x", {"quotaguard.dev/gpu-memory": "40Gi"}, 1, "nvidia.com/mig-3g.40gb"),
        # no hint: best-fit passes it on to the next rule (the catch-all); no fitting class:
        # best-fit keeps the whole GPU
        ("inference", {}, 1, "nvidia.com/mig-3g.40gb"),
        ("inference", {"quotaguard.dev/gpu-memory": "64Gi"}, 1, "nvidia.com/gpu"),
        # first rule does not match 2 GPUs; the catch-all does
        ("inference", {}, 2, "nvidia.com/mig-3g.40gb"),
        # training: memoryAtMost needs a hint
        ("training", {"quotaguard.dev/gpu-memory": "40Gi"}, 1, "nvidia.com/mig-3g.40gb"),
        ("training", {"quotaguard.dev/gpu-memory": "41Gi"}, 1, "nvidia.com/gpu"),
        ("training", {}, 1, "nvidia.com/gpu"),
        ("training", {"quotaguard.dev/gpu-memory": "8Gi"}, 2, "nvidia.com/gpu"),
        # notebooks: small ones on 1g.10gb, everything else shared
        ("nb-a", {"quotaguard.dev/gpu-memory": "8Gi"}, 1, "nvidia.com/mig-1g.10gb"),
        ("nb-a", {}, 1, "nvidia.com/gpu.shared"),
        ("notebooks", {"quotaguard.dev/gpu-memory": "20Gi"}, 1, "nvidia.com/gpu.shared"),
    ],
)
def test_rules_pick_the_class(policy, namespace, annotations, count, resource):
    result = rewritten(policy, pod(gpu(count), annotations=annotations), namespace)
    assert limits_of(result) == {resource: str(count) if resource != "nvidia.com/gpu" else count}


def test_rewrite_covers_limits_and_requests(policy):
    obj = pod(
        container(limits={"nvidia.com/gpu": "1", "cpu": "2"}, requests={"nvidia.com/gpu": "1"}),
        annotations={"quotaguard.dev/gpu-memory": "8Gi"},
    )
    result = rewritten(policy, obj, "inference")
    assert limits_of(result) == {"nvidia.com/mig-1g.10gb": "1", "cpu": "2"}
    assert requests_of(result) == {"nvidia.com/mig-1g.10gb": "1"}


def test_rewrite_adds_requests_when_only_limits_are_set(policy):
    obj = pod(gpu(1), annotations={"quotaguard.dev/gpu-memory": "8Gi"})
    assert requests_of(rewritten(policy, obj, "inference")) == {"nvidia.com/mig-1g.10gb": "1"}


def test_class_hint_wins_over_rules(policy):
    obj = pod(
        gpu(1),
        annotations={
            "quotaguard.dev/gpu-class": "h100-3g.40gb",
            "quotaguard.dev/gpu-memory": "4Gi",
        },
    )
    assert limits_of(rewritten(policy, obj, "inference")) == {"nvidia.com/mig-3g.40gb": "1"}


def test_class_hint_not_allowed_is_not_applied(policy):
    obj = pod(gpu(1), annotations={"quotaguard.dev/gpu-class": "shared"})
    decision = mutate(policy, obj, "training")
    assert limits_of(applied(obj, decision)) == {"nvidia.com/gpu": 1}
    assert any('"shared" is not allowed' in w for w in decision.warnings)


@pytest.mark.parametrize("value", ["false", "False", " false "])
def test_rewrite_false_keeps_the_request(policy, value):
    obj = pod(
        gpu(1),
        annotations={"quotaguard.dev/rewrite": value, "quotaguard.dev/gpu-memory": "8Gi"},
    )
    decision = mutate(policy, obj, "training")
    result = applied(obj, decision)
    assert limits_of(result) == {"nvidia.com/gpu": 1}
    assert REWRITTEN_ANNOTATION not in result["metadata"]["annotations"]


def test_best_fit_prefers_fewer_slices_then_less_memory(make_policy, policy):
    classes = [c.model_dump(by_alias=True, mode="json") for c in policy.spec.gpu_classes]
    classes += [
        {
            "name": "h100-1g.20gb",
            "resource": "nvidia.com/mig-1g.20gb",
            "memory": "20Gi",
            "slices": 1,
        },
        {
            "name": "h100-2g.20gb",
            "resource": "nvidia.com/mig-2g.20gb",
            "memory": "20Gi",
            "slices": 2,
        },
    ]
    tenants = [
        {
            "name": "inference",
            "namespaces": ["inference"],
            "maxGPUsPerPod": 1,
            "allowedClasses": ["h100-3g.40gb", "h100-2g.20gb", "h100-1g.20gb", "h100-1g.10gb"],
            "rewrite": [{"to": "best-fit"}],
        }
    ]
    custom = make_policy(gpuClasses=classes, tenants=tenants)
    expected = {
        "8Gi": "nvidia.com/mig-1g.10gb",
        "12Gi": "nvidia.com/mig-1g.20gb",  # 1 slice beats 2 slices with the same memory
        "20Gi": "nvidia.com/mig-1g.20gb",
        "21Gi": "nvidia.com/mig-3g.40gb",
    }
    for memory, resource in expected.items():
        obj = pod(gpu(1), annotations={"quotaguard.dev/gpu-memory": memory})
        assert list(limits_of(rewritten(custom, obj, "inference"))) == [resource], memory


def test_conditions_on_priority_class_and_labels(make_policy):
    tenants = [
        {
            "name": "research",
            "namespaces": ["research"],
            "allowedClasses": ["h100", "shared", "h100-1g.10gb"],
            "rewrite": [
                {"when": {"priorityClassNames": ["interactive"]}, "to": "shared"},
                {"when": {"matchLabels": {"size": "tiny"}}, "to": "h100-1g.10gb"},
                {"when": {"memoryAtLeast": "70Gi"}, "to": "h100"},
            ],
        }
    ]
    custom = make_policy(tenants=tenants)
    interactive = pod(gpu(1), priorityClassName="interactive")
    assert list(limits_of(rewritten(custom, interactive, "research"))) == ["nvidia.com/gpu.shared"]
    tiny = pod(gpu(1), labels={"size": "tiny"})
    assert list(limits_of(rewritten(custom, tiny, "research"))) == ["nvidia.com/mig-1g.10gb"]
    big = pod(gpu(1), annotations={"quotaguard.dev/gpu-memory": "75Gi"})
    assert list(limits_of(rewritten(custom, big, "research"))) == ["nvidia.com/gpu"]


def test_each_container_is_rewritten_on_its_own(policy):
    obj = pod(
        gpu(1, name="a"),
        container("cpu-only", limits={"cpu": "1"}),
        gpu(2, name="b"),
        annotations={"quotaguard.dev/gpu-memory": "8Gi"},
    )
    result = rewritten(policy, obj, "nb-a")
    assert limits_of(result, 0) == {"nvidia.com/mig-1g.10gb": "1"}
    assert limits_of(result, 1) == {"cpu": "1"}
    assert limits_of(result, 2) == {"nvidia.com/mig-1g.10gb": "2"}


def test_init_containers_are_rewritten_too(policy):
    obj = pod(gpu(1), init=[gpu(1, name="warmup")])
    result = rewritten(policy, obj, "nb-a")
    assert result["spec"]["initContainers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu.shared": "1"
    }


@pytest.mark.parametrize(
    "bad",
    [
        container(limits={"nvidia.com/gpu": "0.5"}),
        container(limits={"nvidia.com/gpu": 0}),
        container(requests={"nvidia.com/gpu": 1}),
        container(limits={"nvidia.com/gpu": 2}, requests={"nvidia.com/gpu": 1}),
        container(limits={"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 1}),
    ],
)
def test_invalid_requests_are_left_for_validation(policy, bad):
    obj = pod(bad)
    result = applied(obj, mutate(policy, obj, "nb-a"))
    assert result["spec"]["containers"][0]["resources"] == bad["resources"]


# --- 2. Place ----------------------------------------------------------------------------------


def test_class_node_selector_is_merged(policy):
    obj = pod(gpu(4), nodeSelector={"topology.kubernetes.io/zone": "a"})
    result = rewritten(policy, obj, "training")
    assert result["spec"]["nodeSelector"] == {"topology.kubernetes.io/zone": "a", **H100_NODES}


def test_conflicting_node_selector_is_denied_not_overwritten(policy):
    obj = pod(gpu(4), nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    decision = mutate(policy, obj, "training")
    assert not decision.allowed
    assert decision.rules == ("node-selector-conflict",)
    assert not decision.patch
    assert 'tenant "training"' in decision.message
    assert "NVIDIA-A100-SXM4-80GB" in decision.message


def test_matching_node_selector_is_left_alone(policy):
    obj = pod(gpu(4), nodeSelector=dict(H100_NODES))
    decision = mutate(policy, obj, "training")
    assert decision.allowed
    assert not any("nodeSelector" in op["path"] for op in decision.patch)


# --- 3. Queue ----------------------------------------------------------------------------------


def test_kueue_label_is_stamped_when_absent(policy):
    result = rewritten(policy, pod(gpu(2)), "training")
    assert result["metadata"]["labels"] == {KUEUE_QUEUE_LABEL: "training"}


def test_kueue_label_already_set_is_kept(policy):
    obj = pod(gpu(2), labels={KUEUE_QUEUE_LABEL: "training-urgent"})
    result = rewritten(policy, obj, "training")
    assert result["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training-urgent"


def test_kueue_label_goes_on_the_job_not_the_template(policy):
    result = rewritten(policy, job(), "training")
    assert result["metadata"]["labels"] == {KUEUE_QUEUE_LABEL: "training"}
    assert KUEUE_QUEUE_LABEL not in result["spec"]["template"].get("metadata", {}).get("labels", {})


@pytest.fixture(scope="module")
def volcano_policy(make_policy):
    return make_policy(backend="volcano")


@pytest.mark.parametrize(
    ("scheduler", "expected"),
    [(None, "volcano"), ("", "volcano"), ("default-scheduler", "volcano"), ("custom", "custom")],
)
def test_volcano_scheduler_name(volcano_policy, scheduler, expected):
    extra = {} if scheduler is None else {"schedulerName": scheduler}
    result = rewritten(volcano_policy, pod(gpu(2), **extra), "training")
    assert result["spec"]["schedulerName"] == expected


def test_volcano_queue_annotation_and_no_kueue_label(volcano_policy):
    result = rewritten(volcano_policy, pod(gpu(2)), "training")
    assert result["metadata"]["annotations"][VOLCANO_QUEUE_ANNOTATION] == "training"
    assert KUEUE_QUEUE_LABEL not in result["metadata"].get("labels", {})


def test_volcano_job_gets_spec_queue(volcano_policy):
    obj = volcano_job(("worker", template(gpu(2))))
    result = rewritten(volcano_policy, obj, "training")
    assert result["spec"]["queue"] == "training"
    assert result["spec"]["schedulerName"] == "volcano"
    worker = result["spec"]["tasks"][0]["template"]
    assert worker["spec"]["schedulerName"] == "volcano"
    assert worker["metadata"]["annotations"][VOLCANO_QUEUE_ANNOTATION] == "training"


def test_volcano_job_queue_already_set_is_kept(volcano_policy):
    obj = volcano_job(("worker", template(gpu(2))), queue="training-batch")
    assert rewritten(volcano_policy, obj, "training")["spec"]["queue"] == "training-batch"


# --- 4. Provenance -----------------------------------------------------------------------------


def test_provenance_annotations_and_warnings(policy):
    obj = pod(gpu(1), annotations={"quotaguard.dev/gpu-memory": "8Gi"})
    decision = mutate(policy, obj, "inference")
    annotations = applied(obj, decision)["metadata"]["annotations"]
    change = "main: nvidia.com/gpu=1 -> nvidia.com/mig-1g.10gb=1"
    assert annotations[TENANT_ANNOTATION] == "inference"
    assert annotations[REWRITTEN_ANNOTATION] == change
    assert [w.split(" (")[0] for w in decision.warnings] == [change]
    assert all(len(w) < 120 for w in decision.warnings)
    assert decision.audit == {"tenant": "inference", "rewritten": change}


def test_spoofed_tenant_annotation_is_corrected(policy):
    obj = pod(gpu(2), annotations={TENANT_ANNOTATION: "inference"})
    assert rewritten(policy, obj, "training")["metadata"]["annotations"][TENANT_ANNOTATION] == (
        "training"
    )


def test_job_template_is_rewritten_and_annotated(policy):
    obj = job(template(gpu(1), annotations={"quotaguard.dev/gpu-memory": "8Gi"}))
    result = rewritten(policy, obj, "inference")
    pod_template = result["spec"]["template"]
    assert pod_template["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/mig-1g.10gb": "1"
    }
    assert pod_template["metadata"]["annotations"][TENANT_ANNOTATION] == "inference"
    assert result["metadata"]["annotations"][REWRITTEN_ANNOTATION].startswith("main: ")


def test_hints_on_the_job_apply_to_its_template(policy):
    obj = job(annotations={"quotaguard.dev/gpu-memory": "8Gi"})
    result = rewritten(policy, obj, "inference")
    limits = result["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/mig-1g.10gb": "1"}


def test_jobset_and_volcano_changes_name_the_template(policy):
    obj = jobset(("workers", template(gpu(1), annotations={"quotaguard.dev/gpu-memory": "8Gi"})))
    decision = mutate(policy, obj, "nb-a")
    assert (
        decision.audit["rewritten"] == "workers/main: nvidia.com/gpu=1 -> nvidia.com/mig-1g.10gb=1"
    )
    obj = volcano_job(("ps", template(container("ps"))), ("worker", template(gpu(1))))
    decision = mutate(policy, obj, "nb-a")
    result = applied(obj, decision)
    assert decision.audit["rewritten"] == "worker/main: nvidia.com/gpu=1 -> nvidia.com/gpu.shared=1"
    assert "metadata" not in result["spec"]["tasks"][0]["template"]  # CPU-only task untouched


# --- What is left alone ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "parent",
    [
        owner("Job", "batch/v1"),
        owner("Job", "batch.volcano.sh/v1alpha1"),
        owner("JobSet", "jobset.x-k8s.io/v1alpha2"),
    ],
)
def test_pods_of_workloads_are_not_rewritten(policy, parent):
    obj = recorded(pod(gpu(1), annotations={"quotaguard.dev/tenant": "notebooks"}, owners=[parent]))
    decision = mutate(policy, obj, "nb-a", creator_trusted=True)
    assert decision.allowed
    assert decision.patch == ()
    # the same owner reference and stamp from anyone else are not believed
    forged = mutate(policy, obj, "nb-a")
    assert list(limits_of(applied(obj, forged))) == ["nvidia.com/gpu.shared"]


@pytest.mark.parametrize(
    "record",
    [None, "main=nvidia.com/gpu:8", "main=nvidia.com/gpu.shared:1"],
    ids=["tenant-stamp-only", "another-ask", "stale"],
)
def test_a_stamp_without_the_record_of_what_the_pod_asks_is_no_decision(policy, record):
    """The tenant stamp written by hand (no record), or a record of other GPUs than the Pod
    asks for (its template's GPUs changed after the decision), is not believed even from the
    owner's controller: the Pod is decided like any other."""
    annotations = {"quotaguard.dev/tenant": "notebooks"}
    if record is not None:
        annotations[DECIDED_ANNOTATION] = record
    obj = pod(gpu(1), annotations=annotations, owners=[owner("Job", "batch/v1")])
    decision = mutate(policy, obj, "nb-a", creator_trusted=True)
    result = applied(obj, decision)
    assert list(limits_of(result)) == ["nvidia.com/gpu.shared"]
    assert result["metadata"]["annotations"][DECIDED_ANNOTATION] == "main=nvidia.com/gpu.shared:1"


def test_mutation_records_what_each_gpu_template_asks_for_after_the_rewrite(policy):
    obj = jobset(("launcher", template(container("cpu"))), ("workers", template(gpu(1))))
    result = rewritten(policy, obj, "nb-a")
    jobs = result["spec"]["replicatedJobs"]
    workers = jobs[1]["template"]["spec"]["template"]["metadata"]["annotations"]
    assert workers[DECIDED_ANNOTATION] == "main=nvidia.com/gpu.shared:1"
    assert "metadata" not in jobs[0]["template"]["spec"]["template"]  # CPU-only: no record
    # a Job the JobSet controller makes from the template asks for what the record says
    assert recorded(job(jobs[1]["template"]["spec"]["template"])) == job(
        jobs[1]["template"]["spec"]["template"]
    )


def test_pods_of_a_replicaset_are_rewritten(policy):
    obj = pod(gpu(1), owners=[owner("ReplicaSet", "apps/v1")])
    assert list(limits_of(rewritten(policy, obj, "nb-a"))) == ["nvidia.com/gpu.shared"]


@pytest.mark.parametrize(
    ("obj", "namespace", "operation"),
    [
        (pod(gpu(1)), "kube-system", "CREATE"),  # exempt
        (pod(gpu(1)), "gpu-operator", "CREATE"),  # exempt
        (pod(gpu(1)), "default", "CREATE"),  # no tenant
        (pod(container(limits={"cpu": "1"})), "training", "CREATE"),  # no GPUs
        (pod(gpu(1)), "training", "UPDATE"),
        (
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {}, "spec": {}},
            "training",
            "CREATE",
        ),
    ],
)
def test_left_alone(policy, obj, namespace, operation):
    decision = mutate(policy, obj, namespace, operation=operation)
    assert decision.allowed
    assert decision.patch == ()
    assert decision.warnings == ()


def test_input_object_is_not_modified(policy):
    obj = pod(gpu(1), annotations={"quotaguard.dev/gpu-memory": "8Gi"})
    before = repr(obj)
    mutate(policy, obj, "inference")
    assert repr(obj) == before


def test_unparsable_memory_hint_warns_and_is_ignored(policy):
    obj = pod(gpu(1), annotations={"quotaguard.dev/gpu-memory": "8GB"})
    decision = mutate(policy, obj, "nb-a")
    assert list(limits_of(applied(obj, decision))) == ["nvidia.com/gpu.shared"]
    assert any("8GB" in w and "not a memory size" in w for w in decision.warnings)
