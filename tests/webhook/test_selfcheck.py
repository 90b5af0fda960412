"""The check `helm test` runs (quotaguard.serve.selfcheck): against a real webhook over TLS,
and its judgement of the controller's Lease."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from quotaguard.serve import selfcheck
from quotaguard.serve.selfcheck import judge_answer, judge_lease, main, post_review

from .conftest import LiveServer

NOW = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)


def lease(holder: str | None, renewed: datetime | None, duration: int = 15) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": duration}
    if holder is not None:
        spec["holderIdentity"] = holder
    if renewed is not None:
        spec["renewTime"] = renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"metadata": {"name": "quotaguard-controller"}, "spec": spec}


def live_lease(namespace: str, kubeconfig: str | None) -> dict[str, Any]:
    return lease("quotaguard-controller-0-abc123", datetime.now(UTC) - timedelta(seconds=2))


def test_a_running_webhook_passes_and_the_lease_holder_leads(
    server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"https://127.0.0.1:{server.webhook_port}/validate"
    code = main(["--namespace", "quotaguard-system", "--webhook-url", url], read=live_lease)
    lines = capsys.readouterr().out.splitlines()
    assert code == 0, lines
    assert lines[0].startswith("ok webhook: answered an AdmissionReview")
    assert lines[1].startswith("ok controller: quotaguard-controller-0-abc123 leads")


def test_the_probe_is_allowed_by_the_webhook_for_its_uid(server: LiveServer) -> None:
    review = selfcheck.probe_review("quotaguard-system", "uid-1")
    status, body = post_review(
        f"https://127.0.0.1:{server.webhook_port}/validate", review, timeout=5
    )
    assert status == 200
    assert judge_answer(status, body, "uid-1").passed
    assert not judge_answer(status, body, "uid-2").passed


def test_nothing_listening_fails_the_webhook_check_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = "https://127.0.0.1:9/validate"
    code = main(["--namespace", "q", "--webhook-url", url, "--skip", "controller"])
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith("FAIL webhook: https://127.0.0.1:9/validate:")


@pytest.mark.parametrize(
    ("status", "body", "detail"),
    [
        (503, b'{"error": "no policy loaded"}', "HTTP 503"),
        (200, b"<html>", "not JSON"),
        (200, b'{"kind": "Status"}', "not an AdmissionReview"),
        (
            200,
            json.dumps(
                {
                    "kind": "AdmissionReview",
                    "response": {"uid": "u", "allowed": False, "status": {"message": "no"}},
                }
            ).encode(),
            "refused a Pod without GPUs: no",
        ),
    ],
)
def test_a_wrong_answer_fails_with_what_was_wrong(status: int, body: bytes, detail: str) -> None:
    outcome = judge_answer(status, body, "u")
    assert not outcome.passed
    assert detail in outcome.detail


def test_a_lease_renewed_within_its_duration_leads() -> None:
    outcome = judge_lease(lease("c-0", NOW - timedelta(seconds=14)), NOW)
    assert outcome.passed and "c-0 leads" in outcome.detail


@pytest.mark.parametrize(
    ("found", "detail"),
    [
        (None, "no Lease quotaguard-controller"),
        (lease(None, NOW), "held by no replica"),
        (lease("", NOW), "held by no replica"),
        (lease("c-0", None), "no renewTime"),
        (lease("c-0", NOW - timedelta(seconds=16)), "past its 15s"),
    ],
)
def test_no_live_holder_fails(found: dict[str, Any] | None, detail: str) -> None:
    outcome = judge_lease(found, NOW)
    assert not outcome.passed
    assert detail in outcome.detail


def test_an_unreadable_lease_is_a_failure_line(capsys: pytest.CaptureFixture[str]) -> None:
    def refused(namespace: str, kubeconfig: str | None) -> dict[str, Any]:
        raise RuntimeError("(403) Forbidden")

    code = main(["--namespace", "qs", "--skip", "webhook"], read=refused)
    assert code == 1
    assert capsys.readouterr().out == (
        "FAIL controller: reading Lease qs/quotaguard-controller: (403) Forbidden\n"
    )
