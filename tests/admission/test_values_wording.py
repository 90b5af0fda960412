"""Denials of GPU values, queues outside tenants and schedulers, in full as the user reads them:
a fractional request (alone or beside a whole limit), requests that differ from limits, a
tenant's queue named outside any tenant, another scheduler on a Volcano task or Job."""

from __future__ import annotations

from typing import Any

import pytest

from quotaguard.admission import validate
from quotaguard.admission.names import KUEUE_QUEUE_LABEL
from quotaguard.policy.model import TenantPolicy

from .builders import container, gpu, pod, template, volcano_job

GPU = "nvidia.com/gpu"
WHOLE = "GPUs come in whole units: use a positive whole number such as 1"


def test_a_fractional_request_alone_is_denied_twice_with_the_section_named(
    policy: TenantPolicy,
) -> None:
    decision = validate(policy, pod(container(requests={GPU: "1.5"})), "training")
    assert decision.rules == ("requests-only", "gpu-value")
    assert decision.audit["tenant"] == "training"
    assert decision.message == (
        'tenant "training": (1) container "main" sets nvidia.com/gpu only in requests; GPUs must '
        'be set in limits: move it to limits (requests may be left out) (2) container "main" '
        f'asks for nvidia.com/gpu: "1.5" in requests; {WHOLE}'
    )


def test_a_fractional_request_beside_a_whole_limit_and_the_next_container_are_both_denied(
    policy: TenantPolicy,
) -> None:
    obj = pod(
        container(limits={GPU: 1}, requests={GPU: "1.5"}),
        container("side", limits={GPU: "0.5"}),
    )
    decision = validate(policy, obj, "training")
    assert decision.message == (
        f'tenant "training": (1) container "main" asks for nvidia.com/gpu: "1.5" in requests; '
        f'{WHOLE} (2) container "side" asks for nvidia.com/gpu: "0.5" in limits; {WHOLE}'
    )


def test_requests_below_limits_are_denied_with_what_to_do(policy: TenantPolicy) -> None:
    decision = validate(policy, pod(container(limits={GPU: 2}, requests={GPU: 1})), "training")
    assert decision.audit["tenant"] == "training"
    assert decision.message == (
        'tenant "training": container "main" requests nvidia.com/gpu=1 but limits it to 2; GPUs '
        "cannot be overcommitted: set requests equal to limits or leave requests out"
    )


def test_a_tenants_queue_outside_every_tenant_is_refused_without_a_tenant_named(
    make_policy: Any,
) -> None:
    lenient = make_policy(unmatchedNamespaces="allow")
    decision = validate(lenient, pod(gpu(1), labels={KUEUE_QUEUE_LABEL: "training"}), "default")
    assert "tenant" not in decision.audit
    assert decision.message == (
        'queue "training" (label kueue.x-k8s.io/queue-name) belongs to tenant "training"; '
        'workloads in namespace "default" may not use it: use a queue of your own, or run the '
        "workload in a tenant namespace"
    )


@pytest.fixture(scope="module")
def volcano(make_policy: Any) -> TenantPolicy:
    policy: TenantPolicy = make_policy(backend="volcano")
    return policy


@pytest.mark.parametrize(
    ("task_scheduler", "job_scheduler", "where"),
    [("gang", "volcano", "worker schedulerName"), ("volcano", "gang", "spec.schedulerName")],
    ids=["task", "job"],
)
def test_another_scheduler_on_a_volcano_task_or_job_names_where_it_is_set(
    volcano: TenantPolicy, task_scheduler: str, job_scheduler: str, where: str
) -> None:
    obj = volcano_job(("worker", template(gpu(1), schedulerName=task_scheduler)))
    obj["spec"]["schedulerName"] = job_scheduler
    assert validate(volcano, obj, "training").message == (
        f'tenant "training": {where} "gang" is not a scheduler of this cluster\'s GPU workloads '
        "(allowedSchedulers: volcano); another scheduler bypasses Volcano's queues and the GPU "
        'classes\' nodes: remove schedulerName (quotaguard sets it) or set it to "volcano"'
    )
