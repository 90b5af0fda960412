"""The cluster behind `quotaguard certs`: the few API calls it makes on plain JSON objects
(`ClusterPort`), their implementation on the official client, and the errors that end a run."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from quotaguard.kube.client import status_code

JsonObject = dict[str, Any]

MUTATING = "MutatingWebhookConfiguration"
VALIDATING = "ValidatingWebhookConfiguration"


class CertsError(Exception):
    """The run cannot finish as asked (exit 1); the message says what to do."""


class ClusterUnreachable(Exception):
    """The API server does not answer: the wrong cluster or context (exit 2)."""


class ConflictError(CertsError):
    """Someone else wrote the object meanwhile; running again resolves it."""


class ClusterPort(Protocol):
    """The few API calls `quotaguard certs` makes, on plain JSON objects."""

    def read_secret(self, namespace: str, name: str) -> JsonObject | None: ...
    def create_secret(self, namespace: str, body: JsonObject) -> None: ...
    def replace_secret(self, namespace: str, name: str, body: JsonObject) -> None: ...
    def read_webhook_configuration(self, kind: str, name: str) -> JsonObject | None: ...
    def patch_webhook_configuration(
        self, kind: str, name: str, patch: list[JsonObject]
    ) -> None: ...


class KubernetesCluster:
    """ClusterPort on the official client (CoreV1Api, AdmissionregistrationV1Api)."""

    def __init__(self, core: Any, admission: Any) -> None:
        self.core = core
        self.admission = admission

    @classmethod
    def connect(cls, kubeconfig: str | None, context: str | None = None) -> KubernetesCluster:
        from kubernetes import client

        from quotaguard.kube.client import api_client as connect

        api_client = connect(kubeconfig, context=context)
        return cls(client.CoreV1Api(api_client), client.AdmissionregistrationV1Api(api_client))

    def _call(self, what: str, call: Callable[[], Any]) -> JsonObject | None:
        try:
            response = call()
        except Exception as exc:
            status = status_code(exc)
            if status == 404:
                return None
            if status == 409:
                raise ConflictError(
                    f"{what}: changed by someone else meanwhile; run again"
                ) from exc
            if status == 403:
                raise CertsError(f"{what}: forbidden (check the RBAC of quotaguard-certs)") from exc
            if status is None:  # no answer at all: the server is not there (urllib3's errors)
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise ClusterUnreachable(
                    f"{what}: no answer from the API server: {reason}"
                ) from exc
            raise
        if response is None or not getattr(response, "data", None):
            return {}
        loaded: JsonObject = json.loads(response.data)
        return loaded

    def read_secret(self, namespace: str, name: str) -> JsonObject | None:
        return self._call(
            f"read Secret {namespace}/{name}",
            lambda: self.core.read_namespaced_secret(
                name, namespace, _preload_content=False, _request_timeout=10
            ),
        )

    def create_secret(self, namespace: str, body: JsonObject) -> None:
        name = body["metadata"]["name"]
        self._call(
            f"create Secret {namespace}/{name}",
            lambda: self.core.create_namespaced_secret(
                namespace, body, _preload_content=False, _request_timeout=10
            ),
        )

    def replace_secret(self, namespace: str, name: str, body: JsonObject) -> None:
        self._call(
            f"update Secret {namespace}/{name}",
            lambda: self.core.replace_namespaced_secret(
                name, namespace, body, _preload_content=False, _request_timeout=10
            ),
        )

    def _webhook_call(self, kind: str, verb: str) -> Callable[..., Any]:
        noun = "mutating" if kind == MUTATING else "validating"
        method: Callable[..., Any] = getattr(self.admission, f"{verb}_{noun}_webhook_configuration")
        return method

    def read_webhook_configuration(self, kind: str, name: str) -> JsonObject | None:
        read = self._webhook_call(kind, "read")
        return self._call(
            f"read {kind} {name}", lambda: read(name, _preload_content=False, _request_timeout=10)
        )

    def patch_webhook_configuration(self, kind: str, name: str, patch: list[JsonObject]) -> None:
        apply = self._webhook_call(kind, "patch")
        self._call(
            f"patch {kind} {name}",
            lambda: apply(
                name,
                patch,
                _content_type="application/json-patch+json",
                _preload_content=False,
                _request_timeout=10,
            ),
        )
