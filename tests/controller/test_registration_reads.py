"""The controller's check that the cluster's webhook registrations send every resource name the
policy in force governs: the series an alert reads and the log line an operator sees, once per
change."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import pytest

from quotaguard.controller.registration_reads import RegistrationsCheck
from quotaguard.metrics.registry import REGISTRY
from quotaguard.policy.loader import load_policy_text
from quotaguard.webhook.registrations import configurations
from tests.deploy.test_sent_names import POLICY, POLICY_NAMES, SLICE

SERIES = "quotaguard_registrations_unsent_resource_names"


@dataclass
class Response:
    data: bytes


class ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"({status})")
        self.status = status


class Cluster:
    """CustomObjectsApi's generic GET over the webhook configurations the cluster holds."""

    def __init__(self, configs: list[dict[str, Any]], status: int | None = None) -> None:
        self.by_name = {c["metadata"]["name"]: c for c in configs}
        self.status = status
        self.reads = 0

    def get_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, **_: Any
    ) -> Response:
        self.reads += 1
        assert (group, version) == ("admissionregistration.k8s.io", "v1")
        if self.status is not None:
            raise ApiError(self.status)
        if name not in self.by_name or not plural.startswith(self.by_name[name]["kind"].lower()):
            raise ApiError(404)
        return Response(json.dumps(self.by_name[name]).encode())


def unsent(name: str) -> float | None:
    return REGISTRY.get_sample_value(SERIES, {"resource": name})


POLICY_IN_FORCE = load_policy_text(POLICY, "policy.yaml")


def test_names_the_registrations_do_not_send_are_exported_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    check = RegistrationsCheck(timeout=5)
    shipped = Cluster(configurations())
    with caplog.at_level(logging.INFO, logger="quotaguard.controller"):
        assert check.check(shipped, POLICY_IN_FORCE) == POLICY_NAMES
        assert check.check(shipped, POLICY_IN_FORCE) == POLICY_NAMES
    assert [unsent(name) for name in POLICY_NAMES] == [1.0, 1.0]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert f"do not send pods asking for {SLICE}, example.org/fabric" in errors[0].message
    # the release is upgraded: the series go, the error is not said again
    caplog.clear()
    assert check.check(Cluster(configurations(POLICY_NAMES)), POLICY_IN_FORCE) == ()
    assert [unsent(name) for name in POLICY_NAMES] == [None, None]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_unreadable_registrations_keep_the_last_finding_and_say_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    check = RegistrationsCheck(timeout=5)
    assert check.check(Cluster(configurations([SLICE])), POLICY_IN_FORCE) == ("example.org/fabric",)
    with caplog.at_level(logging.WARNING, logger="quotaguard.controller"):
        assert check.check(Cluster([], status=403), POLICY_IN_FORCE) == ("example.org/fabric",)
        assert check.check(Cluster(configurations()[:2]), POLICY_IN_FORCE) == (
            "example.org/fabric",
        )
    said = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert said[0].startswith("cannot read mutatingwebhookconfigurations/00-quotaguard-mutating")
    assert "403" in said[0]
    assert said[1].startswith(
        "validatingwebhookconfigurations/quotaguard-validating-resources is not in the cluster"
    )
    assert unsent("example.org/fabric") == 1.0


def test_a_policy_of_default_names_reads_nothing() -> None:
    cluster = Cluster([], status=500)
    policy = load_policy_text(
        POLICY.replace(SLICE, "nvidia.com/mig-1g.10gb").replace(
            "example.org/fabric", "deviceclass.resource.kubernetes.io/fabric.example.org"
        ),
        "policy.yaml",
    )
    assert RegistrationsCheck(timeout=5).check(cluster, policy) == ()
    assert cluster.reads == 0
