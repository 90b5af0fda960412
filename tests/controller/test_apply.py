"""Server-side apply: which 409s are field conflicts, and whose fields may be taken over."""

from __future__ import annotations

import json

from quotaguard.controller.server_side_apply import (
    FieldConflict,
    appliers,
    apply_body,
    field_conflicts,
    may_force,
)

# The Status a kube-apiserver (v1.35) answers an apply that would change another manager's field.
CONFLICT_STATUS = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'Apply failed with 1 conflict: conflict with "argocd-controller" using '
    "kueue.x-k8s.io/v1beta2: .spec.resourceGroups",
    "reason": "Conflict",
    "details": {
        "name": "training",
        "group": "kueue.x-k8s.io",
        "kind": "clusterqueues",
        "causes": [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "argocd-controller" using kueue.x-k8s.io/v1beta2',
                "field": ".spec.resourceGroups",
            }
        ],
    },
    "code": 409,
}
STALE_STATUS = {
    "kind": "Status",
    "reason": "Conflict",
    "message": 'Operation cannot be fulfilled on clusterqueues.kueue.x-k8s.io "training": '
    "the object has been modified; please apply your changes to the latest version",
    "details": {"name": "training", "kind": "clusterqueues"},
    "code": 409,
}
MANAGED = [
    {"manager": "kubectl-client-side-apply", "operation": "Update"},
    {"manager": "argocd-controller", "operation": "Apply"},
    {"manager": "quotaguard", "operation": "Apply"},
]


def test_a_field_conflict_names_its_field_and_manager_from_the_raw_body():
    raw = json.dumps(CONFLICT_STATUS).encode()
    assert field_conflicts(raw) == (FieldConflict(".spec.resourceGroups", "argocd-controller"),)


def test_a_stale_resource_version_or_an_unreadable_body_is_no_field_conflict():
    assert field_conflicts(json.dumps(STALE_STATUS)) == ()
    assert field_conflicts(b"<html>bad gateway</html>") == ()
    assert field_conflicts(None) == ()


def test_appliers_are_the_other_managers_that_applied():
    assert appliers(MANAGED) == {"argocd-controller"}
    assert appliers(None) == frozenset()


def test_a_manager_that_applied_is_never_forced_over_unless_the_policy_says_so():
    argo = [FieldConflict(".spec.resourceGroups", "argocd-controller")]
    assert not may_force(argo, MANAGED, force_conflicts=False)
    assert may_force(argo, MANAGED, force_conflicts=True)


def test_fields_of_plain_writers_are_taken_over():
    kubectl = [FieldConflict(".spec.resourceGroups", "kubectl-client-side-apply")]
    assert may_force(kubectl, MANAGED, force_conflicts=False)
    mixed = [*kubectl, FieldConflict(".spec.cohortName", "argocd-controller")]
    assert not may_force(mixed, MANAGED, force_conflicts=False)


def test_the_apply_names_the_resource_version_it_was_built_from():
    body = apply_body(
        api_version="kueue.x-k8s.io/v1beta2",
        kind="ClusterQueue",
        name="training",
        resource_version="41",
        spec={"cohortName": "ml"},
    )
    assert body == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "training", "resourceVersion": "41"},
        "spec": {"cohortName": "ml"},
    }


def test_the_same_conflicts_in_another_order_are_the_same_conflicts():
    causes = [
        {"reason": "FieldManagerConflict", "message": f'conflict with "{m}" using v1', "field": f}
        for m, f in (("b", ".spec.x"), ("a", ".spec.x"), ("a", ".spec.cohortName"))
    ]
    one = field_conflicts({"details": {"causes": causes}})
    other = field_conflicts({"details": {"causes": causes[::-1]}})
    assert one == other and len(one) == 3
