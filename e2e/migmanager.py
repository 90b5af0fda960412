"""A stand-in for the GPU operator's mig-manager on kwok nodes (the real one needs GPUs).

It acts on the node label as mig-manager does: when `nvidia.com/mig.config` names a config the
node has not applied yet, it sets `nvidia.com/mig.config.state=pending`, waits `delay`, then
either sets the node's capacity and allocatable to what the config gives (the device plugin's
part, mixed strategy) and the state `success`, or, on request (the node label
`e2e.quotaguard.dev/mig-manager: fail`), the state `failed` and leaves the resources alone.

It also records, per change, whether the node was cordoned and held GPU pods when the config
was applied, so tests can tell that quotaguard cordoned and waited first.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from quotaguard.policy.migconfig import (
    GPU_COUNT_LABEL,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    MigConfig,
    builtin_configs,
    gpu_model,
    node_resources,
)

FAIL_LABEL = "e2e.quotaguard.dev/mig-manager"


@dataclass(frozen=True)
class Applied:
    node: str
    config: str
    state: str  # success | failed
    cordoned: bool
    gpu_pods: int
    at: float


@dataclass
class MigManager:
    api_client: Any
    delay: float = 0.5
    # configs beside the built-in ones (as the GPU operator's ConfigMap gives mig-manager)
    configs: dict[str, MigConfig] = field(default_factory=dict)
    applied: list[Applied] = field(default_factory=list)
    _seen: dict[str, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    error: BaseException | None = None

    def start(self) -> MigManager:
        from kubernetes import client

        self._core = client.CoreV1Api(self.api_client)
        for node in self._core.list_node().items:  # what is on the nodes already is applied
            labels = node.metadata.labels or {}
            if MIG_CONFIG_LABEL in labels:
                self._seen[node.metadata.name] = labels[MIG_CONFIG_LABEL]
        self._thread = threading.Thread(target=self._run, name="mig-manager", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def forget(self, name: str) -> None:
        self._seen.pop(name, None)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for node in self._core.list_node().items:
                    self._reconcile(node)
            except BaseException as exc:  # reported to the test
                self.error = exc
                return
            self._stop.wait(0.1)

    def _gpu_pods(self, name: str) -> int:
        pods = self._core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}")
        busy = 0
        for pod in pods.items:
            if pod.status and pod.status.phase in ("Succeeded", "Failed"):
                continue
            for container in pod.spec.containers:
                limits = (container.resources and container.resources.limits) or {}
                if any(str(k).startswith("nvidia.com/") for k in limits):
                    busy += 1
                    break
        return busy

    def _reconcile(self, node: Any) -> None:
        name = node.metadata.name
        labels = node.metadata.labels or {}
        config = labels.get(MIG_CONFIG_LABEL)
        if config is None or self._seen.get(name) == config:
            return
        self._seen[name] = config
        self._label(name, {MIG_STATE_LABEL: "pending"})
        time.sleep(self.delay)
        cordoned = bool(node.spec.unschedulable)
        busy = self._gpu_pods(name)
        gpu = gpu_model(labels)
        layout = self.configs.get(config) or (builtin_configs(gpu).get(config) if gpu else None)
        if labels.get(FAIL_LABEL) == "fail" or layout is None:
            self._label(name, {MIG_STATE_LABEL: "failed"})
            self.applied.append(Applied(name, config, "failed", cordoned, busy, time.time()))
            return
        gpus = int(labels.get(GPU_COUNT_LABEL, "1"))
        offered = node_resources(layout, gpu or "", gpus)
        current = node.status.allocatable or {}
        resources: dict[str, str | None] = {
            key: None for key in current if str(key).startswith("nvidia.com/")
        }
        resources.update({key: str(value) for key, value in offered.items()})
        self._core.patch_node_status(
            name, {"status": {"capacity": resources, "allocatable": resources}}
        )
        self._label(name, {MIG_STATE_LABEL: "success"})
        self.applied.append(Applied(name, config, "success", cordoned, busy, time.time()))

    def _label(self, name: str, labels: dict[str, str]) -> None:
        self._core.patch_node(name, {"metadata": {"labels": labels}})
