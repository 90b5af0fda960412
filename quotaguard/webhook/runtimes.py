"""The TrainJob runtimes the webhook reads: a small cache, listed with the API client.

Admission judges a TrainJob with its runtime's trainer resources (`admission.runtimes`); the
engine takes them as data, and this keeps that data: every `interval` the webhook lists
ClusterTrainingRuntimes and TrainingRuntimes (all namespaces) in a worker thread and swaps
in the new snapshot. Runtimes change rarely (platform teams install them), so a list every
30 s is cheaper than a watch per replica and a new runtime is judged within that time.

Failures: the Trainer's CRDs not installed (404) is no runtime at all (no TrainJob can be
created either). Any other failure keeps the last snapshot that was read; before the first
one succeeds the snapshot carries the error, and a TrainJob that names a runtime is denied
with it (rule runtime-unreadable), never let through unjudged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from quotaguard.admission import AdmissionReview, review
from quotaguard.kube.client import NoClusterConfig, api_client, status_code
from quotaguard.kube.trainingruntime import GROUP, TrainingRuntimes, runtimes_of
from quotaguard.policy.model import TenantPolicy

log = logging.getLogger("quotaguard.webhook")

VERSION = "v1alpha1"
PLURALS = ("clustertrainingruntimes", "trainingruntimes")
Lister = Callable[[str], list[Any]]  # plural -> items


class RuntimeCache:
    """The latest runtimes read; `snapshot` is what admission is given."""

    def __init__(self, lister: Lister | None, *, error: str | None = None) -> None:
        self._lister = lister
        self.snapshot = TrainingRuntimes(error=error or "not read yet")
        self._read_once = False

    def refresh(self) -> None:
        """List the runtimes once (blocking: call it in a worker thread)."""
        if self._lister is None:
            return
        items: list[Any] = []
        try:
            for plural in PLURALS:
                items.extend(_listed(self._lister, plural))
        except Exception as exc:  # any API failure: keep what was read, say why otherwise
            reason = f"listing {GROUP} runtimes failed: {_short(exc)}"
            log.warning("trainjob runtimes not read", extra={"error": reason})
            if not self._read_once:
                self.snapshot = TrainingRuntimes(error=reason)
            return
        self.snapshot = runtimes_of(items)
        self._read_once = True

    async def run(self, interval: float) -> None:
        while True:
            await asyncio.to_thread(self.refresh)
            await asyncio.sleep(interval)

    def review(
        self,
        policy: TenantPolicy,
        body: object,
        *,
        operation_path: Any,
    ) -> AdmissionReview:
        """`admission.review` with the current runtimes (a `ReviewFunction`)."""
        return review(policy, body, operation_path=operation_path, runtimes=self.snapshot)


def _listed(lister: Lister, plural: str) -> list[Any]:
    try:
        return lister(plural)
    except Exception as exc:
        if status_code(exc) == 404:  # the CRD is not installed: no runtimes of this kind
            return []
        raise


def _short(exc: BaseException) -> str:
    status = status_code(exc)
    reason = getattr(exc, "reason", None)
    if status is not None:
        return f"HTTP {status} {reason or ''}".strip()
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def cluster_cache(kubeconfig: str | None) -> RuntimeCache:
    """A cache that lists with the cluster's API (the same configuration as the controller's);
    without one, a cache whose snapshot says so."""
    try:
        api = api_client(kubeconfig, retries=1)
    except NoClusterConfig as exc:
        return RuntimeCache(None, error=f"no Kubernetes API configuration ({exc})")
    from kubernetes import client

    objects = client.CustomObjectsApi(api)

    def lister(plural: str) -> list[Any]:
        listed = objects.list_cluster_custom_object(GROUP, VERSION, plural, _request_timeout=10)
        items = listed.get("items") if isinstance(listed, dict) else None
        return items if isinstance(items, list) else []

    return RuntimeCache(lister)
