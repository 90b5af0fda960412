"""`quotaguard test`: the shipped suite passes; failures exit 1 with a diff; bad suites exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from quotaguard.cli import main

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "config" / "policy.yaml"

SUITE = f"""\
apiVersion: quotaguard.dev/v1alpha1
kind: PolicyTest
metadata: {{name: scratch}}
policy: {POLICY}
cases:
  - name: small notebook gets a slice
    namespace: nb-a
    object:
      metadata: {{name: p, annotations: {{quotaguard.dev/gpu-memory: 8Gi}}}}
      spec: {{containers: [{{name: main, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]}}
    expect:
      allowed: true
      patched:
        spec: {{containers: [{{resources: {{limits: {{nvidia.com/mig-1g.10gb: EXPECTED}}}}}}]}}
"""


def test_shipped_suite_passes(capsys):
    assert main(["test", str(ROOT / "config" / "tests")]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out
    assert out.count("PASS") >= 12
    assert out.rstrip().endswith(" passed, 0 failed")


def test_passing_and_failing_cases(tmp_path, capsys):
    (tmp_path / "ok.yaml").write_text(SUITE.replace("EXPECTED", "1"))
    assert main(["test", str(tmp_path / "ok.yaml")]) == 0
    assert "PASS  small notebook gets a slice" in capsys.readouterr().out
    (tmp_path / "ok.yaml").write_text(SUITE.replace("EXPECTED", "2"))
    assert main(["test", str(tmp_path / "ok.yaml")]) == 1
    out = capsys.readouterr().out
    assert "FAIL  small notebook gets a slice" in out
    assert '/spec/containers/0/resources/limits/nvidia.com~1mig-1g.10gb: expected 2, got "1"' in out
    assert "-        nvidia.com/mig-1g.10gb: 2" in out  # the diff
    assert "0 passed, 1 failed" in out


def test_denial_expectations(tmp_path, capsys):
    suite = SUITE.replace("namespace: nb-a", "namespace: default").replace(
        "      allowed: true\n",
        "      allowed: false\n      rules: [unmatched-namespace]\n      message: no tenant\n",
    )
    suite = suite[: suite.index("      patched:")]
    (tmp_path / "deny.yaml").write_text(suite)
    assert main(["test", str(tmp_path / "deny.yaml")]) == 0
    (tmp_path / "deny.yaml").write_text(suite.replace("namespace: default", "namespace: nb-a"))
    assert main(["test", str(tmp_path / "deny.yaml")]) == 1
    out = capsys.readouterr().out
    assert "expected denied, got allowed" in out
    assert "expected denial rules unmatched-namespace; fired: none" in out


def test_object_file_is_relative_to_the_suite(tmp_path, capsys):
    (tmp_path / "objects").mkdir()
    (tmp_path / "objects" / "pod.yaml").write_text(
        "metadata: {name: p}\n"
        "spec: {containers: [{name: m, resources: {limits: {nvidia.com/gpu: 1}}}]}\n"
    )
    suite = SUITE.replace(
        "    object:\n      metadata: {name: p, annotations: {quotaguard.dev/gpu-memory: 8Gi}}\n"
        "      spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1}}}]}\n",
        "    objectFile: objects/pod.yaml\n",
    ).replace("nvidia.com/mig-1g.10gb: EXPECTED", "nvidia.com/gpu.shared: 1")
    (tmp_path / "suite.yaml").write_text(suite)
    assert main(["test", str(tmp_path)]) == 0, capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (
            ("allowed: true", "allowd: true"),
            "expect.allowd: unknown field (did you mean 'allowed'?)",
        ),
        (
            ("    namespace: nb-a\n", "    namespace: nb-a\n    objectFile: x.yaml\n"),
            "exactly one of",
        ),
        (("kind: PolicyTest", "kind: PolicyTest\nextra: 1"), "extra: unknown field"),
        (("cases:", "cases: []\nunused:"), "cases: "),
    ],
)
def test_invalid_suite_exits_2_with_file_line_column(tmp_path, capsys, change, fragment):
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE.replace("EXPECTED", "1").replace(*change))
    assert main(["test", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:")
    assert err.split(":")[1].isdigit()
    assert fragment in err


def test_file_without_a_suite_exits_2(capsys):
    assert main(["test", str(POLICY)]) == 2
    assert "no PolicyTest document" in capsys.readouterr().err


def test_missing_policy_exits_2(tmp_path, capsys):
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE.replace(str(POLICY), "nowhere/policy.yaml"))
    assert main(["test", str(path)]) == 2
    assert "policy nowhere/policy.yaml" in capsys.readouterr().err


def test_an_invalid_policy_exits_1_and_one_that_is_not_yaml_exits_2(tmp_path, capsys):
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(POLICY.read_text().replace("maxGPUsPerPod: 8", "maxGPUsPerPodd: 8"))
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE.replace("EXPECTED", "1").replace(str(POLICY), str(invalid)))
    assert main(["test", str(path)]) == 1
    assert "maxGPUsPerPodd" in capsys.readouterr().err
    invalid.write_text("spec: [unclosed\n")
    assert main(["test", str(path)]) == 2
