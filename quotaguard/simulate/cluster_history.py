"""A cluster's own history as a `simulate` trace: kube-state-metrics and DCGM series read from
Prometheus over a range, turned into the trace's nodes and workloads.

One workload per pod that asked for a GPU resource of the policy and ran within the range:

- `at`: the pod's creation (`kube_pod_created`), from the start of the range (0 when it was
  created before);
- `duration`: from its first sample in phase Running (`kube_pod_status_phase`) to its
  completion (`kube_pod_completion_time`), else to one step past its last Running sample (the
  end of the range when it still runs);
- `pod`: one container asking what the pod's containers asked in total
  (`kube_pod_container_resource_requests`, the resource names as kube-state-metrics writes
  them: `nvidia.com/gpu` is `nvidia_com_gpu`);
- `uses`: the mean of DCGM's `DCGM_FI_DEV_GPU_UTIL` over the pod's GPUs and samples, as a
  share (absent without DCGM series: the trace's default, busy all the time).

Nodes are those with allocatable GPU resources of the policy (`kube_node_status_allocatable`,
the most each offered over the range) and the GPU model of `kube_node_labels`
(`label_nvidia_com_gpu_product`, present when kube-state-metrics is run with
`--metric-labels-allowlist=nodes=[nvidia.com/gpu.product]`).

Pods whose namespace no tenant of the policy owns, or that never ran within the range, are
counted, not replayed. A gang (a Job of several pods) is replayed as its pods, each on its own.

Memory is bounded by the number of pods, not samples: the range is read in chunks of at most
`CHUNK_STEPS` steps (Prometheus answers at most 11,000 points per series), each chunk's answer
folded into one aggregate per pod and dropped; a chunk Prometheus refuses as too large is read
again in halves.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from quotaguard.policy.model import TenantPolicy
from quotaguard.telemetry.promjson import QueryRefused, TelemetryError

CHUNK_STEPS = 1000
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

# The queries, as docs/simulate.md lists them; {resources} is the policy's GPU resources as
# kube-state-metrics names them, joined by |.
_GPU_REQUESTS = 'kube_pod_container_resource_requests{{resource=~"{resources}"}}'
REQUESTS = f"sum by (namespace, pod, resource) ({_GPU_REQUESTS})"
_GPU_PODS = f"on (namespace, pod) {_GPU_REQUESTS}"
CREATED = "max by (namespace, pod) (kube_pod_created) and " + _GPU_PODS
RUNNING = 'max by (namespace, pod) (kube_pod_status_phase{{phase="Running"}} == 1) and ' + _GPU_PODS
COMPLETED = "max by (namespace, pod) (kube_pod_completion_time) and " + _GPU_PODS
GPU_UTIL = (
    "avg by (namespace, pod) (label_replace(label_replace(DCGM_FI_DEV_GPU_UTIL, "
    '"namespace", "$1", "exported_namespace", "(.+)"), "pod", "$1", "exported_pod", "(.+)"))'
)
NODE_GPUS = 'max by (node, resource) (kube_node_status_allocatable{{resource=~"{resources}"}})'
NODE_MODELS = (
    "max by (node, label_nvidia_com_gpu_product) "
    '(kube_node_labels{label_nvidia_com_gpu_product!=""})'
)


_FORMATTED = frozenset({REQUESTS, CREATED, RUNNING, COMPLETED, NODE_GPUS})


class HistoryError(ValueError):
    """The range holds nothing to replay; str() says what was looked for."""


class RangeSource(Protocol):
    """Prometheus's `/api/v1/query_range`: the answer's JSON, `QueryRefused` when it refuses
    (a smaller range may still be answered), `TelemetryError` when unreachable."""

    @property
    def name(self) -> str: ...

    def query_range(self, expr: str, start: float, end: float, step: float) -> object: ...


@dataclass(frozen=True, slots=True)
class Range:
    start: float
    end: float
    step: float


def metric_name(resource: str) -> str:
    """A resource name as kube-state-metrics writes it in its `resource` label."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", resource)


@dataclass(slots=True)
class PodHistory:
    """What the series said of one pod, folded chunk by chunk."""

    requests: dict[str, float] = field(default_factory=dict)
    created: float | None = None
    first_running: float | None = None
    last_running: float | None = None
    completed: float | None = None
    busy_sum: float = 0.0
    busy_samples: int = 0


