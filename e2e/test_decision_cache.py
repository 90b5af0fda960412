"""The webhook's decision cache through a real kube-apiserver: the Pods the ReplicaSet controller
makes for one Deployment are answered from it (the API server sends them with new names and uids
and no request name), and a policy changed under a running Deployment judges its next Pods by
the new policy, not by the answers kept for the old one.

Hits and misses are read from the server's `quotaguard_webhook_decision_cache_*` counters on its
HTTP port. No node is needed: admission happens at creation, the Pods may stay Pending.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.cluster import REPO_ROOT, Cluster, QuotaguardServer, wait_until

POLICY = REPO_ROOT / "config" / "policy.yaml"
NAMESPACE = "serving-decision-cache-e2e"  # tenant inference ("serving-*")
MIG_1G = "nvidia.com/mig-1g.10gb"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# config/policy.yaml with the 1g.10gb slice (and its quota) taken from the inference tenant.
WITHOUT_1G = (
    POLICY.read_text()
    .replace("allowedClasses: [h100-1g.10gb, h100-3g.40gb]", "allowedClasses: [h100-3g.40gb]")
    .replace("        h100-1g.10gb: {guaranteed: 14, max: 28}\n", "")
)


def metric(server: QuotaguardServer, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def _series(server: QuotaguardServer, *names: str) -> str:
    """The lines of /metrics naming any of `names` (what a failure shows)."""
    with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=5) as response:
        lines = response.read().decode().splitlines()
    return "\n".join(line for line in lines if any(name in line for name in names))


def cache_hits(server: QuotaguardServer, operation: str) -> float:
    return metric(server, "quotaguard_webhook_decision_cache_hits_total", operation=operation)


def pod_validations(server: QuotaguardServer) -> float:
    return metric(
        server,
        "quotaguard_admission_requests_total",
        kind="Pod",
        operation="validate",
        result="allowed",
    )


def deployment(name: str, replicas: int) -> dict[str, Any]:
    template = {
        "metadata": {
            "labels": {"app": name},
            "annotations": {"quotaguard.dev/gpu-memory": "10Gi"},
        },
        "spec": {
            "containers": [
                {
                    "name": "server",
                    "image": "registry.example/embedder:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        },
    }


def pods_of(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = cluster.get("pods", "-l", f"app={name}", namespace=NAMESPACE)[
        "items"
    ]
    return found


@pytest.fixture(scope="module")
def served(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[QuotaguardServer, Path]]:
    policy = tmp_path_factory.mktemp("decision-cache-policy") / "policy.yaml"
    policy.write_text(POLICY.read_text())
    cluster.create_namespace(NAMESPACE)
    server = cluster.serve_quotaguard(
        policy, components="webhook", args=["--policy-poll-interval", "0.3"], name="qg-cache-e2e"
    )
    try:
        yield server, policy
    finally:
        cluster.stop_quotaguard(server)
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", "--ignore-not-found")


def test_the_pods_of_a_deployment_are_answered_from_the_cache(
    cluster: Cluster, served: tuple[QuotaguardServer, Path]
) -> None:
    server, _ = served
    before = {operation: cache_hits(server, operation) for operation in ("mutate", "validate")}
    before["pods"] = pod_validations(server)
    cluster.create(deployment("embedder", 4))
    pods = wait_until(
        lambda: (found := pods_of(cluster, "embedder")) and len(found) == 4 and found,
        timeout=60,
        what="the Deployment's 4 Pods",
    )
    for pod in pods:
        container = pod["spec"]["containers"][0]
        assert container["resources"]["limits"] == {MIG_1G: "1"}
        assert pod["metadata"]["labels"][QUEUE_LABEL] == "inference"
    wait_until(
        lambda: pod_validations(server) - before["pods"] >= 4,
        timeout=30,
        what="the webhook's answers to the 4 Pods",
    )
    # The first Pod is decided, the three others answered from the cache (the API server sends
    # them only to validation: the registrations' matchConditions skip a decided template).
    hits = cache_hits(server, "validate") - before["validate"]
    assert hits >= 3, _series(server, "quotaguard_webhook_decision_cache", "admission_requests")


def test_a_policy_change_judges_the_next_replicas_by_the_new_policy(
    cluster: Cluster, served: tuple[QuotaguardServer, Path]
) -> None:
    """The answers kept for the Deployment's Pods were the old policy's; once the policy takes
    the 1g.10gb slice from the tenant, a scale-up's Pods are refused."""
    server, policy = served
    cluster.create(deployment("scaled", 2))
    wait_until(lambda: len(pods_of(cluster, "scaled")) == 2, timeout=60, what="2 Pods")
    generation = metric(server, "quotaguard_policy_generation")
    policy.write_text(WITHOUT_1G)
    try:
        wait_until(
            lambda: metric(server, "quotaguard_policy_generation") > generation,
            timeout=30,
            what="the changed policy in force",
        )
        cluster.kubectl("scale", "deployment", "scaled", "--replicas=4", "-n", NAMESPACE)
        refusal = wait_until(
            lambda: _failed_create(cluster),
            timeout=60,
            what="the ReplicaSet's FailedCreate event naming quotaguard's refusal",
        )
        assert "h100-1g.10gb" in refusal, refusal
        assert len(pods_of(cluster, "scaled")) == 2
    finally:
        policy.write_text(POLICY.read_text())


def _failed_create(cluster: Cluster) -> str | None:
    events = cluster.get("events", "--field-selector", "reason=FailedCreate", namespace=NAMESPACE)
    for event in events["items"]:
        message = str(event.get("message", ""))
        if "scaled-" in json.dumps(event["involvedObject"]) and "quotaguard" in message:
            return message
    return None
