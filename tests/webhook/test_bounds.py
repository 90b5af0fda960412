"""The webhook's bounds against a hostile tenant: huge objects, lying encodings, huge numbers."""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quotaguard.admission.reviews import make_review
from quotaguard.webhook.server import MAX_CONTAINERS

from .conftest import Certificates, Client, LiveServer, loaded_certificate, loaded_sample_store


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Client, LiveServer, Any]]:
    certificates = Certificates(tmp_path_factory.mktemp("bounds"))
    certificate = loaded_certificate(certificates)
    store = loaded_sample_store()
    with LiveServer(store, certificate) as server:
        client = Client(server.webhook_port, certificates.client_context())
        yield client, server, certificates
        client.close()


def gpu_pod(containers: int, gpus: Any = "1") -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": gpus}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "big"},
        "spec": {
            "containers": [
                {"name": f"c{i}", "image": "x", "resources": resources} for i in range(containers)
            ]
        },
    }


def body_of(pod: dict[str, Any]) -> bytes:
    return json.dumps(make_review(pod, namespace="training", uid="u-big")).encode()


def test_a_pod_of_24000_gpu_containers_is_denied_with_a_small_answer(live) -> None:
    client = live[0]
    body = body_of(gpu_pod(24_000))
    assert len(body) > 1024 * 1024
    for path in ("/mutate", "/validate"):
        status, answer = client.post(path, body)
        response = answer["response"]
        assert (status, response["uid"], response["allowed"]) == (200, "u-big", False)
        assert f"at most {MAX_CONTAINERS} containers" in response["status"]["message"]
        assert len(json.dumps(answer)) < 1000


def test_the_container_limit_itself_is_reviewed_and_its_warnings_are_few(live) -> None:
    status, answer = live[0].post("/mutate", body_of(gpu_pod(MAX_CONTAINERS)))
    assert status == 200 and answer["response"]["allowed"]
    warnings = answer["response"].get("warnings", [])
    assert len(warnings) <= 20


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_body_that_is_not_what_its_encoding_says_is_a_json_400(live, encoding) -> None:
    certificates = live[2]
    connection = http.client.HTTPSConnection(
        "127.0.0.1", live[1].webhook_port, context=certificates.client_context(), timeout=10
    )
    try:
        headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
        connection.request("POST", "/mutate", body=b"this is not compressed", headers=headers)
        response = connection.getresponse()
        assert response.status == 400
        assert "unreadable" in json.loads(response.read())["error"]
    finally:
        connection.close()


HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile"


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_a_400_digit_gpu_count_is_a_denial_not_an_internal_error(live, path) -> None:
    body = (HOSTILE / "review-400-digit-gpus.json").read_bytes()
    status, answer = live[0].post(path, body)
    assert status == 200
    response = answer["response"]
    if path == "/mutate":  # queued, but not rewritten into a 400-digit class request
        assert response["allowed"]
        assert "9" * 400 not in base64.b64decode(response["patch"]).decode()
        return
    assert response["status"]["code"] == 403
    assert "gpu-value" in response["auditAnnotations"]["denied"].split(",")
    assert "9" * 100 not in response["status"]["message"]  # the value is cut short
