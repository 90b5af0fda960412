"""A realistic GPU Pod as the API server sends it to admission: about 10 KB of AdmissionReview.

An init container that fetches a model, a native sidecar (log shipper), the main container with
one `nvidia.com/gpu` and a memory hint, plus what a Deployment and the API server's defaulting
add (env vars, probes, volumes, projected token, tolerations, managedFields). In the
`inference` tenant of config/policy.yaml, /mutate rewrites it to a MIG slice.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch

from quotaguard.admission import review
from quotaguard.admission.reviews import make_review
from quotaguard.policy.loader import load_policy_file

ROOT = Path(__file__).resolve().parents[1]
POLICY_FILE = ROOT / "config" / "policy.yaml"
NAMESPACE = "inference"

JsonObject = dict[str, Any]


def _env(prefix: str, count: int) -> list[JsonObject]:
    plain = [
        {"name": f"{prefix}_SETTING_{i:02d}", "value": f"value-{i:02d}-" + "x" * 24}
        for i in range(count)
    ]
    from_fields = [
        {
            "name": "POD_NAME",
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
        },
        {
            "name": "POD_IP",
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
        },
        {
            "name": "API_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "embedder-secrets", "key": "token"}},
        },
    ]
    return plain + from_fields


def _defaults() -> JsonObject:
    return {
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


def _token_mount() -> JsonObject:
    return {
        "name": "kube-api-access-x7k2p",
        "readOnly": True,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
    }


def _probe(path: str) -> JsonObject:
    return {
        "httpGet": {"path": path, "port": 8080, "scheme": "HTTP"},
        "initialDelaySeconds": 10,
        "periodSeconds": 10,
        "timeoutSeconds": 2,
        "successThreshold": 1,
        "failureThreshold": 3,
    }


def realistic_pod(namespace: str = NAMESPACE) -> JsonObject:
    """The Pod object (not the review)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "embedder-7c9f8d6b5-",
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "embedder",
                "app.kubernetes.io/instance": "embedder-prod",
                "app.kubernetes.io/component": "server",
                "app.kubernetes.io/part-of": "search",
                "app.kubernetes.io/version": "2.3.1",
                "pod-template-hash": "7c9f8d6b5",
                "team": "ml-platform",
            },
            "annotations": {
                "quotaguard.dev/gpu-memory": "8Gi",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9400",
                "kubectl.kubernetes.io/restartedAt": "2026-12-01T09:00:00Z",
                "checksum/config": "3f5a" * 16,
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "embedder-7c9f8d6b5",
                    "uid": "6f1f3c2a-8a8e-4c56-9a55-0d3c9b1e2f10",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-12-02T12:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:generateName": {},
                            "f:labels": {".": {}, "f:app.kubernetes.io/name": {}},
                            "f:ownerReferences": {".": {}, 'k:{"uid":"6f1f3c2a"}': {}},
                        },
                        "f:spec": {
                            "f:containers": {'k:{"name":"server"}': {".": {}, "f:image": {}}},
                            "f:initContainers": {'k:{"name":"fetch-model"}': {".": {}}},
                        },
                    },
                }
            ],
        },
        "spec": {
            "serviceAccountName": "embedder",
            "serviceAccount": "embedder",
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler",
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "securityContext": {"runAsNonRoot": True, "fsGroup": 1000, "runAsUser": 1000},
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "labelSelector": {
                                    "matchLabels": {"app.kubernetes.io/name": "embedder"}
                                },
                                "topologyKey": "kubernetes.io/hostname",
                            },
                        }
                    ]
                }
            },
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "volumes": [
                {"name": "model-cache", "emptyDir": {"sizeLimit": "20Gi"}},
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
                {"name": "config", "configMap": {"name": "embedder-config", "defaultMode": 420}},
                {"name": "logs", "emptyDir": {}},
                {
                    "name": "kube-api-access-x7k2p",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": "namespace",
                                            "fieldRef": {
                                                "apiVersion": "v1",
                                                "fieldPath": "metadata.namespace",
                                            },
                                        }
                                    ]
                                }
                            },
                        ],
                    },
                },
            ],
            "initContainers": [
                {
                    "name": "fetch-model",
                    "image": "registry.example/fetch:1.2",
                    "args": ["--model", "bge-large", "--to", "/models", "--verify-sha256"],
                    "env": _env("FETCH", 6),
                    "resources": {
                        "limits": {"cpu": "1", "memory": "2Gi"},
                        "requests": {"cpu": "1", "memory": "2Gi"},
                    },
                    "volumeMounts": [
                        {"name": "model-cache", "mountPath": "/models"},
                        _token_mount(),
                    ],
                    **_defaults(),
                },
                {
                    "name": "log-shipper",
                    "image": "registry.example/fluent-bit:3.1",
                    "restartPolicy": "Always",
                    "args": ["--config", "/etc/fluent-bit/fluent-bit.conf"],
                    "env": _env("SHIPPER", 6),
                    "resources": {
                        "limits": {"cpu": "200m", "memory": "256Mi"},
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                    },
                    "volumeMounts": [
                        {"name": "logs", "mountPath": "/var/log/app", "readOnly": True},
                        {"name": "config", "mountPath": "/etc/fluent-bit", "subPath": "fluent-bit"},
                        _token_mount(),
                    ],
                    **_defaults(),
                },
            ],
            "containers": [
                {
                    "name": "server",
                    "image": "registry.example/embedder:2.3.1",
                    "command": ["python", "-m", "embedder.serve"],
                    "args": ["--port", "8080", "--model", "/models/bge-large", "--batch", "32"],
                    "ports": [
                        {"containerPort": 8080, "name": "http", "protocol": "TCP"},
                        {"containerPort": 9400, "name": "metrics", "protocol": "TCP"},
                    ],
                    "env": _env("EMBEDDER", 16),
                    "envFrom": [{"configMapRef": {"name": "embedder-env"}}],
                    "resources": {
                        "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                        "requests": {"cpu": "2", "memory": "16Gi", "nvidia.com/gpu": "1"},
                    },
                    "livenessProbe": _probe("/healthz"),
                    "readinessProbe": _probe("/readyz"),
                    "startupProbe": {**_probe("/readyz"), "failureThreshold": 30},
                    "volumeMounts": [
                        {"name": "model-cache", "mountPath": "/models", "readOnly": True},
                        {"name": "shm", "mountPath": "/dev/shm"},
                        {"name": "config", "mountPath": "/etc/embedder", "readOnly": True},
                        {"name": "logs", "mountPath": "/var/log/app"},
                        _token_mount(),
                    ],
                    **_defaults(),
                },
                {
                    "name": "metrics-exporter",
                    "image": "registry.example/dcgm-exporter:3.3",
                    "env": _env("EXPORTER", 4),
                    "resources": {
                        "limits": {"cpu": "100m", "memory": "128Mi"},
                        "requests": {"cpu": "50m", "memory": "64Mi"},
                    },
                    "volumeMounts": [_token_mount()],
                    **_defaults(),
                },
            ],
        },
    }