@dataclass(slots=True)
class History:
    pods: dict[tuple[str, str], PodHistory] = field(default_factory=dict)
    node_gpus: dict[str, dict[str, float]] = field(default_factory=dict)
    node_models: dict[str, str] = field(default_factory=dict)

    def pod(self, labels: Mapping[str, str]) -> PodHistory | None:
        key = (labels.get("namespace", ""), labels.get("pod", ""))
        if not all(key):
            return None
        return self.pods.setdefault(key, PodHistory())


def _series(
    document: object, source: str
) -> Iterator[tuple[dict[str, str], list[float], list[float]]]:
    """(labels, times, values) of each series of a matrix answer; NaN and unreadable samples
    skipped."""
    data = document.get("data") if isinstance(document, Mapping) else None
    if not isinstance(document, Mapping) or document.get("status") != "success":
        raise TelemetryError(f"{source}: not a successful Prometheus answer")
    if not isinstance(data, Mapping) or data.get("resultType") != "matrix":
        raise TelemetryError(f"{source}: not a range query answer (resultType matrix)")
    for entry in data.get("result") or ():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("metric"), Mapping):
            continue
        labels = {str(k): str(v) for k, v in entry["metric"].items()}
        times, values = _points(entry.get("values"))
        if times:
            yield labels, times, values


def _points(points: object) -> tuple[list[float], list[float]]:
    times, values = [], []
    for point in points if isinstance(points, list) else ():
        try:
            at, value = float(point[0]), float(point[1])
        except (TypeError, ValueError, IndexError):
            continue
        if math.isfinite(value):
            times.append(at)
            values.append(value)
    return times, values


def _chunks(span: Range) -> Iterator[Range]:
    width = span.step * CHUNK_STEPS
    start = span.start
    while start <= span.end:
        end = min(span.end, start + width - span.step)
        yield Range(start, end, span.step)
        start = end + span.step


def _read(source: RangeSource, expr: str, span: Range) -> Iterator[object]:
    """The answers covering `span`, chunk by chunk; a refused chunk is asked again in halves."""
    for chunk in _chunks(span):
        yield from _read_chunk(source, expr, chunk)


