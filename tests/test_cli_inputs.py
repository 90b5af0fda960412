"""How every verb takes its inputs and prints its data, as kubectl users expect: `-` for
standard input wherever a file is read, kubectl's YAML as well as its JSON, `-o json|yaml`, a
file of the wrong kind named as such (exit 2), flags only as spelt in full, `--context` and
`--kubeconfig` wherever a cluster is read, and `review` saying what a request was counted as."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from quotaguard.cli import VERBS, build_parser, main
from tests.quota.test_cluster import FIXTURE as SNAPSHOT

ROOT = Path(__file__).resolve().parents[1]
POLICY = str(ROOT / "config" / "policy.yaml")
SUITE = ROOT / "config" / "tests" / "policy-test.yaml"
TRACE = str(ROOT / "tests" / "simulate" / "small.yaml")
SCRAPE = ROOT / "tests" / "fixtures" / "telemetry" / "dcgm-scrape.txt"
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: serving-a}
spec: {template: {spec: {containers: [{name: m, image: x}]}}}
"""
SLICES_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: slices, namespace: serving-a}
spec: {containers: [{name: m, image: x, resources: {limits: {nvidia.com/mig-1g.10gb: "3"}}}]}
"""


def stdin(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- `-` is standard input --------------------------------------------------------------------


def test_validate_reads_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin(monkeypatch, Path(POLICY).read_text())
    code, out, _ = run(capsys, ["validate", "-"])
    assert code == 0
    assert out.startswith("<stdin>: policy 'gpu-platform' is valid")


def test_validate_names_standard_input_in_its_problems(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin(monkeypatch, Path(POLICY).read_text().replace("tenants:", "tenantz:", 1))
    code, _, err = run(capsys, ["validate", "-"])
    assert code == 1
    assert re.search(r"^<stdin>:\d+:\d+: ", err, re.MULTILINE), err


def test_review_reads_the_policy_from_standard_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin(monkeypatch, Path(POLICY).read_text())
    pod = write(tmp_path, "pod.yaml", SLICES_POD)
    code, out, _ = run(capsys, ["review", "-p", "-", pod, "-o", "json"])
    assert code == 0 and json.loads(out)["response"]["allowed"] is True


def test_review_refuses_two_inputs_on_standard_input(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, ["review", "-p", "-", "-"])
    assert code == 2 and "both read standard input" in err


def test_plan_reads_the_snapshot_from_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, from_file, _ = run(
        capsys, ["plan", "-p", POLICY, "--snapshot", str(SNAPSHOT), "-o", "csv"]
    )
    assert code == 0
    stdin(monkeypatch, SNAPSHOT.read_text())
    code, from_stdin, _ = run(capsys, ["plan", "-p", POLICY, "--snapshot", "-", "-o", "csv"])
    assert code == 0 and from_stdin == from_file


def test_plan_reads_the_yaml_kubectl_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kubectl get ... -o yaml` is one v1 List in YAML; the plan is the JSON one's."""
    listed = yaml.safe_dump(json.loads(SNAPSHOT.read_text()))
    code, from_json, _ = run(
        capsys, ["plan", "-p", POLICY, "--snapshot", str(SNAPSHOT), "-o", "csv"]
    )
    assert code == 0
    code, from_yaml, err = run(
        capsys, ["plan", "-p", POLICY, "--snapshot", write(tmp_path, "c.yaml", listed), "-o", "csv"]
    )
    assert (code, err) == (0, "") and from_yaml == from_json
    stdin(monkeypatch, listed)
    code, piped, _ = run(capsys, ["plan", "-p", POLICY, "--snapshot", "-", "-o", "csv"])
    assert code == 0 and piped == from_json


def test_simulate_reads_the_trace_from_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin(monkeypatch, Path(TRACE).read_text())
    code, out, _ = run(capsys, ["simulate", "-p", POLICY, "--trace", "-", "-o", "json"])
    assert code == 0 and {"static", "dynamic"} <= set(json.loads(out))


