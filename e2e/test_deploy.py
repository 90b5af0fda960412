"""The deploy manifests against a real API server: `kubectl apply --dry-run=server -k` of
config/ (as docs/deploy.md checks them), of config/ with the pilot component, and of the Kueue
and Volcano samples against the real CRDs. A server-side dry run goes through defaulting, schema
and CEL validation and admission, and stores nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from e2e.cluster import REPO_ROOT, Cluster

CONFIG = REPO_ROOT / "config"
PILOT_OVERLAY = Path(__file__).resolve().parent / "manifests" / "pilot"


def rendered_objects(cluster: Cluster, directory: Path) -> list[str]:
    """`kind/name` of every object `kubectl kustomize` renders from `directory`."""
    text = cluster.kubectl("kustomize", str(directory)).stdout
    return [f"{d['kind']}/{d['metadata']['name']}" for d in yaml.safe_load_all(text) if d]


def dry_run_apply(cluster: Cluster, directory: Path) -> str:
    """`kubectl apply --dry-run=server -k directory`; kubectl's stdout (one line per object)."""
    result = cluster.kubectl("apply", "--dry-run=server", "-k", str(directory), check=False)
    assert result.returncode == 0, f"refused by the API server:\n{result.stderr}"
    return result.stdout


def assert_every_object_accepted(cluster: Cluster, directory: Path, output: str) -> None:
    objects = rendered_objects(cluster, directory)
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == len(objects), output
    assert all(line.endswith("(server dry run)") for line in lines), output


def namespaces_created(cluster: Cluster, *names: str) -> list[str]:
    """Create the namespaces that do not exist yet; return those (for the caller to delete)."""
    missing = [
        name
        for name in names
        if not cluster.kubectl("get", "namespace", name, "--ignore-not-found", "-o", "name").stdout
    ]
    for name in missing:
        cluster.create_namespace(name)
    return missing


@pytest.fixture(scope="module")
def quotaguard_system(cluster: Cluster) -> Iterator[None]:
    # A server-side dry run creates nothing, so the namespace must exist (docs/deploy.md).
    created = namespaces_created(cluster, "quotaguard-system")
    yield
    if created:
        cluster.kubectl("delete", "namespace", *created, "--wait=false")


@pytest.mark.usefixtures("quotaguard_system")
def test_config_applies_with_server_dry_run(cluster: Cluster) -> None:
    output = dry_run_apply(cluster, CONFIG)
    assert_every_object_accepted(cluster, CONFIG, output)
    for expected in (
        "deployment.apps/quotaguard-webhook",
        "deployment.apps/quotaguard-controller",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/00-quotaguard-mutating",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/quotaguard-validating",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/quotaguard-validating-resources",
        "job.batch/quotaguard-certs",
        "cronjob.batch/quotaguard-certs",
    ):
        assert expected in output
    # Nothing was stored.
    found = cluster.kubectl(
        "get", "mutatingwebhookconfiguration", "00-quotaguard-mutating", "--ignore-not-found"
    )
    assert found.stdout == ""


@pytest.mark.usefixtures("quotaguard_system")
def test_config_with_the_pilot_component_applies_with_server_dry_run(cluster: Cluster) -> None:
    output = dry_run_apply(cluster, PILOT_OVERLAY)
    assert_every_object_accepted(cluster, PILOT_OVERLAY, output)


def test_kueue_samples_apply_against_the_kueue_crds(cluster: Cluster) -> None:
    samples = CONFIG / "samples" / "kueue"
    namespaces = [
        d["metadata"]["name"]
        for d in yaml.safe_load_all((samples / "namespaces.yaml").read_text())
        if d
    ]
    # The LocalQueues live in the tenants' namespaces, which a dry run does not create.
    created = namespaces_created(cluster, *namespaces)
    try:
        output = dry_run_apply(cluster, samples)
        assert_every_object_accepted(cluster, samples, output)
        assert "clusterqueue.kueue.x-k8s.io/training" in output
        assert "localqueue.kueue.x-k8s.io/inference" in output
        assert "resourceflavor.kueue.x-k8s.io/h100-3g.40gb" in output
    finally:
        if created:
            cluster.kubectl("delete", "namespace", *created, "--wait=false")


def test_volcano_samples_apply_against_the_volcano_crds(cluster: Cluster) -> None:
    samples = CONFIG / "samples" / "volcano"
    output = dry_run_apply(cluster, samples)
    assert_every_object_accepted(cluster, samples, output)
    assert "queue.scheduling.volcano.sh/gpu-pool" in output


def test_a_broken_manifest_is_refused_by_the_dry_run(cluster: Cluster, tmp_path: Path) -> None:
    """The dry run above can fail: a ClusterQueue the Kueue schema refuses is reported."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "kustomization.yaml").write_text("resources: [clusterqueue.yaml]\n")
    (broken / "clusterqueue.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": "broken"},
                "spec": {"resourceGroups": [{"coveredResources": [], "flavors": "h100"}]},
            }
        )
    )
    result = cluster.kubectl("apply", "--dry-run=server", "-k", str(broken), check=False)
    assert result.returncode != 0
    assert 'The ClusterQueue "broken" is invalid' in result.stderr
    assert "spec.resourceGroups[0].flavors" in result.stderr
