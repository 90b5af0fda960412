"""What an interval reads besides the watch caches (blocking: each runs in a worker thread):
the GPU operator's definitions of the configs the policy's pools name, the resources Kueue
counts DRA devices under (its Configuration's deviceClassMappings), and GPU telemetry from
Prometheus. None ever raises: without them the controller plans as it would without."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from quotaguard.geometry import operatorconfigs
from quotaguard.policy.kueue_dra import (
    KUEUE_CONFIG_KEY,
    KUEUE_CONFIGMAP,
    device_class_mappings,
    with_kueue_resources,
)
from quotaguard.policy.model import TenantPolicy
from quotaguard.telemetry.metrics_sources import PrometheusClient, TelemetryError
from quotaguard.telemetry.series import GpuMetrics

log = logging.getLogger("quotaguard.controller")


def with_operator_configs(
    core: Any, policy: TenantPolicy, namespace: str, timeout: float
) -> tuple[TenantPolicy, str | None]:
    """The policy with the GPU operator's definitions of the configs its pools name but it
    does not define, and what was wrong with reading them (None: nothing); unreadable: the
    policy as it is (its configs are planned as built in)."""
    if not operatorconfigs.undefined_configs(policy):
        return policy, None
    where = f"ConfigMap {namespace}/{operatorconfigs.CONFIGMAP}"
    try:
        found = core.read_namespaced_config_map(
            operatorconfigs.CONFIGMAP, namespace, _request_timeout=timeout
        )
    except Exception as exc:
        status = getattr(exc, "status", None)
        return policy, f"cannot read {where} ({status or type(exc).__name__})"
    read = operatorconfigs.from_configmap(policy, found.data)
    if read is None:
        return policy, f"{where} has no key {operatorconfigs.CONFIG_KEY}"
    merged, problems = read
    return merged, f"{where}: {'; '.join(problems)}" if problems else None


def with_kueue_device_classes(
    core: Any, policy: TenantPolicy, namespace: str, timeout: float
) -> tuple[TenantPolicy, str | None]:
    """The policy with the resource Kueue counts each DRA-only class's DeviceClass under, from
    Kueue's Configuration in `namespace` (kueue backend, DRA classes only), and what was wrong
    with reading it or disagrees with the policy (None: nothing)."""
    if policy.spec.backend != "kueue" or not policy.dra_classes:
        return policy, None
    where = f"ConfigMap {namespace}/{KUEUE_CONFIGMAP}"
    try:
        found = core.read_namespaced_config_map(
            KUEUE_CONFIGMAP, namespace, _request_timeout=timeout
        )
    except Exception as exc:
        status = getattr(exc, "status", None)
        return policy, f"cannot read {where} ({status or type(exc).__name__})"
    text = (found.data or {}).get(KUEUE_CONFIG_KEY)
    if not isinstance(text, str):
        return policy, f"{where} has no key {KUEUE_CONFIG_KEY}"
    mappings, unread = device_class_mappings(text)
    merged, disagreements = with_kueue_resources(policy, mappings)
    problems = unread + disagreements
    return merged, f"{where}: {'; '.join(problems)}" if problems else None


def say_kueue_problem(problem: str | None, said: str | None) -> str | None:
    """Log a problem with Kueue's deviceClassMappings when it is not the one said last."""
    if problem is not None and problem != said:
        log.warning("%s; DRA classes without dra.kueueResource are written as declared", problem)
    return problem


def say_config_problem(problem: str | None, said: str | None) -> str | None:
    """Log a problem with the operator's configs when it is not the one said last; returns
    what is said now."""
    if problem is not None and problem != said:
        log.warning("%s; the configs it lacks are planned as built in, if they are", problem)
    return problem


@dataclass
class ClusterOverlays:
    """What the cluster adds to the policy each interval (the operator's configs, Kueue's
    deviceClassMappings), each problem logged once until it changes."""

    namespaces: tuple[str, str]  # the GPU operator's, Kueue's
    timeout: float
    said: tuple[str | None, str | None] = (None, None)

    def apply(self, core: Any, policy: TenantPolicy) -> TenantPolicy:
        operator, kueue = self.namespaces
        policy, config_problem = with_operator_configs(core, policy, operator, self.timeout)
        policy, kueue_problem = with_kueue_device_classes(core, policy, kueue, self.timeout)
        self.said = (
            say_config_problem(config_problem, self.said[0]),
            say_kueue_problem(kueue_problem, self.said[1]),
        )
        return policy


def gpu_metrics(
    url: str | None, timeout: float, policy: TenantPolicy, now: float
) -> GpuMetrics | str:
    """GPU telemetry from Prometheus, or why there is none."""
    if url is None:
        return "no --prometheus-url given"
    try:
        metrics = PrometheusClient(url, timeout=timeout).gpu_metrics(policy.spec.rebalance, now=now)
    except TelemetryError as exc:
        log.warning("planning without GPU telemetry: %s", exc)
        return str(exc)
    if metrics.note:
        log.warning("GPU telemetry: %s", metrics.note)
    return metrics
