"""/metrics and /reports ask the real API server who calls and what they may read.

`quotaguard serve` runs with the default `--reports-auth kubernetes` and the identity its pods
have: the service account quotaguard-webhook with only the RBAC of config/rbac-reports.yaml
(create TokenReviews and SubjectAccessReviews). Callers present service-account tokens from
`kubectl create token`: Prometheus' account, bound to quotaguard-reports-reader, reads; a
tenant's account, authenticated but not bound, is refused; no token or a forged one is 401."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from e2e.cluster import REPO_ROOT, Cluster, QuotaguardServer

POLICY = REPO_ROOT / "config" / "policy.yaml"
RBAC = REPO_ROOT / "config" / "rbac-reports.yaml"
NS = "quotaguard-system"


@pytest.fixture(scope="module")
def cluster(make_module_cluster: Callable[..., Cluster]) -> Cluster:
    return make_module_cluster(controllers=False, kwok=False, crds=False)


def token(cluster: Cluster, namespace: str, account: str) -> str:
    return cluster.kubectl("create", "token", account, "-n", namespace).stdout.strip()


def kubeconfig_of(cluster: Cluster, bearer: str, path: Path) -> Path:
    """The cluster's kubeconfig with this token as its user (a pod's in-cluster identity)."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "admin", "user": {"token": bearer}}]
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def server(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[QuotaguardServer]:
    for namespace in (NS, "monitoring", "team-a"):
        cluster.create_namespace(namespace)
    for namespace, account in (
        (NS, "quotaguard-webhook"),
        ("monitoring", "prometheus"),
        ("team-a", "alice"),
    ):
        cluster.kubectl("create", "serviceaccount", account, "-n", namespace)
    cluster.apply(RBAC.read_text())
    cluster.kubectl(
        "create",
        "clusterrolebinding",
        "prometheus-reads-quotaguard",
        "--clusterrole=quotaguard-reports-reader",
        "--serviceaccount=monitoring:prometheus",
    )
    own = kubeconfig_of(
        cluster,
        token(cluster, NS, "quotaguard-webhook"),
        tmp_path_factory.mktemp("reports") / "kubeconfig",
    )
    server = cluster.serve_quotaguard(
        POLICY,
        components="reports",
        name="qg-reports",
        args=["--reports-auth", "kubernetes", "--kubeconfig", str(own)],
    )
    yield server
    cluster.stop_quotaguard(server)


def get(server: QuotaguardServer, path: str, bearer: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"{server.http_url}{path}")
    if bearer is not None:
        request.add_header("Authorization", f"Bearer {bearer}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_reader_bound_to_the_role_reads_metrics_and_reports(
    cluster: Cluster, server: QuotaguardServer
) -> None:
    prometheus = token(cluster, "monitoring", "prometheus")
    status, body = get(server, "/metrics", prometheus)
    assert status == 200, body
    assert "quotaguard_" in body
    status, body = get(server, "/reports/quota.csv", prometheus)
    assert status == 503 and body.startswith("no quota report")  # past access: no controller


def test_a_tenant_is_refused_and_no_token_is_401(
    cluster: Cluster, server: QuotaguardServer
) -> None:
    alice = token(cluster, "team-a", "alice")
    for path in ("/metrics", "/reports", "/reports/quota"):
        status, body = get(server, path, alice)
        assert status == 403, (path, body)
        assert "system:serviceaccount:team-a:alice may not get" in body
        assert get(server, path)[0] == 401
        assert get(server, path, "not-a-token")[0] == 401
    for probe in ("/healthz", "/readyz"):
        assert get(server, probe)[0] == 200
