"""Properties over generated workloads: idempotence and patches that apply (odd input is in
test_odd_input.py)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaguard.admission import make_review, mutate, review_offline, validate

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
