"""Minimal manifests of every workload kind Kueue integrates, each with one GPU container per
pod template, and where each keeps its pod templates and the label Kueue reads its queue from.

Written from the kinds' own API definitions (the CRDs e2e.build installs), independently of
quotaguard's kind table, so that the e2e tests judge that table rather than repeat it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

GPU = "nvidia.com/gpu"
IMAGE = "registry.example/gpu-app:1"

Manifest = dict[str, Any]


def gpu_pod_template(container: str, *, restart_policy: str | None = None) -> dict[str, Any]:
    """A pod template with one container asking one whole GPU, as a user writes it."""
    spec: dict[str, Any] = {
        "containers": [{"name": container, "image": IMAGE, "resources": {"limits": {GPU: "1"}}}]
    }
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return {"spec": spec}


def _meta(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace}


@dataclass(frozen=True)
class Kind:
    """One workload kind: how to write one, and where its templates and queue label are."""

    name: str  # short id, used for test ids and namespaces
    api_version: str
    kind: str
    plural: str
    crd: str | None  # the CRD that serves it; None for a built-in kind
    build: Callable[[str, str], Manifest]  # (name, namespace) -> manifest
    templates: Callable[[Manifest], list[dict[str, Any]]]  # the object's pod templates
    queue_labels: Callable[[Manifest], dict[str, str]] = lambda obj: (
        obj["metadata"].get("labels") or {}
    )
    # Objects the kind needs first (cluster-scoped, applied as they are): TrainJob's runtime.
    prerequisites: tuple[Manifest, ...] = ()

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def resource(self) -> str:
        """The kubectl resource name, qualified by group."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


# ---- built-in kinds ---------------------------------------------------------------------------


def job(name: str, namespace: str) -> Manifest:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name, namespace),
        "spec": {"backoffLimit": 0, "template": gpu_pod_template("main", restart_policy="Never")},
    }


def cronjob(name: str, namespace: str) -> Manifest:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _meta(name, namespace),
        "spec": {
            "schedule": "0 0 1 1 *",
            "jobTemplate": {
                "spec": {
                    "backoffLimit": 0,
                    "template": gpu_pod_template("main", restart_policy="Never"),
                }
            },
        },
    }


def _with_selector(name: str, template: dict[str, Any]) -> dict[str, Any]:
    template = copy.deepcopy(template)
    template["metadata"] = {"labels": {"app": name}}
    return template


def deployment(name: str, namespace: str) -> Manifest:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, namespace),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": _with_selector(name, gpu_pod_template("server")),
        },
    }


def statefulset(name: str, namespace: str) -> Manifest:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(name, namespace),
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": _with_selector(name, gpu_pod_template("server")),
        },
    }


def jobset(name: str, namespace: str) -> Manifest:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _meta(name, namespace),
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "backoffLimit": 0,
                            "template": gpu_pod_template("worker", restart_policy="Never"),
                        }
                    },
                }
            ]
        },
    }


# ---- custom resources -----------------------------------------------------------------------


def leaderworkerset(name: str, namespace: str) -> Manifest:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta(name, namespace),
        "spec": {
            "replicas": 1,
            # What LWS's own defaulting webhook would add (not run here); its CRD requires it.
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": gpu_pod_template("leader"),
                "workerTemplate": gpu_pod_template("worker"),
            },
        },
    }


def _ray_cluster_spec() -> dict[str, Any]:
    return {
        "rayVersion": "2.41.0",
        "headGroupSpec": {"rayStartParams": {}, "template": gpu_pod_template("ray-head")},
        "workerGroupSpecs": [
            {
                "groupName": "gpu-workers",
                "replicas": 1,
                "minReplicas": 1,
                "maxReplicas": 1,
                "rayStartParams": {},
                "template": gpu_pod_template("ray-worker"),
            }
        ],
    }


def _ray_templates(cluster_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        cluster_spec["headGroupSpec"]["template"],
        *(group["template"] for group in cluster_spec.get("workerGroupSpecs") or []),
    ]


def rayjob(name: str, namespace: str) -> Manifest:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": _meta(name, namespace),
        "spec": {
            "entrypoint": "python train.py",
            "shutdownAfterJobFinishes": True,  # Kueue refuses a RayJob that keeps its cluster
            "rayClusterSpec": _ray_cluster_spec(),
        },
    }


def raycluster(name: str, namespace: str) -> Manifest:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": _meta(name, namespace),
        "spec": _ray_cluster_spec(),
    }


def rayservice(name: str, namespace: str) -> Manifest:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": _meta(name, namespace),
        "spec": {"rayClusterConfig": _ray_cluster_spec()},
    }


def _kubeflow(kind: str, field: str, container: str, roles: tuple[str, ...]) -> Kind:
    def build(name: str, namespace: str) -> Manifest:
        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": kind,
            "metadata": _meta(name, namespace),
            "spec": {
                field: {
                    role: {
                        "replicas": 1,
                        "restartPolicy": "OnFailure",
                        "template": gpu_pod_template(container),
                    }
                    for role in roles
                }
            },
        }

    plural = f"{kind.lower()}s"
    return Kind(
        name=kind.lower(),
        api_version="kubeflow.org/v1",
        kind=kind,
        plural=plural,
        crd=f"{plural}.kubeflow.org",
        build=build,
        templates=lambda obj: [r["template"] for r in obj["spec"][field].values()],
    )


