"""quotaguard's shipped registrations name every workload kind it handles, installed or not. On
a cluster that serves none of the custom kinds, the API server accepts the registrations, Pods
and Jobs are admitted and rewritten as always, and nothing is logged as failing; once a kind's
CRD is installed, the registration already in place starts sending its objects.

A private cluster without any CRD (no Kueue, JobSet or Volcano), with controller-manager,
scheduler and kwok so that a Job's pod is created, scheduled and Running.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from e2e import build
from e2e.cluster import Cluster, load_webhook_configurations, mig_node, wait_until
from e2e.kueue import POLICY

MIG_3G = "nvidia.com/mig-3g.40gb"
NAMESPACE = "research-absent-crds"  # tenant training: "research-*"


def rule_resources(configs: list[dict[str, Any]]) -> set[str]:
    """`resource.group` (or `resource`) of every rule of these webhook configurations."""
    found: set[str] = set()
    for config in configs:
        for hook in config.get("webhooks") or []:
            for rule in hook.get("rules") or []:
                for group in rule.get("apiGroups") or []:
                    for resource in rule.get("resources") or []:
                        found.add(f"{resource}.{group}" if group else resource)
    return found


def served_resources(cluster: Cluster) -> set[str]:
    return set(cluster.kubectl("api-resources", "-o", "name").stdout.split())


def gpu_pod_spec(container: str) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": container,
                "image": "registry.example/trainer:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        ],
    }


def hinted(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"annotations": {"quotaguard.dev/gpu-memory": "30Gi"}}, "spec": spec}


def test_registrations_for_kinds_not_installed_harm_nothing(
    make_cluster: Callable[..., Cluster], toolchain: build.Toolchain
) -> None:
    cluster = make_cluster(controllers=True, crds=False)
    cluster.add_nodes(mig_node("mig-0", {"3g.40gb": 2}))
    shipped = load_webhook_configurations()
    absent = rule_resources(shipped) - served_resources(cluster)
    assert {"jobsets.jobset.x-k8s.io", "jobs.batch.volcano.sh"} <= absent, absent

    server = cluster.serve_quotaguard(POLICY, components="webhook", name="qg-absent")
    try:
        # The API server took every registration, the absent kinds' rules included.
        stored = [
            cluster.get(config["kind"].lower(), config["metadata"]["name"]) for config in shipped
        ]
        assert rule_resources(stored) == rule_resources(shipped)

        cluster.create_namespace(NAMESPACE)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "namespace": NAMESPACE, **hinted({})["metadata"]},
            "spec": gpu_pod_spec("probe"),
        }
        result = cluster.create(pod)
        assert json.loads(result.stdout)["spec"]["containers"][0]["resources"]["limits"] == {
            MIG_3G: "1"
        }
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "finetune", "namespace": NAMESPACE},
            "spec": {"backoffLimit": 0, "template": hinted(gpu_pod_spec("trainer"))},
        }
        result = cluster.create(job)
        template = json.loads(result.stdout)["spec"]["template"]["spec"]
        assert template["containers"][0]["resources"]["limits"] == {MIG_3G: "1"}
        warnings = [line for line in result.stderr.splitlines() if line.strip()]
        assert all("nvidia.com/gpu=1 -> nvidia.com/mig-3g.40gb=1" in w for w in warnings), warnings

        def job_pod_running() -> bool:
            found = cluster.get(
                "pods", "-l", "batch.kubernetes.io/job-name=finetune", namespace=NAMESPACE
            )["items"]
            return bool(found) and found[0]["status"].get("phase") == "Running"

        wait_until(job_pod_running, timeout=60, what="the Job's pod Running")
        log = cluster.processes["kube-apiserver"].log.read_text(errors="replace")
        assert "failed calling webhook" not in log
        assert "quotaguard.dev" not in log

        # Installed later, the kind is sent by the registration that was there all along.
        jobset_crds = next(d for d in toolchain.crd_dirs if d.name.startswith("jobset-"))
        cluster.install_crds(directories=[jobset_crds])
        jobset = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "sweep", "namespace": NAMESPACE},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "workers",
                        "replicas": 1,
                        "template": {"spec": {"template": hinted(gpu_pod_spec("worker"))}},
                    }
                ]
            },
        }

        wait_until(
            lambda: "jobsets.jobset.x-k8s.io" in served_resources(cluster),
            timeout=30,
            what="the API server serving JobSets",
        )
        replicated = json.loads(cluster.create(jobset).stdout)["spec"]["replicatedJobs"][0]
        container = replicated["template"]["spec"]["template"]["spec"]["containers"][0]
        assert container["resources"]["limits"] == {MIG_3G: "1"}
    finally:
        cluster.stop_quotaguard(server)