def test_test_reads_a_suite_from_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paths in a suite read from standard input are relative to the current directory."""
    monkeypatch.chdir(SUITE.parent)
    stdin(monkeypatch, SUITE.read_text())
    code, out, _ = run(capsys, ["test", "-", "-o", "json"])
    report = json.loads(out)
    assert code == 0 and report["failed"] == 0 and report["passed"] > 0
    assert {case["file"] for case in report["cases"]} == {"<stdin>"}


def test_plan_reads_gpu_telemetry_from_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin(monkeypatch, SCRAPE.read_text())
    argv = ["plan", "-p", POLICY, "--snapshot", str(SNAPSHOT), "--gpu-metrics", "-", "-o", "json"]
    code, out, err = run(capsys, argv)
    assert code == 0
    telemetry = json.loads(out)["telemetry"]
    assert telemetry["source"] == "<stdin>" and telemetry["faultyGpus"] > 0
    assert err.startswith("<stdin>: warning:")


@pytest.mark.parametrize(
    ("argv", "flags"),
    [
        (["plan", "-p", "-", "--snapshot", "-"], "--policy and --snapshot both"),
        (["simulate", "-p", "-", "--trace", "-"], "--policy and --trace both"),
        (
            ["simulate", "-p", "-", "--trace", "-", "--gpu-metrics", "-"],
            "--policy and --trace and --gpu-metrics all",
        ),
    ],
)
def test_one_standard_input_is_read_once(
    capsys: pytest.CaptureFixture[str], argv: list[str], flags: str
) -> None:
    code, _, err = run(capsys, argv)
    assert code == 2 and f"{flags} read standard input" in err


# -- -o json|yaml -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", POLICY],
        ["test", str(SUITE)],
        ["plan", "-p", POLICY, "--snapshot", str(SNAPSHOT)],
        ["simulate", "-p", POLICY, "--trace", TRACE],
    ],
    ids=["validate", "test", "plan", "simulate"],
)
def test_yaml_output_is_the_json_data(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, as_json, _ = run(capsys, [*argv, "-o", "json"])
    assert code == 0
    code, as_yaml, _ = run(capsys, [*argv, "-o", "yaml"])
    assert code == 0
    assert _stable(yaml.safe_load(as_yaml)) == _stable(json.loads(as_json))


def _stable(data: Any) -> Any:
    """The data without what differs between two runs (times)."""
    if isinstance(data, dict):
        return {k: _stable(v) for k, v in data.items() if k not in ("at", "generatedAt", "time")}
    if isinstance(data, list):
        return [_stable(v) for v in data]
    return data


def test_every_verb_that_prints_data_offers_json_and_yaml() -> None:
    parser = build_parser()
    (verbs,) = [a for a in parser._actions if getattr(a, "choices", None)]
    for verb in ("validate", "review", "test", "plan", "simulate", "certs"):
        output = next(a for a in verbs.choices[verb]._actions if a.dest == "output")
        assert {"json", "yaml"} <= set(output.choices), verb


def test_certs_says_what_it_did_as_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tls = str(tmp_path / "tls")
    code, out, _ = run(capsys, ["certs", "--out-dir", tls, "-o", "json"])
    first = json.loads(out)
    assert code == 0 and first["upToDate"] is False and first["dryRun"] is False
    assert [a["action"] for a in first["actions"]] == ["write", "write", "write"]
    code, out, _ = run(capsys, ["certs", "--out-dir", tls, "-o", "yaml"])
    again = yaml.safe_load(out)
    assert code == 0 and again["upToDate"] is True and again["actions"] == []
    assert any(note.startswith("CA valid until") for note in again["notes"])


# -- the wrong kind of file -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["review", "--policy", "{deployment}", "{deployment}"],
            "{deployment}: expected a TenantPolicy (apiVersion quotaguard.dev/v1alpha1); "
            "found Deployment (apps/v1)",
        ),
        (
            ["plan", "--policy", "{deployment}", "--snapshot", str(SNAPSHOT)],
            "expected a TenantPolicy",
        ),
        (["validate", "{deployment}"], "found Deployment (apps/v1)"),
        (
            ["review", "--policy", POLICY, POLICY],
            f"{POLICY}: expected an AdmissionReview or workload manifests",
        ),
        (
            ["plan", "--policy", POLICY, "--snapshot", POLICY],
            f"{POLICY}: the snapshot holds no Node (expected a kubectl v1 List); "
            "found 1 TenantPolicy",
        ),
        (
            ["simulate", "--policy", POLICY, "--trace", POLICY],
            f"{POLICY}: expected a trace (workloads, and nodes or a snapshot); found TenantPolicy",
        ),
        (["test", POLICY], "no PolicyTest document"),
    ],
)
def test_a_file_of_the_wrong_kind_is_an_input_error_saying_what_was_expected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    deployment = write(tmp_path, "deployment.yaml", DEPLOYMENT)
    argv = [word.replace("{deployment}", deployment) for word in argv]
    code, _, err = run(capsys, argv)
    assert code == 2, err
    assert expected.replace("{deployment}", deployment) in err
    assert "Traceback" not in err


def test_validate_strict_never_calls_a_failing_policy_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = Path(POLICY).read_text()
    assert "replicas: 4" in text
    warned = write(tmp_path, "p.yaml", text.replace("replicas: 4", "", 1))
    code, out, err = run(capsys, ["validate", warned])
    assert code == 0 and "is valid" in out and "warning" in err
    code, out, _ = run(capsys, ["validate", "--strict", warned])
    assert code == 1
    assert "valid (" not in out and "fails --strict (1 warning(s), counted as errors)" in out
    code, out, _ = run(capsys, ["validate", "--strict", warned, "-o", "json"])
    assert code == 1 and json.loads(out)[0]["valid"] is False


# -- flags ------------------------------------------------------------------------------------


def long_flags(verb: str) -> list[str]:
    parser = build_parser()
    (verbs,) = [a for a in parser._actions if getattr(a, "choices", None)]
    return [o for a in verbs.choices[verb]._actions for o in a.option_strings if o[:2] == "--"]


@pytest.mark.parametrize("verb", VERBS)
def test_no_flag_is_taken_abbreviated(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    for flag in long_flags(verb):
        if flag in ("--help", "--version"):
            continue
        abbreviated = flag[:-1]
        if abbreviated in long_flags(verb):
            continue
        code, _, err = run(capsys, [verb, abbreviated, "x"])
        assert code == 2, (verb, abbreviated)
        assert f"unknown flag {abbreviated} (did you mean" in err, err


@pytest.mark.parametrize("verb", ["plan", "serve", "certs"])
def test_the_verbs_that_read_a_cluster_take_context_and_kubeconfig(verb: str) -> None:
    assert {"--context", "--kubeconfig"} <= set(long_flags(verb))


KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: here, context: {cluster: c, user: u}}]
current-context: here
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "-p", POLICY],
        ["certs"],
    ],
    ids=["plan", "certs"],
)
def test_a_context_the_kubeconfig_lacks_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    config = write(tmp_path, "kubeconfig", KUBECONFIG)
    code, _, err = run(capsys, [*argv, "--kubeconfig", config, "--context", "elsewhere"])
    assert code == 2 and "elsewhere" in err and "Traceback" not in err


def test_certs_says_when_the_cluster_does_not_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, "kubeconfig", KUBECONFIG)
    code, _, err = run(capsys, ["certs", "--kubeconfig", config, "--dry-run"])
    assert code == 2 and "no answer from the API server" in err and "Traceback" not in err


def test_serve_passes_the_context_on() -> None:
    args = build_parser().parse_args(["serve", "-p", POLICY, "--context", "prod"])
    assert args.context == "prod"


def test_certs_help_shows_its_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["certs", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for default in (
        "(default: quotaguard-system)",
        "(default: quotaguard-webhook)",
        "(default: quotaguard-webhook-tls)",
        "(default: 43800h)",
        "(default: 8760h)",
        "(default: 720h)",
    ):
        assert default in out
    assert "(default: None)" not in out and "(default: [])" not in out


# -- HTML -------------------------------------------------------------------------------------


def test_simulate_prints_html_as_plan_does_and_still_writes_html_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, page, _ = run(capsys, ["simulate", "-p", POLICY, "--trace", TRACE, "-o", "html"])
    assert code == 0 and page.startswith("<!DOCTYPE html>")
    written = tmp_path / "sim.html"
    code, _, _ = run(capsys, ["simulate", "-p", POLICY, "--trace", TRACE, "--html", str(written)])
    assert code == 0 and written.read_text().startswith("<!DOCTYPE html>")


def test_plan_writes_its_html_page_to_a_file_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    written = tmp_path / "plan.html"
    code, out, _ = run(
        capsys, ["plan", "-p", POLICY, "--snapshot", str(SNAPSHOT), "--html", str(written)]
    )
    assert code == 0 and out.startswith("policy gpu-platform")
    assert written.read_text().startswith("<!DOCTYPE html>")


# -- what review counted ----------------------------------------------------------------------


def test_review_summary_says_what_a_pod_counts_against_max_gpus_per_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = write(tmp_path, "pod.yaml", SLICES_POD)
    code, out, _ = run(capsys, ["review", "-p", POLICY, pod, "-o", "summary"])
    assert code == 0
    assert (
        "  counted: 0.43 of maxGPUsPerPod 1 GPU-equivalent (tenant inference; "
        "3 x nvidia.com/mig-1g.10gb at 1/7 GPU each)" in out
    )
