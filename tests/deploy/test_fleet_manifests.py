"""The `fleet` deploy component (chart: `fleet.enabled`): the controller also runs the fleet
component of serve, may read the MultiKueue objects and the workers' kubeconfig Secrets in
Kueue's namespace, and holds one more named Lease; nothing else changes."""

from __future__ import annotations

import pytest

from quotaguard.cli import build_parser
from quotaguard.controller.fleet_controller import FLEET_LEASE
from tests.deploy.manifests import Manifest, Renders, find, one, pod_spec

NS = "quotaguard-system"
CONTROLLER = {"kind": "ServiceAccount", "name": "quotaguard-controller", "namespace": NS}


def grants(role: Manifest) -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {
        (group, resource, verb, tuple(rule.get("resourceNames") or ()))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def controller_args(docs: list[Manifest]) -> list[str]:
    deployment = one(docs, "Deployment", "quotaguard-controller")
    return list(pod_spec(deployment)["containers"][0]["args"])


@pytest.mark.parametrize("tool", ["kustomize", "helm"])
def test_the_fleet_component_runs_the_fleet_with_exactly_its_grants(
    renders: Renders, tool: str
) -> None:
    base = renders(tool, [])
    assert not [d for d in base if "fleet" in d["metadata"]["name"]]
    assert "fleet" not in controller_args(base)[2]
    docs = renders(tool, ["fleet"])
    args = controller_args(docs)
    assert args[args.index("--components") + 1] == "controller,reports,fleet"
    build_parser().parse_args(args)
    multikueue = one(docs, "ClusterRole", "quotaguard-controller-fleet")
    assert grants(multikueue) == {
        ("kueue.x-k8s.io", "multikueueconfigs", "get", ()),
        ("kueue.x-k8s.io", "multikueueclusters", "get", ()),
    }
    secrets = one(docs, "Role", "quotaguard-controller-fleet-kubeconfigs")
    assert secrets["metadata"]["namespace"] == "kueue-system"
    assert grants(secrets) == {("", "secrets", "get", ())}
    lease = one(docs, "Role", "quotaguard-controller-fleet-lease")
    assert lease["metadata"]["namespace"] == NS
    assert grants(lease) == {
        ("coordination.k8s.io", "leases", verb, (FLEET_LEASE,)) for verb in ("get", "update")
    }
    bindings = find(docs, "RoleBinding") + find(docs, "ClusterRoleBinding")
    for binding in bindings:
        if "fleet" in binding["metadata"]["name"]:
            assert binding["subjects"] == [CONTROLLER]
    added = {d["metadata"]["name"] for d in docs} - {d["metadata"]["name"] for d in base}
    assert added == {
        "quotaguard-controller-fleet",
        "quotaguard-controller-fleet-kubeconfigs",
        "quotaguard-controller-fleet-lease",
    }
