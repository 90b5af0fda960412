"""The TrainJob runtimes the webhook reads: a small cache, listed with the API client.

Admission judges a TrainJob with its runtime's trainer resources (`admission.runtimes`); the
engine takes them as data, and this keeps that data: every `interval` the webhook lists
ClusterTrainingRuntimes and TrainingRuntimes (all namespaces) in a worker thread and swaps
in the new snapshot. Runtimes change rarely (platform teams install them), so a list every
30 s is cheaper than a watch per replica and a new runtime is judged within that time.

A runtime created since the last list (a platform team installs one, a user submits a TrainJob
for it right away) is read on the miss with one GET, bounded so that TrainJobs naming made-up
runtimes cannot keep the webhook busy: a name missed is not asked again for 10 seconds, and
at most 3 such reads run per 10 seconds (1-second timeout); beyond that, the miss is a denial.

Every read of this state by admission is counted (`cluster_reads`): a TrainJob's decision (the
only kind whose decision reads the runtimes, `engine._with_runtime`) and every DRA lookup. The
decision cache keeps no answer whose deciding read the cluster, since the same request may be
answered otherwise once what was read changes.

Failures: the Trainer's CRDs not installed (404) is no runtime at all (no TrainJob can be
created either). Any other failure keeps the last snapshot that was read; before the first
one succeeds the snapshot carries the error, and a TrainJob that names a runtime is denied
with it (rule runtime-unreadable), never let through unjudged.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from quotaguard.admission import AdmissionReview, review
from quotaguard.admission.reviews import AdmissionRequest, request_namespace
from quotaguard.kube.client import NoClusterConfig, api_client, status_code
from quotaguard.kube.dra import ClaimSpec, DeviceClassInfo, DraLookup
from quotaguard.kube.kinds import kind_of
from quotaguard.kube.trainingruntime import (
    CLUSTER_RUNTIME,
    GROUP,
    RuntimeKey,
    TrainingRuntimes,
    key_of_runtime,
    runtime_ref,
    runtimes_of,
)
from quotaguard.policy.model import TenantPolicy

log = logging.getLogger("quotaguard.webhook")

VERSION = "v1alpha1"
PLURALS = ("clustertrainingruntimes", "trainingruntimes")
Lister = Callable[[str], list[Any]]  # plural -> items
Getter = Callable[[RuntimeKey], Any]  # one runtime, None when there is none
MISS_WINDOW = 10.0  # seconds a missed name is not asked again; the budget's window
MISS_READS = 3  # reads on a miss per window


class RuntimeCache:
    """The latest runtimes read; `snapshot` is what admission is given."""

    def __init__(
        self,
        lister: Lister | None,
        getter: Getter | None = None,
        *,
        error: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lister = lister
        self._getter = getter
        self._clock = clock
        self.snapshot = TrainingRuntimes(error=error or "not read yet")
        self._dra: DraLookup | None = None
        self._cluster_reads = 0
        self._reads_lock = threading.Lock()  # large reviews are decided in worker threads
        self._read_once = False
        self._missed: dict[RuntimeKey, float] = {}  # key -> when it was last asked for
        self._reads: list[float] = []  # when the reads on a miss of the window were

    @property
    def dra(self) -> DraLookup | None:
        """What finds the DRA objects claims name (None: none known), each lookup counted."""
        return self._dra

    @dra.setter
    def dra(self, lookup: DraLookup | None) -> None:
        self._dra = None if lookup is None else CountedDra(lookup, self._count_read)

    def cluster_reads(self) -> int:
        """Reads of cluster state by admission so far (it only grows)."""
        return self._cluster_reads

    def _count_read(self) -> None:
        with self._reads_lock:
            self._cluster_reads += 1

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
        """`admission.review` with the current runtimes (a `ReviewFunction`); a runtime not
        in them is read once more (`read_missing`) before it is a denial."""
        if _reads_runtimes(body):
            self._count_read()
        answer = review(
            policy, body, operation_path=operation_path, runtimes=self.snapshot, dra=self.dra
        )
        response = answer["response"]
        denied = response.get("auditAnnotations", {}).get("denied")
        if response["allowed"] or denied != "runtime-unreadable" or self.snapshot.error:
            return answer
        key = _missing_key(body)
        if key is None or not self.read_missing(key):
            return answer
        return review(
            policy, body, operation_path=operation_path, runtimes=self.snapshot, dra=self.dra
        )

    def read_missing(self, key: RuntimeKey) -> bool:
        """Read one runtime the snapshot lacks, within the bounds above; True when found."""
        now = self._clock()
        if self._getter is None or now - self._missed.get(key, -MISS_WINDOW) < MISS_WINDOW:
            return False
        self._reads = [t for t in self._reads if now - t < MISS_WINDOW]
        if len(self._reads) >= MISS_READS:
            return False
        self._reads.append(now)
        self._missed[key] = now
        try:
            found = self._getter(key)
        except Exception as exc:
            if status_code(exc) != 404:
                log.warning("trainjob runtime not read", extra={"error": _short(exc)})
            return False
        if not isinstance(found, dict) or key_of_runtime(found) != key:
            return False
        self._missed.pop(key, None)
        self.snapshot = TrainingRuntimes({**self.snapshot.found, key: found})
        return True


class CountedDra:
    """A DraLookup that counts each lookup (`on_read`) before making it."""

    def __init__(self, lookup: DraLookup, on_read: Callable[[], None]) -> None:
        self._lookup = lookup
        self._on_read = on_read

    def template(self, namespace: str, name: str) -> ClaimSpec | None:
        self._on_read()
        return self._lookup.template(namespace, name)

    def claim(self, namespace: str, name: str) -> ClaimSpec | None:
        self._on_read()
        return self._lookup.claim(namespace, name)

    def device_class(self, name: str) -> DeviceClassInfo | None:
        self._on_read()
        return self._lookup.device_class(name)

    @property
    def knows_device_classes(self) -> bool:
        self._on_read()
        return self._lookup.knows_device_classes


def _reads_runtimes(body: object) -> bool:
    """Whether admission reads the runtimes to decide `body`: its object is a TrainJob, as the
    engine tells kinds (`kind_of`)."""
    request = body.get("request") if isinstance(body, dict) else None
    obj = request.get("object") if isinstance(request, dict) else None
    kind = kind_of(obj) if isinstance(obj, dict) else None
    return kind is not None and kind.id == "TrainJob"


def _missing_key(body: object) -> RuntimeKey | None:
    request = body.get("request") if isinstance(body, dict) else None
    if not isinstance(request, dict) or not isinstance(request.get("object"), dict):
        return None
    return runtime_ref(request["object"], request_namespace(cast(AdmissionRequest, request)))


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

    def getter(key: RuntimeKey) -> Any:
        kind, namespace, name = key
        if kind == CLUSTER_RUNTIME:
            return objects.get_cluster_custom_object(
                GROUP, VERSION, PLURALS[0], name, _request_timeout=1
            )
        return objects.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURALS[1], name, _request_timeout=1
        )

    return RuntimeCache(lister, getter)