def admission_body(obj: JsonObject, uid: str = "bench-0001") -> JsonObject:
    """The AdmissionReview the API server sends for `obj`, with the fields it fills in."""
    body = make_review(obj, namespace=obj["metadata"]["namespace"], uid=uid)
    request: Any = body["request"]
    request["resource"] = {"group": "", "version": "v1", "resource": "pods"}
    request["requestKind"] = dict(request["kind"])
    request["requestResource"] = dict(request["resource"])
    request["userInfo"] = {
        "username": "system:serviceaccount:kube-system:replicaset-controller",
        "uid": "0d3c9b1e-2f10-4c56-9a55-6f1f3c2a8a8e",
        "groups": [
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system",
            "system:authenticated",
        ],
    }
    request["options"] = {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
    return body


def mutate_and_validate_bodies() -> tuple[bytes, bytes]:
    """(/mutate body, /validate body): the validate one carries the Pod after our patch, as the
    API server sends it once mutation is done."""
    policy = load_policy_file(POLICY_FILE)
    mutate = admission_body(realistic_pod())
    answer = review(policy, mutate, operation_path="mutate")
    response: Any = answer["response"]
    if not response.get("allowed") or not response.get("patch"):
        raise SystemExit(f"the bench pod is not rewritten by {POLICY_FILE}: {response}")
    patch = json.loads(base64.b64decode(response["patch"]))
    validate = copy.deepcopy(mutate)
    validate["request"]["object"] = jsonpatch.apply_patch(mutate["request"]["object"], patch)
    return json.dumps(mutate).encode(), json.dumps(validate).encode()


def distinct_bodies(count: int) -> tuple[list[bytes], list[bytes]]:
    """`count` different /mutate bodies and their /validate bodies: each Pod has its own uid,
    template hash, config checksum, container name and memory hint (1-10 GiB, all rewritten to
    the same slice), so no two requests are the same bytes or decode to the same fields."""
    policy = load_policy_file(POLICY_FILE)
    mutates, validates = [], []
    for index in range(count):
        pod = realistic_pod()
        metadata = pod["metadata"]
        digest = f"{index:09x}"
        metadata["generateName"] = f"embedder-{digest}-"
        metadata["labels"]["pod-template-hash"] = digest
        metadata["annotations"]["quotaguard.dev/gpu-memory"] = f"{index % 10 + 1}Gi"
        metadata["annotations"]["checksum/config"] = digest * 7
        pod["spec"]["containers"][0]["name"] = f"server-{index}"
        mutate = admission_body(pod, uid=f"bench-{index:08d}")
        answer = review(policy, mutate, operation_path="mutate")
        patch = json.loads(base64.b64decode(answer["response"]["patch"]))
        validate = copy.deepcopy(mutate)
        validate["request"]["object"] = jsonpatch.apply_patch(mutate["request"]["object"], patch)
        mutates.append(json.dumps(mutate).encode())
        validates.append(json.dumps(validate).encode())
    return mutates, validates


if __name__ == "__main__":
    m, v = mutate_and_validate_bodies()
    print(f"/mutate body {len(m):,} B, /validate body {len(v):,} B")