def _read_chunk(source: RangeSource, expr: str, chunk: Range) -> Iterator[object]:
    try:
        yield source.query_range(expr, chunk.start, chunk.end, chunk.step)
    except QueryRefused:
        steps = round((chunk.end - chunk.start) / chunk.step)
        if steps < 1:
            raise
        middle = chunk.start + (steps // 2) * chunk.step
        yield from _read_chunk(source, expr, Range(chunk.start, middle, chunk.step))
        yield from _read_chunk(source, expr, Range(middle + chunk.step, chunk.end, chunk.step))


def _fold_pods(history: History, document: object, source: str, expr: str) -> None:
    for labels, times, values in _series(document, source):
        pod = history.pod(labels)
        if pod is None:
            continue
        if expr == REQUESTS:
            resource = labels.get("resource", "")
            pod.requests[resource] = max(pod.requests.get(resource, 0.0), max(values))
        elif expr == CREATED:
            pod.created = values[-1]
        elif expr == COMPLETED:
            pod.completed = values[-1]
        elif expr == RUNNING:
            first, last = times[0], times[-1]
            pod.first_running = (
                first if pod.first_running is None else min(pod.first_running, first)
            )
            pod.last_running = last if pod.last_running is None else max(pod.last_running, last)
        else:
            pod.busy_sum += sum(values)
            pod.busy_samples += len(values)


def _fold_nodes(history: History, document: object, source: str, expr: str) -> None:
    for labels, _, values in _series(document, source):
        node = labels.get("node")
        if not node:
            continue
        if expr == NODE_GPUS:
            gpus = history.node_gpus.setdefault(node, {})
            resource = labels.get("resource", "")
            gpus[resource] = max(gpus.get(resource, 0.0), max(values))
        elif labels.get("label_nvidia_com_gpu_product"):
            history.node_models[node] = labels["label_nvidia_com_gpu_product"]


def read_history(source: RangeSource, policy: TenantPolicy, span: Range) -> History:
    """Every query over the range, folded into one aggregate per pod and per node."""
    resources = "|".join(sorted(metric_name(r) for r in policy.gpu_resources))
    history = History()
    for template in (REQUESTS, CREATED, RUNNING, COMPLETED, GPU_UTIL):
        expr = template.format(resources=resources) if template in _FORMATTED else template
        for document in _read(source, expr, span):
            _fold_pods(history, document, source.name, template)
    for template in (NODE_GPUS, NODE_MODELS):
        expr = template.format(resources=resources) if template in _FORMATTED else template
        for document in _read(source, expr, span):
            _fold_nodes(history, document, source.name, template)
    return history


@dataclass(slots=True)
class Skipped:
    """What was seen but not replayed, for the verb to say."""

    no_tenant: Counter[str] = field(default_factory=Counter)  # pods by namespace
    never_ran: int = 0
    no_gpu_request: int = 0


def _workload(
    namespace: str, name: str, pod: PodHistory, span: Range, resources: Mapping[str, str]
) -> dict[str, Any]:
    assert pod.first_running is not None and pod.last_running is not None
    stop = pod.completed if pod.completed and pod.completed >= pod.first_running else None
    if stop is None:
        stop = pod.last_running + span.step
    stop = min(stop, span.end)
    created = pod.created if pod.created is not None else pod.first_running
    limits = {
        resources.get(resource, resource): str(math.ceil(amount))
        for resource, amount in sorted(pod.requests.items())
        if amount > 0
    }
    workload: dict[str, Any] = {
        "at": max(0, round(min(created, pod.first_running) - span.start)),
        "duration": max(1, round(stop - pod.first_running)),
        "namespace": namespace,
    }
    if pod.busy_samples:
        workload["uses"] = round(min(1.0, max(0.0, pod.busy_sum / pod.busy_samples / 100)), 2)
    workload["pod"] = {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }
    return workload


def history_trace(
    history: History, policy: TenantPolicy, span: Range, *, source: str
) -> tuple[dict[str, Any], Skipped]:
    """The trace document of a history, and what was left out; `HistoryError` when it holds
    no GPU node or no pod to replay."""
    resources = {metric_name(r): r for r in policy.gpu_resources}
    skipped = Skipped()
    workloads = []
    for (namespace, name), pod in sorted(history.pods.items()):
        if not any(amount > 0 for amount in pod.requests.values()):
            skipped.no_gpu_request += 1
        elif policy.tenant_of(namespace) is None or policy.exempt(namespace):
            skipped.no_tenant[namespace] += 1
        elif pod.first_running is None or pod.last_running is None:
            skipped.never_ran += 1
        else:
            workloads.append(_workload(namespace, name, pod, span, resources))
    nodes = _nodes(history, resources)
    if not workloads:
        raise HistoryError(_nothing_to_replay(skipped, len(history.pods)))
    if not nodes:
        raise HistoryError(
            "no node with allocatable GPUs of the policy in kube_node_status_allocatable "
            "over the range"
        )
    workloads.sort(key=lambda item: item["at"])
    document = {
        "description": f"{len(workloads)} GPU pods from {source}, "
        f"{_instant(span.start)} to {_instant(span.end)}, every {span.step:g}s",
        "horizon": f"{round(span.end - span.start)}s",
        "nodes": nodes,
        "workloads": workloads,
    }
    return document, skipped


def _nodes(history: History, resources: Mapping[str, str]) -> list[dict[str, Any]]:
    nodes = []
    for node, gpus in sorted(history.node_gpus.items()):
        if not any(amount >= 1 for amount in gpus.values()):
            continue
        model = history.node_models.get(node)
        allocatable = {
            resources.get(resource, resource): str(math.floor(amount))
            for resource, amount in sorted(gpus.items())
        }
        labels = {GPU_PRODUCT_LABEL: model} if model else {}
        nodes.append({"name": node, "labels": labels, "allocatable": allocatable})
    return nodes


def _nothing_to_replay(skipped: Skipped, seen: int) -> str:
    if not seen:
        return (
            "no pod asking for a GPU resource of the policy in kube-state-metrics over the "
            "range (kube_pod_container_resource_requests)"
        )
    parts = []
    if skipped.no_tenant:
        parts.append(f"{sum(skipped.no_tenant.values())} in namespaces no tenant owns")
    if skipped.never_ran:
        parts.append(f"{skipped.never_ran} never Running within the range")
    return f"{seen} GPU pods seen, none to replay: " + ", ".join(parts or ["none asked for GPUs"])


def _instant(seconds: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