def mpijob(name: str, namespace: str) -> Manifest:
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": _meta(name, namespace),
        "spec": {
            "slotsPerWorker": 1,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": gpu_pod_template("launcher")},
                "Worker": {"replicas": 1, "template": gpu_pod_template("worker")},
            },
        },
    }


def appwrapper(name: str, namespace: str) -> Manifest:
    wrapped = job(f"{name}-job", namespace)
    del wrapped["metadata"]["namespace"]
    return {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": _meta(name, namespace),
        "spec": {
            "components": [
                {
                    "podSets": [{"path": "template.spec.template", "replicas": 1}],
                    "template": wrapped,
                }
            ]
        },
    }


TRAINING_RUNTIME = "torch-gpu"


def training_runtime() -> Manifest:
    """A ClusterTrainingRuntime as a platform team writes one: the trainer node asks for no
    GPU itself, the TrainJob says how many per node (spec.trainer.resourcesPerNode)."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": TRAINING_RUNTIME},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {
                                    "template": {
                                        "spec": {"containers": [{"name": "node", "image": IMAGE}]}
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


def trainjob(name: str, namespace: str) -> Manifest:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": _meta(name, namespace),
        "spec": {
            "runtimeRef": {"name": TRAINING_RUNTIME},
            "trainer": {"numNodes": 1, "resourcesPerNode": {"limits": {GPU: "1"}}},
        },
    }


KINDS: tuple[Kind, ...] = (
    Kind("job", "batch/v1", "Job", "jobs", None, job, lambda o: [o["spec"]["template"]]),
    Kind(
        "cronjob",
        "batch/v1",
        "CronJob",
        "cronjobs",
        None,
        cronjob,
        lambda o: [o["spec"]["jobTemplate"]["spec"]["template"]],
        lambda o: o["spec"]["jobTemplate"].get("metadata", {}).get("labels") or {},
    ),
    Kind(
        "deployment",
        "apps/v1",
        "Deployment",
        "deployments",
        None,
        deployment,
        lambda o: [o["spec"]["template"]],
    ),
    Kind(
        "statefulset",
        "apps/v1",
        "StatefulSet",
        "statefulsets",
        None,
        statefulset,
        lambda o: [o["spec"]["template"]],
    ),
    Kind(
        "jobset",
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "jobsets",
        "jobsets.jobset.x-k8s.io",
        jobset,
        lambda o: [rj["template"]["spec"]["template"] for rj in o["spec"]["replicatedJobs"]],
    ),
    Kind(
        "leaderworkerset",
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "leaderworkersets",
        "leaderworkersets.leaderworkerset.x-k8s.io",
        leaderworkerset,
        lambda o: [
            o["spec"]["leaderWorkerTemplate"][t]
            for t in ("leaderTemplate", "workerTemplate")
            if t in o["spec"]["leaderWorkerTemplate"]
        ],
    ),
    Kind(
        "rayjob",
        "ray.io/v1",
        "RayJob",
        "rayjobs",
        "rayjobs.ray.io",
        rayjob,
        lambda o: _ray_templates(o["spec"]["rayClusterSpec"]),
    ),
    Kind(
        "raycluster",
        "ray.io/v1",
        "RayCluster",
        "rayclusters",
        "rayclusters.ray.io",
        raycluster,
        lambda o: _ray_templates(o["spec"]),
    ),
    Kind(
        "rayservice",
        "ray.io/v1",
        "RayService",
        "rayservices",
        "rayservices.ray.io",
        rayservice,
        lambda o: _ray_templates(o["spec"]["rayClusterConfig"]),
    ),
    _kubeflow("PyTorchJob", "pytorchReplicaSpecs", "pytorch", ("Master", "Worker")),
    _kubeflow("TFJob", "tfReplicaSpecs", "tensorflow", ("Worker",)),
    _kubeflow("XGBoostJob", "xgbReplicaSpecs", "xgboost", ("Master", "Worker")),
    _kubeflow("PaddleJob", "paddleReplicaSpecs", "paddle", ("Worker",)),
    _kubeflow("JAXJob", "jaxReplicaSpecs", "jax", ("Worker",)),
    Kind(
        "mpijob",
        "kubeflow.org/v2beta1",
        "MPIJob",
        "mpijobs",
        "mpijobs.kubeflow.org",
        mpijob,
        lambda o: [r["template"] for r in o["spec"]["mpiReplicaSpecs"].values()],
    ),
    Kind(
        "trainjob",
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        "trainjobs",
        "trainjobs.trainer.kubeflow.org",
        trainjob,
        lambda o: [
            {"spec": {"containers": [{"resources": o["spec"]["trainer"]["resourcesPerNode"]}]}}
        ],
        prerequisites=(training_runtime(),),
    ),
    Kind(
        "appwrapper",
        "workload.codeflare.dev/v1beta2",
        "AppWrapper",
        "appwrappers",
        "appwrappers.workload.codeflare.dev",
        appwrapper,
        lambda o: [c["template"]["spec"]["template"] for c in o["spec"]["components"]],
    ),
)


def gpu_resources(templates: list[dict[str, Any]]) -> set[str]:
    """Every nvidia.com/ resource the containers of these pod templates ask for."""
    found: set[str] = set()
    for template in templates:
        spec = template.get("spec") or {}
        for field in ("initContainers", "containers"):
            for container in spec.get(field) or []:
                for section in ("limits", "requests"):
                    resources = (container.get("resources") or {}).get(section) or {}
                    found.update(name for name in resources if name.startswith("nvidia.com/"))
    return found
