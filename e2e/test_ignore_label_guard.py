"""quotaguard.dev/ignore=true takes a namespace out of every quotaguard webhook. A tenant who
may create or label namespaces (self-service, Capsule, HNC) must not be able to set it: the
ValidatingAdmissionPolicy of webhook/ignore-label-policy.yaml, as the real API server
evaluates it, lets only the identities it names add, change or remove the label.

Users are impersonated by the admin client (`kubectl --as --as-group`), each with RBAC rights
to create and patch namespaces, so that a refusal comes from the policy and not from RBAC.
Before the policy is applied, the tenant labels their namespace freely: today's way through."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from e2e.cluster import REPO_ROOT, Cluster, wait_until

POLICY_FILES = [
    REPO_ROOT / "webhook" / "ignore-label-policy.yaml",
    REPO_ROOT / "webhook" / "ignore-label-policy-binding.yaml",
]
IGNORE = "quotaguard.dev/ignore"
TENANT = ("alice", "tenant-a")
PLATFORM_GROUP = ("carol", "platform-admins")
PLATFORM_BOT = ("platform-bot", "bots")


@pytest.fixture(scope="module")
def cluster(make_module_cluster: Callable[..., Cluster]) -> Iterator[Cluster]:
    """A control plane of its own: the policy guards every Namespace write of the cluster."""
    cluster = make_module_cluster(controllers=False, kwok=False, crds=False)
    cluster.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "namespace-self-service"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["namespaces"],
                        "verbs": ["get", "list", "create", "update", "patch"],
                    }
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "namespace-self-service"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "namespace-self-service",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
                    for group in ("tenant-a", "platform-admins", "bots")
                ],
            },
        ]
    )
    yield cluster


def guard(allowed_users: list[str], allowed_groups: list[str]) -> list[dict[str, Any]]:
    """The shipped policy and binding, the allow-list set as an overlay (or the chart) sets it."""
    policy, binding = (yaml.safe_load(path.read_text()) for path in POLICY_FILES)
    for variable in policy["spec"]["variables"]:
        if variable["name"] == "allowedUsers":
            variable["expression"] = json.dumps(allowed_users)
        elif variable["name"] == "allowedGroups":
            variable["expression"] = json.dumps(allowed_groups)
    return [policy, binding]


def as_user(cluster: Cluster, who: tuple[str, str], *args: str, manifest: Any = None) -> Any:
    user, group = who
    return cluster.kubectl(
        f"--as={user}",
        f"--as-group={group}",
        *args,
        input=json.dumps(manifest) if manifest is not None else None,
        check=False,
    )


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels or {}},
    }


def labels_of(cluster: Cluster, name: str) -> dict[str, str]:
    labels: dict[str, str] = cluster.get("namespace", name)["metadata"].get("labels", {})
    return labels


def install(cluster: Cluster, allowed_users: list[str], allowed_groups: list[str]) -> None:
    """Apply the guard and wait until the API server enforces it (its policy informer)."""
    cluster.apply(guard(allowed_users, allowed_groups))
    probe = namespace("guard-probe", {IGNORE: "true"})

    def enforced() -> bool:
        created = as_user(cluster, TENANT, "create", "-f", "-", manifest=probe)
        if created.returncode == 0:
            cluster.kubectl("label", "namespace", "guard-probe", f"{IGNORE}-")
            cluster.kubectl("delete", "namespace", "guard-probe", "--wait=false")
            return False
        return "quotaguard-ignore-label" in created.stderr

    wait_until(enforced, timeout=30, interval=0.5, what="the ignore-label policy enforced")


def test_only_the_named_identities_set_or_remove_the_ignore_label(cluster: Cluster) -> None:
    # Without the guard, the tenant opts their own namespace out of quotaguard.
    created = as_user(cluster, TENANT, "create", "-f", "-", manifest=namespace("team-a-before"))
    assert created.returncode == 0, created.stderr
    labelled = as_user(cluster, TENANT, "label", "namespace", "team-a-before", f"{IGNORE}=true")
    assert labelled.returncode == 0, labelled.stderr
    assert labels_of(cluster, "team-a-before")[IGNORE] == "true"

    install(cluster, ["platform-bot"], ["system:masters", "platform-admins"])

    # The tenant: no namespace created with it, none labelled with it, whatever the value.
    refused = as_user(
        cluster, TENANT, "create", "-f", "-", manifest=namespace("team-a-x", {IGNORE: "true"})
    )
    assert refused.returncode != 0
    assert "quotaguard-ignore-label" in refused.stderr
    assert "quotaguard.dev/ignore" in refused.stderr and "alice" in refused.stderr
    created = as_user(cluster, TENANT, "create", "-f", "-", manifest=namespace("team-a"))
    assert created.returncode == 0, created.stderr
    for value in ("true", "false", ""):
        labelled = as_user(cluster, TENANT, "label", "namespace", "team-a", f"{IGNORE}={value}")
        assert labelled.returncode != 0, value
        assert "quotaguard-ignore-label" in labelled.stderr
    assert IGNORE not in labels_of(cluster, "team-a")
    # ... nor remove it where the platform set it, nor change its value.
    removed = as_user(cluster, TENANT, "label", "namespace", "team-a-before", f"{IGNORE}-")
    assert removed.returncode != 0 and "quotaguard-ignore-label" in removed.stderr
    changed = as_user(
        cluster, TENANT, "label", "--overwrite", "namespace", "team-a-before", f"{IGNORE}=no"
    )
    assert changed.returncode != 0
    assert labels_of(cluster, "team-a-before")[IGNORE] == "true"
    # Every other write of the tenant's goes on, on a namespace with the label as without.
    for name in ("team-a", "team-a-before"):
        other = as_user(cluster, TENANT, "label", "namespace", name, "cost-center=42")
        assert other.returncode == 0, other.stderr
        assert labels_of(cluster, name)["cost-center"] == "42"

    # The named identities: a group, a user, and the cluster's break-glass group.
    for who, name in ((PLATFORM_GROUP, "team-a"), (PLATFORM_BOT, "team-a-before")):
        if name == "team-a":
            done = as_user(cluster, who, "label", "namespace", name, f"{IGNORE}=true")
        else:
            done = as_user(cluster, who, "label", "namespace", name, f"{IGNORE}-")
        assert done.returncode == 0, (who, done.stderr)
    assert labels_of(cluster, "team-a")[IGNORE] == "true"
    assert IGNORE not in labels_of(cluster, "team-a-before")
    cluster.kubectl("label", "namespace", "team-a", f"{IGNORE}-")  # admin: system:masters
    assert IGNORE not in labels_of(cluster, "team-a")
    cluster.create(namespace("gpu-operator", {IGNORE: "true"}))
    assert labels_of(cluster, "gpu-operator")[IGNORE] == "true"


def test_system_namespaces_and_their_controllers_keep_working(cluster: Cluster) -> None:
    """The policy has no namespace exemption: it refuses only a change of the label, so the
    writes Kubernetes itself makes to namespaces (kube-system included) are untouched."""
    install(cluster, [], ["system:masters"])
    controller = ("system:serviceaccount:kube-system:namespace-controller", "bots")
    for name in ("kube-system", "default", "kube-public"):
        annotated = as_user(
            cluster, controller, "annotate", "--overwrite", "namespace", name, "checked=yes"
        )
        assert annotated.returncode == 0, annotated.stderr
    created = as_user(cluster, controller, "create", "-f", "-", manifest=namespace("plain"))
    assert created.returncode == 0, created.stderr
    refused = as_user(cluster, controller, "label", "namespace", "kube-system", f"{IGNORE}=true")
    assert refused.returncode != 0 and "quotaguard-ignore-label" in refused.stderr
