"""The verbs that read a cluster, against a real API server: `--context` picks a context of the
kubeconfig (not its current one), and what kubectl prints (`-o yaml`, piped) is a snapshot
`plan --snapshot -` reads as the live cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster import REPO_ROOT, Cluster, wait_until, whole_gpu_node

POLICY = str(REPO_ROOT / "config" / "policy.yaml")


def quotaguard(
    cluster: Cluster, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in cluster.env().items() if k != "KUBECONFIG"}
    return subprocess.run(
        [sys.executable, "-m", "quotaguard", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO_ROOT,
        check=False,
    )


def two_contexts(cluster: Cluster, tmp_path: Path) -> str:
    """The cluster's kubeconfig with a second context, current, whose server does not answer."""
    config: dict[str, Any] = yaml.safe_load(cluster.kubeconfig.read_text())
    config["clusters"].append({"name": "gone", "cluster": {"server": "https://127.0.0.1:9"}})
    config["contexts"].append({"name": "gone", "context": {"cluster": "gone", "user": "admin"}})
    config["current-context"] = "gone"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def capacities(report: dict[str, Any]) -> dict[str, Any]:
    return {row["name"]: row["capacity"] for row in report["classes"]}


def test_context_picks_the_cluster_and_kubectls_yaml_is_a_snapshot(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.add_nodes(whole_gpu_node("cli-h100", 8))
    kubeconfig = two_contexts(cluster, tmp_path)

    current = quotaguard(cluster, "plan", "-p", POLICY, "--kubeconfig", kubeconfig, "-o", "json")
    assert current.returncode == 2, current.stderr
    assert "cannot read the cluster" in current.stderr and "Traceback" not in current.stderr

    live = quotaguard(
        cluster, "plan", "-p", POLICY, "--kubeconfig", kubeconfig, "--context", "e2e", "-o", "json"
    )
    assert live.returncode in (0, 1), live.stderr
    live_report = json.loads(live.stdout)
    assert capacities(live_report)["h100"] >= 8

    listed = cluster.kubectl("get", "nodes,pods,clusterqueues,workloads", "-A", "-o", "yaml").stdout
    assert listed.startswith("apiVersion: v1\nitems:")
    piped = quotaguard(cluster, "plan", "-p", POLICY, "--snapshot", "-", "-o", "json", stdin=listed)
    assert piped.returncode == live.returncode, piped.stderr
    assert capacities(json.loads(piped.stdout)) == capacities(live_report)


def test_certs_reads_the_context_it_is_given(cluster: Cluster, tmp_path: Path) -> None:
    kubeconfig = two_contexts(cluster, tmp_path)
    cluster.create_namespace("quotaguard-system")
    run = quotaguard(cluster, "certs", "--kubeconfig", kubeconfig, "--context", "e2e", "--dry-run")
    # it reached the API server: no webhook configurations in this cluster to write into
    assert run.returncode == 1, run.stderr
    assert "MutatingWebhookConfiguration 00-quotaguard-mutating not found" in run.stderr
    gone = quotaguard(cluster, "certs", "--kubeconfig", kubeconfig, "--dry-run")
    assert gone.returncode == 2 and "Traceback" not in gone.stderr
    assert "no answer from the API server" in gone.stderr, gone.stderr


def test_serve_runs_its_controller_on_the_context_it_is_given(
    cluster: Cluster, tmp_path: Path
) -> None:
    kubeconfig = two_contexts(cluster, tmp_path)
    server = cluster.serve_quotaguard(
        Path(POLICY),
        components="controller",
        args=("--kubeconfig", kubeconfig, "--context", "e2e", "--mode", "recommend"),
        name="quotaguard-context",
    )
    try:
        assert wait_until(
            lambda: last_plan(fetch(f"{server.http_url}/metrics")) > 0,
            timeout=60,
            what="a plan from the e2e context",
        )
    finally:
        cluster.stop_quotaguard(server)


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return ""


def last_plan(metrics: str) -> float:
    """When the controller last planned (0: never), from its /metrics."""
    for line in metrics.splitlines():
        name, _, value = line.partition(" ")
        if name == "quotaguard_controller_last_plan_timestamp_seconds":
            return float(value)
    return 0.0
