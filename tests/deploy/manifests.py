"""Loading the deployment manifests: rendered with kustomize (kubectl) or with the Helm chart
(helm built by `python -m e2e.build`), or read raw when no kubectl is present, plus small
lookups used by the checks."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.build import helm_binary

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config"
WEBHOOK = REPO / "webhook"
CHART = REPO / "charts" / "quotaguard"
NAMESPACE = "quotaguard-system"
KUBECTL = shutil.which("kubectl") or (
    "/usr/bin/kubectl" if Path("/usr/bin/kubectl").exists() else None
)

# The files of the default build, for the checks that do not need kustomize.
RAW_FILES = [
    *sorted(WEBHOOK.glob("*.yaml")),
    *sorted(p for p in CONFIG.glob("*.yaml") if p.name != "policy.yaml"),
    *sorted((CONFIG / "components" / "self-managed-certs").glob("*.yaml")),
]

Manifest = dict[str, Any]
# `renders(tool, components)`: `render` once a session (the `renders` fixture of conftest.py)
Renders = Callable[[str, Sequence[str]], list[Manifest]]
# libyaml's loader where PyYAML has it: the same objects, parsed about three times faster
# (a rendered chart is 170 kB).
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse(text: str) -> list[Manifest]:
    return [d for d in yaml.load_all(text, Loader=_LOADER) if isinstance(d, dict)]


def load_yaml(path: Path) -> list[Manifest]:
    return parse(path.read_text())


def raw_manifests() -> list[Manifest]:
    """The objects of the default build as written (no kustomization files, no ConfigMap)."""
    return [
        doc
        for path in RAW_FILES
        for doc in load_yaml(path)
        if not doc.get("kind", "").startswith("Kustomization") and doc.get("kind") != "Component"
    ]


def kustomize(directory: Path) -> list[Manifest]:
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed:\n{result.stderr}")
    return parse(result.stdout)


def helm() -> Path:
    """The helm binary; skips the test when it is not built, except under CI=true where the
    chart must be checked (as e2e must run)."""
    found = helm_binary()
    if found is not None:
        return found
    message = "helm not built: run `python -m e2e.build` (it builds helm from its Go module)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{message}; CI must check the chart, not skip it")
    pytest.skip(message)


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm()), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            **os.environ,
            "HELM_CACHE_HOME": "/tmp/quotaguard-helm/cache",
            "HELM_CONFIG_HOME": "/tmp/quotaguard-helm/config",
            "HELM_DATA_HOME": "/tmp/quotaguard-helm/data",
        },
    )


def helm_template(*values: str, namespace: str = NAMESPACE) -> list[Manifest]:
    """`helm template` of the chart with `--set` VALUES (key=value)."""
    argv = ["template", "quotaguard", str(CHART), "--namespace", namespace]
    for value in values:
        argv += ["--set", value]
    result = run_helm(*argv)
    if result.returncode != 0:
        raise AssertionError(f"helm template {' '.join(values)} failed:\n{result.stderr}")
    return parse(result.stdout)


# The chart's values that do what each kustomize component does.
CHART_VALUES = {
    "self-managed-certs": "certificates.source=selfManaged",
    "cert-manager": "certificates.source=certManager",
    "pilot": "pilot.enabled=true",
    "manage-queues": "manageQueues=true",
    "gpu-operator-configs": "gpuOperatorConfigs.enabled=true",
    "prometheus": "prometheus.enabled=true",
    "dra": "dra.enabled=true",
    "kueue-config": "kueueConfig.enabled=true",
    "scheduler-profile": "gpuScheduler.enabled=true",
    "fleet": "fleet.enabled=true",
    "network-policy": "networkPolicy.enabled=true,networkPolicy.apiServerCIDRs={10.0.0.0/24}",
}


def render(tool: str, tmp: Path, components: list[str]) -> list[Manifest]:
    """config/ with kustomize components, or the chart with the values that match them."""
    if tool == "helm":
        return helm_template("createNamespace=true", *(CHART_VALUES[c] for c in components))
    if KUBECTL is None:
        pytest.skip("kubectl not installed (kustomize)")
    if not components:
        return kustomize(CONFIG)
    return kustomize(overlay(tmp, components))


def overlay(tmp: Path, components: list[str]) -> Path:
    """A user's own overlay outside the repository: config/ plus some of its components (an
    overlay inside config/ would contain its own base, which kustomize refuses)."""
    tmp.mkdir(parents=True, exist_ok=True)
    base = os.path.relpath(CONFIG, tmp)
    lines = [
        "apiVersion: kustomize.config.k8s.io/v1beta1",
        "kind: Kustomization",
        "resources:",
        f"  - {base}",
        "components:",
        *(f"  - {base}/components/{c}" for c in components),
    ]
    (tmp / "kustomization.yaml").write_text("\n".join(lines) + "\n")
    return tmp


def find(docs: list[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    return [
        d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: list[Manifest], kind: str, name: str) -> Manifest:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def pod_spec(workload: Manifest) -> Manifest:
    """The pod spec of a Deployment, Job or CronJob."""
    spec = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    pod: Manifest = spec["template"]["spec"]
    return pod


def workloads(docs: list[Manifest]) -> Iterator[Manifest]:
    yield from (d for d in docs if d.get("kind") in ("Deployment", "Job", "CronJob"))


def webhooks(docs: list[Manifest]) -> Iterator[tuple[str, Manifest]]:
    for doc in docs:
        if doc.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in doc["webhooks"]:
                yield doc["kind"], hook


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())
