"""The container image agrees with the manifests that run it (no Docker engine needed)."""

from __future__ import annotations

import re

from tests.deploy.manifests import REPO, pod_spec, raw_manifests, workloads

DOCKERFILE = (REPO / "Dockerfile").read_text()


def instructions(name: str) -> list[str]:
    return [
        line.split(None, 1)[1].strip()
        for line in DOCKERFILE.splitlines()
        if line.upper().startswith(name + " ")
    ]


def test_base_image_is_an_exact_python_release() -> None:
    (default,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE, re.MULTILINE)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", default)
    assert all(base.startswith("${PYTHON_IMAGE}") for base in instructions("FROM"))


def test_image_runs_as_the_user_the_pods_require() -> None:
    (user,) = instructions("USER")
    uid = int(user.split(":")[0])
    assert uid != 0
    for workload in workloads(raw_manifests()):
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsUser"] == uid
        for container in spec["containers"]:
            assert "command" not in container  # the args go to the image's entrypoint
            assert container["args"][0] in ("serve", "certs")


def test_entrypoint_is_the_cli_and_ports_match_the_containers() -> None:
    assert instructions("ENTRYPOINT") == ['["quotaguard"]']
    (exposed,) = instructions("EXPOSE")
    container_ports = {
        port["containerPort"]
        for workload in workloads(raw_manifests())
        for container in pod_spec(workload)["containers"]
        for port in container.get("ports", [])
    }
    assert {int(p) for p in exposed.split()} == container_ports


def test_build_context_holds_only_the_package() -> None:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*"
    assert {p for p in patterns if p.startswith("!")} == {
        "!pyproject.toml",
        "!README.md",
        "!quotaguard/",
    }
