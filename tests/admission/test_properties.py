"""Properties over generated workloads: idempotence and patches that apply (odd input is in
test_odd_input.py)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaguard.admission import make_review, mutate, review_offline, validate
from quotaguard.admission.patch import resolve
from quotaguard.admission.workload import decision_holds, template_views
from quotaguard.kube.quantity import parse_gpu_count

from .builders import applied
from .strategies import NAMESPACES, workloads


@pytest.fixture(scope="module")
def volcano_policy(make_policy):
    return make_policy(backend="volcano")


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(workloads(), st.sampled_from(NAMESPACES), st.booleans())
def test_mutating_the_mutated_object_yields_no_patch(
    policy, volcano_policy, obj, namespace, volcano
):
    chosen = volcano_policy if volcano else policy
    original = copy.deepcopy(obj)
    first = mutate(chosen, obj, namespace)
    assert obj == original  # pure
    if not first.allowed:
        return
    once = applied(obj, first)
    second = mutate(chosen, once, namespace)
    assert second.allowed
    assert second.patch == (), second.patch


@SETTINGS
@given(workloads(), st.sampled_from(NAMESPACES))
def test_offline_review_returns_the_patched_object(policy, obj, namespace):
    response, patched = review_offline(policy, make_review(obj, namespace=namespace, uid="u"))
    answer = response["response"]
    assert answer["uid"] == "u"
    if answer["allowed"]:
        mutation = mutate(policy, obj, namespace)
        assert patched == applied(obj, mutation)
        assert validate(policy, patched, namespace).allowed
    else:
        assert patched == obj
        assert answer["status"]["code"] == 403
        assert "patch" not in answer


@SETTINGS
@given(workloads(), st.sampled_from(NAMESPACES))
def test_the_decision_record_holds_for_what_mutation_leaves_and_for_nothing_else(
    policy, obj, namespace
):
    """Every GPU template mutation leaves carries the record of exactly what it asks for; the
    same template asking for one GPU more does not."""
    decision = mutate(policy, obj, namespace)
    if not decision.allowed or policy.tenant_of(namespace) is None:
        return
    result = applied(obj, decision)
    views = [v for v in template_views(result, policy.gpu_resources) if v.gpu_containers]
    assert all(decision_holds(view) for view in views)
    for view in views:
        container = view.gpu_containers[0]
        resource = container.resources[0]
        count = parse_gpu_count(container.limits.get(resource, container.requests.get(resource)))
        if count is None:
            continue
        raised = copy.deepcopy(result)
        node = resolve(raised, container.resources_pointer)
        assert isinstance(node, dict)
        for section in ("limits", "requests"):
            if resource in (node.get(section) or {}):
                node[section][resource] = str(count + 1)
        changed = template_views(raised, policy.gpu_resources)
        assert not all(decision_holds(v) for v in changed if v.gpu_containers)
