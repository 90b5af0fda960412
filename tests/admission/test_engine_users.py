"""The engine's other users (`quotaguard test`, the simulator) report an object the API server
would refuse instead of failing on it."""

from __future__ import annotations

from quotaguard.cli import main
from quotaguard.simulate.arrivals import verdict_of

from .builders import inference_pod
from .conftest import SAMPLE_POLICY


def test_a_policy_test_case_with_an_odd_object_fails_and_says_why(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"""\
apiVersion: quotaguard.dev/v1alpha1
kind: PolicyTest
metadata: {{name: odd}}
policy: {SAMPLE_POLICY}
cases:
  - name: a label written as a YAML number
    namespace: inference
    object:
      metadata: {{name: p, labels: {{version: 2}}}}
      spec: {{containers: [{{name: main, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]}}
    expect: {{allowed: true}}
"""
    )
    assert main(["test", str(suite)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  a label written as a YAML number" in out
    assert "request.object.metadata.labels[version] must be a string, not a number" in out


def test_the_simulator_counts_an_odd_manifest_as_refused(policy):
    verdict = verdict_of(policy, inference_pod(("spec containers", {})), "inference")
    assert not verdict.allowed
    assert verdict.rules == "malformed"
    assert "request.object.spec.containers must be a list, not a map" in verdict.message
