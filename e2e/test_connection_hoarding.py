"""A client that hoards the webhook's connections cannot stop the API server from calling it.

`quotaguard serve` with its default connection bounds, its webhooks registered with
failurePolicy Fail. A client on 127.0.0.2 opens 1,010 TLS connections to the webhook port and
keeps them idle (before per-client bounds this filled the listener's 1,000 and every GPU
CREATE in the cluster was refused with a 503). GPU Pods created through the API server
(127.0.0.1) must still come back rewritten, within the webhook's timeout."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Callable, Iterator

import pytest

from e2e.cluster import REPO_ROOT, Cluster, QuotaguardServer, gpu_pod

POLICY = REPO_ROOT / "config" / "policy.yaml"
TENANT_NS = "serving-hoard"  # tenant inference ("serving-*")
HOARDED = 1_010


@pytest.fixture(scope="module")
def cluster(make_module_cluster: Callable[..., Cluster]) -> Cluster:
    return make_module_cluster(controllers=False, kwok=False, crds=False)


@pytest.fixture(scope="module")
def server(cluster: Cluster) -> Iterator[QuotaguardServer]:
    cluster.create_namespace(TENANT_NS)
    server = cluster.serve_quotaguard(POLICY, components="webhook", name="qg-hoard")
    yield server
    cluster.stop_quotaguard(server)


def hoard(cluster: Cluster, server: QuotaguardServer) -> list[ssl.SSLSocket]:
    context = ssl.create_default_context(cafile=str(cluster.pki.ca_file))
    held = []
    for _ in range(HOARDED):
        raw = socket.create_connection(
            ("127.0.0.1", server.webhook_port), timeout=30, source_address=("127.0.0.2", 0)
        )
        held.append(context.wrap_socket(raw, server_hostname="127.0.0.1"))
    return held


def test_gpu_pods_are_rewritten_while_a_client_hoards_1010_connections(
    cluster: Cluster, server: QuotaguardServer
) -> None:
    held = hoard(cluster, server)
    try:
        for n in range(5):
            started = time.monotonic()
            created = cluster.create(gpu_pod(f"hoarded-{n}", TENANT_NS), check=False)
            took = time.monotonic() - started
            assert created.returncode == 0, created.stderr
            limits = json.loads(created.stdout)["spec"]["containers"][0]["resources"]["limits"]
            assert limits == {"nvidia.com/mig-1g.10gb": "1"}
            assert took < 5.0  # the webhook's timeout: the call never waited for a slot
    finally:
        for sock in held:
            sock.close()
