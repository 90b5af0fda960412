"""Loading the deployment manifests: rendered with kustomize (kubectl), or read raw when no
kubectl is present, plus small lookups used by the checks."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config"
WEBHOOK = REPO / "webhook"
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


def load_yaml(path: Path) -> list[Manifest]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


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
    return [d for d in yaml.safe_load_all(result.stdout) if isinstance(d, dict)]


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
