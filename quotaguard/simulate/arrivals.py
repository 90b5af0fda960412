"""Every arriving workload of a trace through admission: the webhook's own code, offline.

A trace has `count` copies of each manifest and many entries share one, so the decision for a
(namespace, manifest) pair is computed once and reused: admission is deterministic.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quotaguard.admission.answers import answer_offline
from quotaguard.admission.reviews import BadReview, make_review
from quotaguard.kube.dra import NO_DRA_OBJECTS, DraObjects
from quotaguard.kube.podspec import pod_gpus, pod_templates, workload_kind
from quotaguard.policy.fungibility import class_order, compatible
from quotaguard.policy.model import GpuClass, Tenant, TenantPolicy
from quotaguard.simulate.claim_rows import ClaimRows
from quotaguard.simulate.placement import Gang, PodNeed
from quotaguard.simulate.queued import Request, request_of
from quotaguard.simulate.trace import Trace

MAX_OPTIONS = 8  # flavor combinations tried for one workload


@dataclass(frozen=True, slots=True)
class Verdict:
    """What admission made of one manifest in one namespace."""

    allowed: bool
    message: str = ""  # the denial message a user would see
    rules: str = ""  # the denied rules, comma-separated
    request: Request = ()  # class -> units of the workload as admitted (every pod)
    gpus: float = 0.0  # the same in whole-GPU equivalents
    # GPU resources of the admitted object that no class of the policy offers
    unknown: tuple[str, ...] = ()
    # every class assignment Kueue may try, in flavor order (the first is `request`), with
    # its pods for placement and its whole-GPU equivalents
    options: tuple[Request, ...] = ()
    gangs: tuple[Gang, ...] = ()
    option_gpus: tuple[float, ...] = ()
    dra: bool = False  # some of its GPUs come through DRA claims or served resources

    def gang_of(self, request: Request) -> Gang:
        for option, gang in zip(self.options, self.gangs, strict=True):
            if option == request:
                return gang
        return self.gangs[0] if self.gangs else ()

    def gpus_of(self, request: Request) -> float:
        for option, gpus in zip(self.options, self.option_gpus, strict=True):
            if option == request:
                return gpus
        return self.gpus


@dataclass(frozen=True, slots=True)
class Arrival:
    id: int
    at: float
    duration: float
    namespace: str
    tenant: str | None  # None: a namespace no tenant owns, or an exempt one
    entry: int  # index of the trace entry it comes from
    verdict: Verdict
    priority: int = 0
    checkpoint_every: float | None = None  # seconds; None: an evicted run starts over
    uses: float = 1.0  # share of `written.gpus` it keeps busy
    # the workload as written, without quotaguard: nothing rewritten, nothing denied
    written: Verdict = Verdict(allowed=True)
    dra: bool = False  # its GPUs come through DRA (its verdict's, or the trace's `dra: true`)

    def kept_of(self, ran: float) -> float:
        """Seconds of a run of `ran` seconds that survive an eviction (its last checkpoint)."""
        if not self.checkpoint_every:
            return 0.0
        return (ran // self.checkpoint_every) * self.checkpoint_every


@dataclass
class AdmissionCache:
    """(namespace, manifest as canonical JSON) -> verdict; counts what it saved."""

    verdicts: dict[tuple[str, str], tuple[Verdict, Verdict]] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0


def _multiplicity(obj: Mapping[str, Any]) -> list[int]:
    """How many pods run from each pod template of the object, in `pod_templates` order."""
    kind = workload_kind(obj)
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)

    def whole(value: object, default: int = 1) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    if kind == "Job":
        return [whole(spec.get("parallelism"))]
    if kind == "VolcanoJob":
        tasks = spec.get("tasks")
        return [
            whole(task.get("replicas"))
            for task in (tasks if isinstance(tasks, list) else [])
            if isinstance(task, Mapping)
        ]
    if kind == "JobSet":
        found = []
        replicated_jobs = spec.get("replicatedJobs")
        for replicated in replicated_jobs if isinstance(replicated_jobs, list) else []:
            replicated = replicated if isinstance(replicated, Mapping) else {}
            template = replicated.get("template")
            job = template.get("spec") if isinstance(template, Mapping) else None
            parallelism = job.get("parallelism") if isinstance(job, Mapping) else None
            found.append(whole(replicated.get("replicas")) * whole(parallelism))
        return found
    if kind == "SparkApplication":  # the driver, then the executors
        return [1, _spark_executors(spec)]
    return [1]


def _spark_executors(spec: Mapping[str, Any]) -> int:
    executor = spec.get("executor")
    instances = executor.get("instances") if isinstance(executor, Mapping) else None
    return instances if isinstance(instances, int) and not isinstance(instances, bool) else 1


def _as_pod(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    """A bare pod (template) manifest as the Pod the API server would receive."""
    if "apiVersion" in manifest or "kind" in manifest:
        return manifest
    return {"apiVersion": "v1", "kind": "Pod", **manifest}


# one row per (template, resource): pods, units per pod, selector, candidate classes
_Row = tuple[int, int, tuple[tuple[str, str], ...], list[GpuClass]]


def _requests(
    policy: TenantPolicy, obj: Mapping[str, Any], tenant: Tenant | None, claims: ClaimRows
) -> tuple[list[tuple[Request, Gang, float]], list[str]]:
    """Every (request, pods, GPU equivalents) the object's pods may be admitted as, in
    flavor order (classes of one resource in the order the tenant's queue lists them: its
    rewrite lists' order, then the policy's), and the GPU resources no class offers."""
    rows, unknown = _candidate_rows(policy, obj, tenant)
    rows += claims.rows(obj, _multiplicity(obj))
    classes = policy.classes_by_name
    found = []
    for choice in itertools.islice(itertools.product(*(row[3] for row in rows)), MAX_OPTIONS):
        units: dict[str, int] = {}
        gang: list[PodNeed] = []
        for (pods, count, pod_selector, _), gpu_class in zip(rows, choice, strict=True):
            units[gpu_class.name] = units.get(gpu_class.name, 0) + count * pods
            if pods and count:
                gang.append(PodNeed(pods, ((gpu_class.name, count),), pod_selector))
        gpus = sum(float(classes[name].gpu_equivalent) * n for name, n in units.items())
        found.append((request_of(units), tuple(gang), gpus))
    return found, sorted(set(unknown))


def _candidate_rows(
    policy: TenantPolicy, obj: Mapping[str, Any], tenant: Tenant | None
) -> tuple[list[_Row], list[str]]:
    """Per pod template and GPU resource, the classes that may serve it in flavor order; and
    the resources no class offers."""
    unknown: list[str] = []
    rank = {c.name: at for at, c in enumerate(class_order(policy, tenant))}
    rows: list[_Row] = []
    templates = pod_templates(obj)
    for template, pods in zip(templates, _multiplicity(obj), strict=False):
        raw = template.spec.get("nodeSelector")
        selector = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
        for resource, count in pod_gpus(template.spec, policy.gpu_resources).items():
            candidates = sorted(
                (
                    c
                    for c in policy.classes_by_resource.get(resource, [])
                    if compatible(c, selector)
                ),
                key=lambda c: rank[c.name],
            )
            if not candidates:
                unknown.append(resource)
                continue
            rows.append((pods, count, tuple(sorted(selector.items())), candidates))
    return rows, unknown


def _allowed(
    policy: TenantPolicy, obj: Mapping[str, Any], tenant: Tenant | None, claims: ClaimRows
) -> Verdict:
    options, unknown = _requests(policy, obj, tenant, claims)
    dra = claims.dra(obj)
    if not options or not options[0][0]:
        return Verdict(allowed=True, unknown=tuple(unknown), dra=dra)
    return Verdict(
        allowed=True,
        request=options[0][0],
        gpus=options[0][2],
        unknown=tuple(unknown),
        options=tuple(option for option, _, _ in options),
        gangs=tuple(gang for _, gang, _ in options),
        option_gpus=tuple(gpus for _, _, gpus in options),
        dra=dra,
    )


def verdict_of(
    policy: TenantPolicy,
    manifest: Mapping[str, Any],
    namespace: str,
    dra: DraObjects = NO_DRA_OBJECTS,
) -> Verdict:
    """Mutation then validation of one manifest, and the GPU classes it then asks for (its
    claims resolved against `dra`, as the webhook resolves them against the cluster)."""
    obj = _as_pod(manifest)
    body = make_review(obj, namespace=namespace, uid="simulate")
    try:
        review, patched = answer_offline(policy, body, dra=dra)
    except BadReview as exc:  # the API server would refuse it before admission
        return Verdict(allowed=False, message=str(exc), rules="malformed")
    response = review.get("response", {})
    if not response.get("allowed", False):
        status = response.get("status", {})
        audit = response.get("auditAnnotations", {})
        return Verdict(
            allowed=False,
            message=str(status.get("message", "denied")),
            rules=str(audit.get("denied", "")),
        )
    tenant = None if policy.exempt(namespace) else policy.tenant_of(namespace)
    return _allowed(policy, patched, tenant, ClaimRows(policy, namespace, dra))


def written_of(
    policy: TenantPolicy,
    manifest: Mapping[str, Any],
    namespace: str = "default",
    dra: DraObjects = NO_DRA_OBJECTS,
) -> Verdict:
    """The manifest as its author wrote it, without the webhook: nothing rewritten or denied."""
    return _allowed(policy, _as_pod(manifest), None, ClaimRows(policy, namespace, dra))


def arrivals(
    policy: TenantPolicy, trace: Trace, *, cache: AdmissionCache | None = None
) -> list[Arrival]:
    """Every workload of the trace, in arrival order (ties in trace order), with its verdict."""
    cache = cache if cache is not None else AdmissionCache()
    found: list[Arrival] = []
    for entry in trace.workloads:
        key = (entry.namespace, json.dumps(entry.manifest, sort_keys=True, default=str))
        verdicts = cache.verdicts.get(key)
        if verdicts is None:
            verdicts = (
                verdict_of(policy, entry.manifest, entry.namespace, trace.dra_objects),
                written_of(policy, entry.manifest, entry.namespace, trace.dra_objects),
            )
            cache.verdicts[key] = verdicts
            cache.misses += 1
        else:
            cache.hits += 1
        cache.hits += entry.count - 1
        exempt = policy.exempt(entry.namespace)
        tenant = None if exempt else policy.tenant_of(entry.namespace)
        for at in entry.arrival_times():
            found.append(
                Arrival(
                    id=len(found),
                    at=at,
                    duration=entry.duration,
                    namespace=entry.namespace,
                    tenant=tenant.name if tenant is not None else None,
                    entry=entry.index,
                    verdict=verdicts[0],
                    priority=entry.priority,
                    checkpoint_every=entry.checkpoint_every,
                    uses=entry.uses,
                    written=verdicts[1],
                    dra=entry.dra or verdicts[0].dra,
                )
            )
    found.sort(key=lambda arrival: (arrival.at, arrival.id))
    return found
