"""`quotaguard review` of DRA workloads: the claims' templates and DeviceClasses come from the
input itself or from --dra files, as the webhook reads them from the cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotaguard.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "dra"
POLICY = """\
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {name: demo}
spec:
  gpuClasses:
    - name: h100
      memory: 80Gi
      dra: {deviceClassName: gpu.nvidia.com}
    - name: mig-1g
      memory: 10Gi
      slices: 1
      dra: {deviceClassName: mig.nvidia.com, attributes: {gpu.nvidia.com/profile: 1g.10gb}}
  tenants:
    - {name: research, namespaces: [research], allowedClasses: [mig-1g]}
"""
POD = """\
apiVersion: v1
kind: Pod
metadata: {namespace: research, name: pod1}
spec:
  containers:
    - name: ctr
      image: ubuntu:22.04
      resources:
        claims: [{name: gpu}]
  resourceClaims:
    - {name: gpu, resourceClaimTemplateName: TEMPLATE}
"""


@pytest.fixture
def policy(tmp_path: Path) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return str(path)


def review(tmp_path: Path, policy: str, text: str, *extra: str) -> tuple[int, dict[str, object]]:
    path = tmp_path / "input.yaml"
    path.write_text(text)
    return main(["review", "-p", policy, str(path), "-o", "json", *extra]), {}


def test_a_template_from_a_dra_file_decides_the_pod(
    tmp_path: Path, policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    claims = str(FIXTURES / "claims.yaml")
    classes = str(FIXTURES / "deviceclasses.yaml")
    code, _ = review(tmp_path, policy, POD.replace("TEMPLATE", "mig-1g"), "--dra", claims)
    assert code == 0
    answer = json.loads(capsys.readouterr().out)["response"]
    assert answer["allowed"] is True and answer["patch"]  # queued
    code, _ = review(
        tmp_path, policy, POD.replace("TEMPLATE", "single-gpu"), "--dra", claims, "--dra", classes
    )
    assert code == 1
    assert 'claim "gpu" (ResourceClaimTemplate "single-gpu")' in capsys.readouterr().err


def test_a_template_in_the_same_file_counts_and_is_judged_itself(
    tmp_path: Path, policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    template = (FIXTURES / "claims.yaml").read_text().split("---\n")[1]
    code, _ = review(tmp_path, policy, template + "---\n" + POD.replace("TEMPLATE", "two-h100"))
    assert code == 1
    err = capsys.readouterr().err
    assert 'ResourceClaimTemplate/two-h100: denied: tenant "research": ResourceClaimTemplate' in err
    assert 'Pod/pod1: denied: tenant "research": claim "gpu" (ResourceClaimTemplate' in err


def test_a_template_nowhere_to_be_found_is_denied_naming_it(
    tmp_path: Path, policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = review(tmp_path, policy, POD.replace("TEMPLATE", "later"))
    assert code == 1
    assert 'ResourceClaimTemplate "later" is not found in namespace "research"' in (
        capsys.readouterr().err
    )


def test_an_unreadable_dra_file_is_an_input_error(
    tmp_path: Path, policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = review(tmp_path, policy, POD, "--dra", str(tmp_path / "missing.yaml"))
    assert code == 2
    assert "missing.yaml: cannot read" in capsys.readouterr().err
