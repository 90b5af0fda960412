"""The Helm chart installed and upgraded into the real API server by a real helm (built from its
Go module by `python -m e2e.build`): every object of the chart is accepted and stored, the
webhook configurations it installs send GPU workloads to a running quotaguard, which rewrites
them, and an upgrade to the pilot values changes who is sent without a gap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import build
from e2e.cluster import (
    REPO_ROOT,
    Cluster,
    QuotaguardServer,
    gpu_pod,
    load_webhook_configurations,
    wait_until,
)
from e2e.kueue import lease_holder, serve_controller

CHART = REPO_ROOT / "charts" / "quotaguard"
POLICY = REPO_ROOT / "config" / "policy.yaml"
NS = "quotaguard-system"
RELEASE = "quotaguard"
TENANT_NS = "serving-chart-e2e"  # tenant inference ("serving-*")
# The chart installs webhook/'s configurations under their names there.
(MUTATING,) = [
    c["metadata"]["name"]
    for c in load_webhook_configurations()
    if c["kind"] == "MutatingWebhookConfiguration"
]
PILOT_NS = "serving-pilot-chart-e2e"  # tenant inference too, enrolled in the pilot


def helm_path() -> Path:
    found = build.helm_binary()
    if found is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("helm not built by `python -m e2e.build`; CI must install the chart")
        pytest.skip("helm not built: run `python -m e2e.build`")
    return found


class Helm:
    def __init__(self, cluster: Cluster, binary: Path, work: Path, server: QuotaguardServer):
        self.cluster, self.binary, self.work, self.server = cluster, binary, work, server
        self.renderer = work / "post-render"
        # helm runs the post-renderer as one executable: a wrapper around this checkout's module.
        self.renderer.write_text(
            "#!/bin/sh\n"
            f"cd {REPO_ROOT} && exec {sys.executable} -m e2e.helm_post_render "
            f"{server.webhook_port} {server.cert.ca_bundle}\n"
        )
        self.renderer.chmod(0o755)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {
            **self.cluster.env(),
            "HELM_CACHE_HOME": str(self.work / "cache"),
            "HELM_CONFIG_HOME": str(self.work / "config"),
            "HELM_DATA_HOME": str(self.work / "data"),
        }
        result = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
            check=False,
        )
        if check:
            assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
        return result

    def install_or_upgrade(self, verb: str, *values: str, reset: bool = False) -> None:
        argv = [verb, RELEASE, str(CHART), "--namespace", NS, "--post-renderer", str(self.renderer)]
        if verb == "install":
            argv.append("--create-namespace")
        if reset:
            argv.append("--reset-values")
        for value in values:
            argv += ["--set", value]
        self.run(*argv)

    def manifest(self) -> list[dict[str, Any]]:
        import yaml

        text = self.run("get", "manifest", RELEASE, "--namespace", NS).stdout
        return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


@pytest.fixture(scope="module")
def helm(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Helm]:
    binary = helm_path()
    for name in (TENANT_NS,):
        cluster.create_namespace(name)
    cluster.create_namespace(PILOT_NS, labels={"quotaguard.dev/pilot": "true"})
    server = cluster.serve_quotaguard(POLICY, components="webhook", register=False, name="qg-chart")
    tool = Helm(cluster, binary, tmp_path_factory.mktemp("helm"), server)
    try:
        yield tool
    finally:
        tool.run("uninstall", RELEASE, "--namespace", NS, "--wait", check=False)
        server.process.stop()
        cluster.kubectl(
            "delete", "namespace", TENANT_NS, PILOT_NS, "--wait=false", "--ignore-not-found"
        )


def created_limits(cluster: Cluster, pod: dict[str, Any]) -> dict[str, str]:
    stored = json.loads(cluster.create(pod).stdout)
    limits: dict[str, str] = stored["spec"]["containers"][0]["resources"]["limits"]
    return limits


def stored_kinds(cluster: Cluster, docs: list[dict[str, Any]]) -> list[str]:
    """`kind/name` of each object of `docs` that the API server holds."""
    found = []
    for doc in docs:
        namespace = doc["metadata"].get("namespace")
        ns = ["-n", namespace] if namespace else []
        kind = doc["kind"].lower()
        result = cluster.kubectl(
            "get", kind, doc["metadata"]["name"], *ns, "-o", "name", "--ignore-not-found"
        )
        if result.stdout.strip():
            found.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return found


def test_install_stores_every_object_and_the_webhook_rewrites_gpu_pods(helm: Helm) -> None:
    helm.install_or_upgrade("install")
    status = json.loads(helm.run("status", RELEASE, "-n", NS, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed" and status["version"] == 1
    docs = helm.manifest()
    assert sorted(stored_kinds(helm.cluster, docs)) == sorted(
        f"{d['kind']}/{d['metadata']['name']}" for d in docs
    )
    hooks = [
        h["name"] for d in docs if d["kind"].endswith("WebhookConfiguration") for h in d["webhooks"]
    ]
    assert "pods.mutate.quotaguard.dev" in hooks and "pods.validate.quotaguard.dev" in hooks
    # The API server calls the webhook the chart registered, and the pod comes back rewritten.
    limits = created_limits(helm.cluster, gpu_pod("chart-install", TENANT_NS))
    assert "nvidia.com/gpu" not in limits
    assert limits == {"nvidia.com/mig-1g.10gb": "1"}


TEST_HOOKS = ("pod", "rolebinding", "role", "serviceaccount")


def test_helm_test_creates_the_check_pod_and_the_check_passes_against_the_release(
    helm: Helm, tmp_path: Path
) -> None:
    """`helm test` creates its hook Pod and RBAC in the API server. kwok's nodes run no
    containers, so the Pod never reports a result: the check it runs is run here instead, as
    the same module, against the release's webhook configuration target and a real
    controller's Lease in the release namespace, with the RBAC the hook grants."""
    result = helm.run("test", RELEASE, "-n", NS, "--timeout", "15s", check=False)
    assert result.returncode != 0  # no kubelet: the Pod cannot succeed here
    pod = helm.cluster.get("pod", "quotaguard-test", namespace=NS)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["python", "-m", "quotaguard.serve.selfcheck"]
    assert container["args"] == ["--namespace", NS]
    assert pod["spec"]["serviceAccountName"] == "quotaguard-test"
    # What the hook's ServiceAccount may do: read that Lease, nothing else.
    account = f"system:serviceaccount:{NS}:quotaguard-test"
    for verb, resource, allowed in (
        ("get", "leases/quotaguard-controller", "yes"),
        ("get", "leases/another-lease", "no"),
        ("update", "leases/quotaguard-controller", "no"),
        ("list", "pods", "no"),
    ):
        answer = helm.cluster.kubectl(
            "auth", "can-i", verb, resource, "-n", NS, "--as", account, check=False
        )
        assert answer.stdout.strip() == allowed, (verb, resource, answer.stdout)

    controller = serve_controller(
        helm.cluster, POLICY, pod_name="quotaguard-controller-chart-e2e", lease_namespace=NS
    )
    try:
        wait_until(
            lambda: lease_holder(helm.cluster, NS), timeout=30, interval=0.5, what="a leader"
        )
        token = helm.cluster.kubectl("create", "token", "quotaguard-test", "-n", NS).stdout
        kubeconfig = as_service_account(helm.cluster, token.strip(), tmp_path)
        check = subprocess.run(
            [
                sys.executable,
                "-m",
                "quotaguard.serve.selfcheck",
                "--namespace",
                NS,
                "--webhook-url",
                f"https://127.0.0.1:{helm.server.webhook_port}/validate",
                "--kubeconfig",
                str(kubeconfig),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO_ROOT,
            check=False,
        )
    finally:
        controller.process.stop()
        helm.cluster.kubectl("delete", "lease", "quotaguard-controller", "-n", NS, check=False)
        helm.cluster.kubectl("delete", ",".join(TEST_HOOKS), "quotaguard-test", "-n", NS)
    lines = check.stdout.splitlines()
    assert check.returncode == 0, check.stdout + check.stderr
    assert lines[0].startswith("ok webhook:")
    assert lines[1].startswith("ok controller: quotaguard-controller-chart-e2e")


def as_service_account(cluster: Cluster, token: str, work: Path) -> Path:
    """A kubeconfig for the cluster's API server that authenticates with `token` only."""
    import yaml

    config = yaml.safe_load(cluster.kubeconfig.read_text())
    (user,) = config["users"]
    user["user"] = {"token": token}
    path = work / "selfcheck-kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_upgrade_to_pilot_sends_only_enrolled_namespaces(helm: Helm) -> None:
    helm.install_or_upgrade("upgrade", "pilot.enabled=true")
    status = json.loads(helm.run("status", RELEASE, "-n", NS, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed" and status["version"] == 2
    mutating = helm.cluster.get("mutatingwebhookconfiguration", MUTATING)
    assert {h["failurePolicy"] for h in mutating["webhooks"]} == {"Ignore"}
    controller = helm.cluster.get("deployment", "quotaguard-controller", namespace=NS)
    assert controller["spec"]["template"]["spec"]["containers"][0]["args"][-2:] == [
        "--mode",
        "recommend",
    ]
    # The Job of revision 1 is replaced by revision 2's (a Job's template cannot change).
    jobs = helm.cluster.get("jobs", namespace=NS)["items"]
    assert [j["metadata"]["name"] for j in jobs] == ["quotaguard-certs-2"]
    # Enrolled: rewritten. Not enrolled: not sent, stored as asked.
    enrolled = created_limits(helm.cluster, gpu_pod("chart-pilot", PILOT_NS))
    assert "nvidia.com/gpu" not in enrolled
    skipped = created_limits(helm.cluster, gpu_pod("chart-not-enrolled", TENANT_NS))
    assert skipped == {"nvidia.com/gpu": "1"}


def test_upgrade_back_and_uninstall_leave_nothing_behind(helm: Helm) -> None:
    # Without values `helm upgrade` would reuse the pilot's: back to the chart's defaults.
    helm.install_or_upgrade("upgrade", reset=True)
    mutating = helm.cluster.get("mutatingwebhookconfiguration", MUTATING)
    assert not [h for h in mutating["webhooks"] if "matchLabels" in h["namespaceSelector"]]
    limits = created_limits(helm.cluster, gpu_pod("chart-upgraded-back", TENANT_NS))
    assert limits == {"nvidia.com/mig-1g.10gb": "1"}
    docs = helm.manifest()
    helm.run("uninstall", RELEASE, "--namespace", NS, "--wait")
    assert stored_kinds(helm.cluster, docs) == []
    # No webhook left: a GPU pod is stored as asked.
    assert created_limits(helm.cluster, gpu_pod("chart-uninstalled", TENANT_NS)) == {
        "nvidia.com/gpu": "1"
    }
