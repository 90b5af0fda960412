"""The Kubernetes API objects the controller talks through, and API group discovery.

`KubeClients` is the seam tests replace: every call the controller makes goes through one of
these four API objects, always with `_preload_content=False` so responses are raw JSON.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from quotaguard.kube import client as kubeclient
from quotaguard.kube.dra import RESOURCE_GROUP as DRA_GROUP
from quotaguard.kube.names import KUEUE_GROUP, KUEUE_VERSIONS, VOLCANO_GROUP, VOLCANO_VERSION

DRA_VERSION = "v1"  # resource.k8s.io, GA since Kubernetes 1.34
# DeviceTaintRules: beta in 1.36 behind an off-by-default API version and feature gate
TAINT_RULES_VERSION = "v1beta2"
TAINT_RULES = "devicetaintrules"

__all__ = [
    "DRA_GROUP",
    "DRA_VERSION",
    "KUEUE_GROUP",
    "TAINT_RULES",
    "TAINT_RULES_VERSION",
    "VOLCANO_GROUP",
    "VOLCANO_VERSION",
    "KubeClients",
    "ServedGroups",
    "discover",
]


@dataclass
class KubeClients:
    core: Any  # kubernetes.client.CoreV1Api
    custom: Any  # kubernetes.client.CustomObjectsApi
    coordination: Any  # kubernetes.client.CoordinationV1Api
    apis: Any  # kubernetes.client.ApisApi (GET /apis)

    @classmethod
    def connect(
        cls, kubeconfig: str | None = None, *, context: str | None = None, pool_size: int = 32
    ) -> KubeClients:
        """From a kubeconfig file, or the in-cluster service account when none is given."""
        from kubernetes import client

        # One connection per long-lived watch plus the short calls of the loop and the elector.
        api_client = kubeclient.api_client(kubeconfig, context=context, pool_size=pool_size)
        return cls(
            core=client.CoreV1Api(api_client),
            custom=client.CustomObjectsApi(api_client),
            coordination=client.CoordinationV1Api(api_client),
            apis=client.ApisApi(api_client),
        )


@dataclass(frozen=True)
class ServedGroups:
    """Which optional API groups the server serves, and in which version we use them."""

    kueue: str | None  # "v1beta2", "v1beta1" or None
    volcano: bool
    dra: bool = False  # resource.k8s.io/v1 (ResourceSlices, DeviceClasses, claims)
    device_taint_rules: bool = False  # resource.k8s.io/v1beta2 devicetaintrules


def served_groups(group_list: dict[str, Any]) -> ServedGroups:
    """Pick versions from a `GET /apis` APIGroupList (pure)."""
    versions: dict[str, set[str]] = {}
    for group in group_list.get("groups") or ():
        name = group.get("name")
        if isinstance(name, str):
            versions[name] = {
                str(v.get("version")) for v in group.get("versions") or () if isinstance(v, dict)
            }
    kueue = next((v for v in KUEUE_VERSIONS if v in versions.get(KUEUE_GROUP, set())), None)
    return ServedGroups(
        kueue=kueue,
        volcano=VOLCANO_VERSION in versions.get(VOLCANO_GROUP, set()),
        dra=DRA_VERSION in versions.get(DRA_GROUP, set()),
    )


def discover(clients: KubeClients, *, timeout: float = 10.0) -> ServedGroups:
    """Ask the API server which groups it serves (blocking; raises when unreachable), and
    whether it serves DeviceTaintRules: their version may be served without them (their
    feature gate off), so that one resource list is asked for too."""
    response = clients.apis.get_api_versions(_preload_content=False, _request_timeout=timeout)
    try:
        body: dict[str, Any] = json.loads(response.data)
    finally:
        response.release_conn()
    served = served_groups(body)
    if served.dra and _group_serves_version(body, DRA_GROUP, TAINT_RULES_VERSION):
        taint_rules = _serves_resource(clients, TAINT_RULES_VERSION, TAINT_RULES, timeout)
        served = dataclasses.replace(served, device_taint_rules=taint_rules)
    return served


def _group_serves_version(group_list: dict[str, Any], name: str, version: str) -> bool:
    return any(
        group.get("name") == name
        and any(v.get("version") == version for v in group.get("versions") or ())
        for group in group_list.get("groups") or ()
    )


def _serves_resource(clients: KubeClients, version: str, plural: str, timeout: float) -> bool:
    """Whether resource.k8s.io/<version> lists `plural` (False when it cannot be told)."""
    try:
        response = clients.custom.get_api_resources(
            DRA_GROUP, version, _preload_content=False, _request_timeout=timeout
        )
        try:
            body = json.loads(response.data)
        finally:
            response.release_conn()
    except Exception:  # not served, or not readable now: no watch that could never sync
        return False
    resources = body.get("resources") if isinstance(body, dict) else None
    return any(isinstance(r, dict) and r.get("name") == plural for r in resources or ())
