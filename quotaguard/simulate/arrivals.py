"""Every arriving workload of a trace through admission: the webhook's own code, offline.

A trace has `count` copies of each manifest and many entries share one, so the decision for a
(namespace, manifest) pair is computed once and reused: admission is deterministic.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quotaguard.admission.engine import review_offline
from quotaguard.admission.reviews import BadReview, make_review
from quotaguard.kube.podspec import pod_gpus, pod_templates, workload_kind
from quotaguard.policy.model import TenantPolicy
from quotaguard.simulate.queueing import Request, request_of
from quotaguard.simulate.trace import Trace


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

    def kept_of(self, ran: float) -> float:
        """Seconds of a run of `ran` seconds that survive an eviction (its last checkpoint)."""
        if not self.checkpoint_every:
            return 0.0
        return (ran // self.checkpoint_every) * self.checkpoint_every


@dataclass
class AdmissionCache:
    """(namespace, manifest as canonical JSON) -> verdict; counts what it saved."""

    verdicts: dict[tuple[str, str], Verdict] = field(default_factory=dict)
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
    return [1]


def _as_pod(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    """A bare pod (template) manifest as the Pod the API server would receive."""
    if "apiVersion" in manifest or "kind" in manifest:
        return manifest
    return {"apiVersion": "v1", "kind": "Pod", **manifest}


def verdict_of(policy: TenantPolicy, manifest: Mapping[str, Any], namespace: str) -> Verdict:
    """Mutation then validation of one manifest, and the GPU classes it then asks for."""
    obj = _as_pod(manifest)
    body = make_review(obj, namespace=namespace, uid="simulate")
    try:
        review, patched = review_offline(policy, body)
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
    units: dict[str, int] = {}
    unknown: list[str] = []
    templates = pod_templates(patched)
    for template, pods in zip(templates, _multiplicity(patched), strict=False):
        selector = template.spec.get("nodeSelector")
        labels = dict(selector) if isinstance(selector, Mapping) else {}
        for resource, count in pod_gpus(template.spec, policy.gpu_resources).items():
            gpu_class = policy.class_of_resource(resource, labels)
            if gpu_class is None:
                candidates = policy.classes_by_resource.get(resource, [])
                gpu_class = candidates[0] if candidates else None
            if gpu_class is None:
                unknown.append(resource)
                continue
            units[gpu_class.name] = units.get(gpu_class.name, 0) + count * pods
    classes = policy.classes_by_name
    gpus = sum(float(classes[name].gpu_equivalent) * count for name, count in units.items())
    return Verdict(
        allowed=True,
        request=request_of(units),
        gpus=gpus,
        unknown=tuple(sorted(set(unknown))),
    )


def arrivals(
    policy: TenantPolicy, trace: Trace, *, cache: AdmissionCache | None = None
) -> list[Arrival]:
    """Every workload of the trace, in arrival order (ties in trace order), with its verdict."""
    cache = cache if cache is not None else AdmissionCache()
    found: list[Arrival] = []
    for entry in trace.workloads:
        key = (entry.namespace, json.dumps(entry.manifest, sort_keys=True, default=str))
        verdict = cache.verdicts.get(key)
        if verdict is None:
            verdict = verdict_of(policy, entry.manifest, entry.namespace)
            cache.verdicts[key] = verdict
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
                    verdict=verdict,
                    priority=entry.priority,
                    checkpoint_every=entry.checkpoint_every,
                )
            )
    found.sort(key=lambda arrival: (arrival.at, arrival.id))
    return found
