"""The fleet read: which workers there are, their kubeconfigs, and each cluster's objects.

Workers come from the policy's `spec.fleet.clusters` and, when it names one, the manager's
`MultiKueueConfig` and its `MultiKueueCluster`s (the policy's kubeConfig wins for a cluster
both name). A kubeconfig is a Secret's `kubeconfig` key in `kubeConfigNamespace`, or a file.
Each read is bounded by `readTimeoutSeconds`; a worker that cannot be read is unreachable, with
the reason, never an exception out of the cycle. Blocking: called in a thread.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from quotaguard.controller.kube_clients import KubeClients, discover
from quotaguard.kube import client as kubeclient
from quotaguard.kube.names import KUEUE_GROUP
from quotaguard.policy.fleet import KUBECONFIG_KEY, Fleet, KubeConfigSource
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.cluster import ClusterSnapshot, parse_objects

log = logging.getLogger("quotaguard.fleet")


class WorkerUnreadable(Exception):
    """A worker (or its kubeconfig) cannot be read; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class Reader:
    """One cluster's API and the Kueue version it serves."""

    clients: KubeClients
    kueue_version: str


def _json(response: Any) -> Any:
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def _multikueue_sources(
    manager: Reader, fleet: Fleet, timeout: float
) -> dict[str, KubeConfigSource]:
    """The workers the manager's MultiKueueConfig names, with their kubeconfig locations."""
    if not fleet.multi_kueue_config:
        return {}
    custom = manager.clients.custom
    config = _json(
        custom.get_cluster_custom_object(
            KUEUE_GROUP,
            manager.kueue_version,
            "multikueueconfigs",
            fleet.multi_kueue_config,
            _preload_content=False,
            _request_timeout=timeout,
        )
    )
    found: dict[str, KubeConfigSource] = {}
    for name in config.get("spec", {}).get("clusters") or []:
        cluster = _json(
            custom.get_cluster_custom_object(
                KUEUE_GROUP,
                manager.kueue_version,
                "multikueueclusters",
                name,
                _preload_content=False,
                _request_timeout=timeout,
            )
        )
        spec = cluster.get("spec", {})
        source = spec.get("clusterSource", spec).get("kubeConfig") or {}
        if isinstance(source.get("location"), str):
            found[name] = KubeConfigSource(
                location=source["location"], location_type=source.get("locationType", "Secret")
            )
    return found


def worker_sources(manager: Reader, policy: TenantPolicy) -> dict[str, KubeConfigSource | None]:
    """Every worker of the fleet and where its kubeconfig is (None: nowhere known)."""
    fleet = policy.spec.fleet or Fleet()
    try:
        named = _multikueue_sources(manager, fleet, fleet.read_timeout_seconds)
    except Exception as exc:  # the manager's objects are a source, not a requirement
        log.warning("cannot read MultiKueueConfig %s: %s", fleet.multi_kueue_config, exc)
        named = {}
    listed = {c.name: c.kube_config or named.get(c.name) for c in fleet.clusters}
    return {**dict(named), **listed}


def kubeconfig_of(manager: Reader, source: KubeConfigSource, namespace: str, timeout: float) -> Any:
    """The kubeconfig a source points at, parsed."""
    try:
        if source.location_type == "Path":
            with open(source.location, encoding="utf-8") as file:
                return yaml.safe_load(file)
        secret = _json(
            manager.clients.core.read_namespaced_secret(
                source.location, namespace, _preload_content=False, _request_timeout=timeout
            )
        )
        encoded = (secret.get("data") or {}).get(KUBECONFIG_KEY)
        if not isinstance(encoded, str):
            raise WorkerUnreadable(
                f"Secret {namespace}/{source.location} has no {KUBECONFIG_KEY!r} key"
            )
        return yaml.safe_load(base64.b64decode(encoded))
    except WorkerUnreadable:
        raise
    except Exception as exc:
        raise WorkerUnreadable(f"cannot read its kubeconfig {source.location}: {exc}") from exc


def connect(kubeconfig: Mapping[str, Any], timeout: float) -> Reader:
    try:
        api = kubeclient.api_client_from_kubeconfig(kubeconfig)
    except ValueError as exc:
        raise WorkerUnreadable(str(exc)) from exc
    from kubernetes import client

    clients = KubeClients(
        core=client.CoreV1Api(api),
        custom=client.CustomObjectsApi(api),
        coordination=client.CoordinationV1Api(api),
        apis=client.ApisApi(api),
    )
    return Reader(clients, discover_kueue(clients, timeout))


def discover_kueue(clients: KubeClients, timeout: float) -> str:
    try:
        served = discover(clients, timeout=timeout)
    except Exception as exc:
        raise WorkerUnreadable(_reason(exc)) from exc
    if served.kueue is None:
        raise WorkerUnreadable("it does not serve Kueue's API (kueue.x-k8s.io)")
    return served.kueue


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "reason", None) or exc).splitlines()
    return text[0] if text else type(exc).__name__


def read_cluster(
    reader: Reader, policy: TenantPolicy, timeout: float, *, nodes: bool = True
) -> ClusterSnapshot:
    """A cluster's nodes and pods (workers only), ClusterQueues and Workloads."""
    core, custom = reader.clients.core, reader.clients.custom
    items: list[Any] = []
    try:
        if nodes:
            listed = (
                ("Node", core.list_node(_preload_content=False, _request_timeout=timeout)),
                (
                    "Pod",
                    core.list_pod_for_all_namespaces(
                        _preload_content=False, _request_timeout=timeout
                    ),
                ),
            )
            for kind, response in listed:
                items += [{**item, "kind": kind} for item in _json(response).get("items") or []]
        for plural, kind in (("clusterqueues", "ClusterQueue"), ("workloads", "Workload")):
            body = _json(
                custom.list_cluster_custom_object(
                    KUEUE_GROUP,
                    reader.kueue_version,
                    plural,
                    _preload_content=False,
                    _request_timeout=timeout,
                )
            )
            version = f"{KUEUE_GROUP}/{reader.kueue_version}"
            items += [
                {**item, "kind": kind, "apiVersion": version} for item in body.get("items") or []
            ]
    except Exception as exc:
        raise WorkerUnreadable(_reason(exc)) from exc
    return parse_objects(items, gpu_resources=policy.gpu_resources)
