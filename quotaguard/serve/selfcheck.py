"""The check `helm test` runs inside the cluster: the webhook answers an AdmissionReview over
its Service, and a controller replica holds a live Lease.

    python -m quotaguard.serve.selfcheck --namespace quotaguard-system

One line per check on stdout (`ok webhook: ...`, `FAIL controller: ...`); exit 0 when both
pass, 1 when one fails, 2 on a usage error. The webhook is sent a review of a Pod without GPUs,
which every policy allows: the check proves the Service, the TLS listener and the policy are in
place, not who signed the certificate (the API server checks that against the caBundle).
"""

from __future__ import annotations

import argparse
import json
import secrets
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

LEASE_NAME = "quotaguard-controller"
WEBHOOK_SERVICE = "quotaguard-webhook"
TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Outcome:
    """One check's verdict, as printed."""

    name: str
    passed: bool
    detail: str

    def line(self) -> str:
        return f"{'ok' if self.passed else 'FAIL'} {self.name}: {self.detail}"


def probe_review(namespace: str, uid: str) -> dict[str, Any]:
    """An AdmissionReview of a CREATE of a Pod that asks for no GPU."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "quotaguard-selfcheck", "namespace": namespace},
        "spec": {"containers": [{"name": "check", "image": "registry.k8s.io/pause:3.10"}]},
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "quotaguard-selfcheck",
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:quotaguard:selfcheck"},
            "object": pod,
            "dryRun": True,
        },
    }


def judge_answer(status: int, body: bytes, uid: str) -> Outcome:
    """The webhook's answer to `probe_review`: HTTP 200, an AdmissionReview for the same uid
    that allows the Pod."""
    if status != 200:
        return Outcome("webhook", False, f"HTTP {status}: {body[:200]!r}")
    try:
        answer = json.loads(body)
    except ValueError:
        return Outcome("webhook", False, f"not JSON: {body[:200]!r}")
    response = answer.get("response") if isinstance(answer, dict) else None
    if not isinstance(response, dict) or answer.get("kind") != "AdmissionReview":
        return Outcome("webhook", False, "the answer is not an AdmissionReview")
    if response.get("uid") != uid:
        return Outcome("webhook", False, f"answered uid {response.get('uid')!r}, not {uid!r}")
    if response.get("allowed") is not True:
        message = (response.get("status") or {}).get("message", "")
        return Outcome("webhook", False, f"refused a Pod without GPUs: {message}")
    return Outcome("webhook", True, "answered an AdmissionReview and allowed a Pod without GPUs")


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def judge_lease(lease: dict[str, Any] | None, now: datetime) -> Outcome:
    """A Lease held by a replica that renewed it within its duration (as another replica would
    judge before taking it over)."""
    if lease is None:
        return Outcome("controller", False, f"no Lease {LEASE_NAME}: no replica ever led")
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    if not holder:
        return Outcome("controller", False, f"Lease {LEASE_NAME} is held by no replica")
    renewed = _parse_time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int) or isinstance(duration, bool):
        return Outcome("controller", False, f"Lease {LEASE_NAME} has no renewTime or duration")
    age = (now - renewed).total_seconds()
    if age > duration:
        return Outcome(
            "controller", False, f"{holder} last renewed {age:.0f}s ago, past its {duration}s"
        )
    return Outcome("controller", True, f"{holder} leads (renewed {max(age, 0):.0f}s ago)")


def post_review(url: str, review: dict[str, Any], *, timeout: float) -> tuple[int, bytes]:
    """POST the review over TLS without checking the chain (see the module's docstring)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(
        url,
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
            return int(answer.status), bytes(answer.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


def read_lease(namespace: str, kubeconfig: str | None) -> dict[str, Any] | None:
    """The controller's Lease as JSON, None when it does not exist."""
    from kubernetes import client

    from quotaguard.kube.client import api_client, status_code

    api: Any = client.CoordinationV1Api(api_client(kubeconfig))
    try:
        response = api.read_namespaced_lease(
            LEASE_NAME, namespace, _preload_content=False, _request_timeout=TIMEOUT_SECONDS
        )
    except Exception as exc:
        if status_code(exc) == 404:
            return None
        raise
    lease: dict[str, Any] = json.loads(response.data)
    return lease


def check_webhook(url: str, namespace: str, post: Callable[..., tuple[int, bytes]]) -> Outcome:
    uid = f"selfcheck-{secrets.token_hex(4)}"
    try:
        status, body = post(url, probe_review(namespace, uid), timeout=TIMEOUT_SECONDS)
    except OSError as exc:
        return Outcome("webhook", False, f"{url}: {exc}")
    return judge_answer(status, body, uid)


def check_controller(namespace: str, read: Callable[[], dict[str, Any] | None]) -> Outcome:
    try:
        lease = read()
    except Exception as exc:  # the API server's refusal or an unreachable server, as text
        return Outcome("controller", False, f"reading Lease {namespace}/{LEASE_NAME}: {exc}")
    return judge_lease(lease, datetime.now(UTC))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m quotaguard.serve.selfcheck",
        description="Check that quotaguard's webhook answers and its controller leads.",
        allow_abbrev=False,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--namespace", required=True, help="where quotaguard is installed")
    parser.add_argument(
        "--webhook-url",
        help="the webhook's validate URL (default: its Service in --namespace)",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (in a pod: its service account)")
    parser.add_argument(
        "--skip",
        choices=("webhook", "controller"),
        action="append",
        default=[],
        help="leave a check out (repeatable)",
    )
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    post: Callable[..., tuple[int, bytes]] = post_review,
    read: Callable[[str, str | None], dict[str, Any] | None] = read_lease,
) -> int:
    args = _parser().parse_args(argv)
    url = args.webhook_url or f"https://{WEBHOOK_SERVICE}.{args.namespace}.svc:443/validate"
    outcomes = []
    if "webhook" not in args.skip:
        outcomes.append(check_webhook(url, args.namespace, post))
    if "controller" not in args.skip:
        outcomes.append(
            check_controller(args.namespace, lambda: read(args.namespace, args.kubeconfig))
        )
    for outcome in outcomes:
        print(outcome.line(), flush=True)
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
