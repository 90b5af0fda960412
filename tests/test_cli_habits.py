"""Habits of kubectl and kyverno a platform engineer expects from the CLI: help when run bare,
misspelt verbs and flags named with a suggestion, the same short flags everywhere, readable
`review` on a terminal, file errors in words, kubeconfig found as kubectl finds it,
`validate` refusing a near-miss kind, and `test` reports for CI."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from quotaguard.cli import VERBS, build_parser, main
from quotaguard.kube.client import ConfigSource, NoClusterConfig, config_source

ROOT = Path(__file__).resolve().parents[1]
POLICY = str(ROOT / "config" / "policy.yaml")
SUITES = str(ROOT / "config" / "tests")
DENIED_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: big, namespace: serving-a}
spec: {containers: [{name: main, image: x, resources: {limits: {nvidia.com/gpu: "9"}}}]}
"""
REWRITTEN_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: embedder, namespace: serving-a, annotations: {quotaguard.dev/gpu-memory: 8Gi}}
spec: {containers: [{name: main, image: x, resources: {limits: {nvidia.com/gpu: "1"}}}]}
"""


def test_bare_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: quotaguard") and all(verb in out for verb in VERBS)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["reveiw"], "unknown verb 'reveiw'; did you mean review?"),
        (
            ["review", "--polcy", POLICY],
            "quotaguard review: unknown flag --polcy (did you mean --policy?)",
        ),
        (
            ["plan", "-p", POLICY, "--snapshot", "x", "--outptu", "json"],
            "unknown flag --outptu (did you mean --output?)",
        ),
        (["validate", POLICY, "--strikt"], "unknown flag --strikt (did you mean --strict?)"),
        (
            ["serve", "--policy", POLICY, "--zzz"],
            "unknown flag --zzz (see `quotaguard serve --help`)",
        ),
    ],
)
def test_misspellings_are_named_with_a_suggestion(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_a_missing_required_flag_is_still_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["review"]) == 2
    assert "the following arguments are required: -p/--policy" in capsys.readouterr().err


def short_and_long(verb: str) -> dict[str, set[str]]:
    parser = build_parser()
    (sub,) = [
        a for a in parser._actions if hasattr(a, "choices") and a.choices and verb in a.choices
    ]
    return {a.dest: set(a.option_strings) for a in sub.choices[verb]._actions}


@pytest.mark.parametrize("verb", VERBS)
def test_policy_and_output_have_their_short_flags_on_every_verb(verb: str) -> None:
    flags = short_and_long(verb)
    if "policy" in flags:
        assert flags["policy"] == {"-p", "--policy"}, verb
    if "output" in flags:
        assert flags["output"] == {"-o", "--output"}, verb


def test_serve_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for default in (
        "(default: 8443)",
        "(default: 8080)",
        "(default: webhook,controller,reports)",
        "(default: info)",
    ):
        assert default in out
    assert "(default: None)" not in out
    for flag, default in (
        ("--webhook-max-connections N", "1000"),
        ("--webhook-idle-timeout SECONDS", "60.0"),
        ("--webhook-header-timeout SECONDS", "10.0"),
        ("--webhook-body-timeout SECONDS", "10.0"),
    ):
        shown = out.rsplit(flag, 1)[1]  # the help entry, after the usage line
        assert f"(default: {default})" in shown[: shown.index("--") if "--" in shown else None]


def review(
    tmp_path: Path, text: str, *args: str, tty: bool, monkeypatch: pytest.MonkeyPatch
) -> int:
    path = tmp_path / "objects.yaml"
    path.write_text(text)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    return main(["review", "-p", POLICY, str(path), *args])


def test_review_is_a_summary_on_a_terminal_and_json_in_a_pipe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert review(tmp_path, REWRITTEN_POD, tty=True, monkeypatch=monkeypatch) == 0
    summary = capsys.readouterr().out
    assert summary.splitlines()[0] == "Pod/embedder in serving-a: changed (tenant inference)"
    assert "rewrote: main: nvidia.com/gpu=1 -> nvidia.com/mig-1g.10gb=1" in summary
    assert "because: tenant inference, rule 1: best-fit for 8Gi" in summary
    assert review(tmp_path, REWRITTEN_POD, tty=False, monkeypatch=monkeypatch) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "AdmissionReview"
    assert review(tmp_path, REWRITTEN_POD, "-o", "json", tty=True, monkeypatch=monkeypatch) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "AdmissionReview"


def test_review_summary_of_a_denial_says_why_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert review(tmp_path, DENIED_POD, tty=True, monkeypatch=monkeypatch) == 1
    captured = capsys.readouterr()
    assert "Pod/big in serving-a: denied (tenant inference)" in captured.out
    assert "  rules: max-gpus-per-pod" in captured.out
    assert captured.out.count("maxGPUsPerPod") == 1 and captured.err == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "/nonexistent/policy.yaml"],
        ["review", "-p", "/nonexistent/policy.yaml", "-"],
        ["review", "-p", POLICY, "/nonexistent/pod.yaml"],
        ["test", "/nonexistent/suite.yaml"],
        ["plan", "-p", POLICY, "--snapshot", "/nonexistent/cluster.json"],
        ["simulate", "-p", POLICY, "--trace", "/nonexistent/trace.yaml"],
        ["certs", "--out-dir", "/proc/nonexistent/tls"],  # /proc refuses new directories
    ],
)
def test_a_missing_file_is_named_in_words(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "nonexistent" in err and "no such file" in err.lower()
    assert "Errno" not in err and "Traceback" not in err


def test_kubeconfig_is_found_in_kubectls_order(tmp_path: Path) -> None:
    home_config = str(tmp_path / ".kube" / "config")
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    present = {home_config, a, b}.__contains__
    home = str(tmp_path)
    assert config_source("flag", {"KUBECONFIG": a}, exists=present, home=home) == ConfigSource(
        files=("flag",)
    )
    merged = config_source(
        None, {"KUBECONFIG": f"{a}:{tmp_path / 'gone'}:{b}"}, exists=present, home=home
    )
    assert merged == ConfigSource(files=(a, b))
    assert config_source(None, {}, exists=present, home=home) == ConfigSource(files=(home_config,))
    in_pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert config_source(None, in_pod, exists=lambda _: False, home=home).in_cluster
    with pytest.raises(NoClusterConfig, match="pass --kubeconfig FILE or set KUBECONFIG"):
        config_source(None, {}, exists=lambda _: False, home=home)


def test_validate_refuses_a_near_miss_of_tenant_policy_in_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "policy.yaml").write_text(Path(POLICY).read_text())
    (tmp_path / "typo.yaml").write_text(
        "apiVersion: quotaguard.dev/v1alpha1\nkind: TenantPolcy\nmetadata: {name: x}\n"
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: skipped}\n"
    )
    (tmp_path / "lower.yaml").write_text("apiVersion: v1\nkind: tenantpolicy\n")
    assert main(["validate", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert (
        f"{tmp_path / 'typo.yaml'}:2:7: kind: unknown kind 'TenantPolcy'; "
        "did you mean TenantPolicy?" in err
    )
    assert "'tenantpolicy'" in err and "ConfigMap" not in err
    # The repository's own directory holds a PolicyTest suite next to the policy: still valid.
    assert main(["validate", str(ROOT / "config")]) == 0


def test_test_reports_as_json_and_junit(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["test", SUITES, "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["failed"] == 0 and report["passed"] == len(report["cases"]) > 0
    assert main(["test", SUITES, "-o", "junit"]) == 0
    root = ElementTree.fromstring(capsys.readouterr().out)
    assert root.tag == "testsuites" and root.get("failures") == "0"
    assert int(root.get("tests", "0")) == report["passed"]
    # A failing case is a <failure> with the unmet expectation, and exit 1.
    suite = (ROOT / "config" / "tests" / "policy-test.yaml").read_text()
    broken = tmp_path / "tests"
    broken.mkdir()
    (tmp_path / "policy.yaml").write_text(Path(POLICY).read_text())
    (broken / "suite.yaml").write_text(suite.replace("allowed: true", "allowed: false", 1))
    for name in ("objects",):
        (broken / name).symlink_to(ROOT / "config" / "tests" / name)
    assert main(["test", str(broken), "-o", "junit"]) == 1
    failures = ElementTree.fromstring(capsys.readouterr().out).findall(".//failure")
    assert len(failures) == 1 and failures[0].get("message")
