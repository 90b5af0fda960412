"""`quotaguard plan` as a user runs it: table, JSON, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotaguard.cli import main
from tests.quota.test_cluster import FIXTURE

POLICY = str(Path(__file__).parents[2] / "config" / "policy.yaml")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", "--policy", POLICY, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--snapshot", str(FIXTURE))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("policy gpu-platform  mode recommend  backend kueue")
    assert any(
        line.split()[:6] == ["h100", "nvidia.com/gpu", "48", "3", "42", "0"] for line in lines
    )
    training = next(line for line in lines if line.startswith("training") and " h100 " in line)
    assert "16->20" in training
    assert "pending demand 24 above nominal; share by weight" in training


def test_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--snapshot", str(FIXTURE), "--output", "json")
    assert code == 0
    report = json.loads(out)
    assert [t["name"] for t in report["tenants"]] == ["inference", "notebooks", "training"]
    notebooks = next(t for t in report["tenants"] if t["name"] == "notebooks")
    # Notebooks used 5 shared units (1.25 GPUs) of ~23 in use, under its entitlement of 1/6:
    # its weight rises from 1 to sqrt((1/6) / (1.25/22.96)) = 1.75.
    assert (notebooks["baseWeight"], notebooks["weight"]) == (1.0, 1.75)
    shared = next(row for row in notebooks["classes"] if row["class"] == "shared")
    assert (shared["current"]["nominal"], shared["nominal"], shared["target"]) == (8, 10, 30)


def test_csv(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--snapshot", str(FIXTURE), "--output", "csv")
    assert code == 0
    assert out.splitlines()[0].startswith("tenant,queue,weight,baseWeight,class,resource,capacity")
    assert len(out.splitlines()) == 7


def test_guarantees_above_capacity_still_plan_but_exit_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    document = json.loads(FIXTURE.read_text())
    # Cordon every whole-H100 node but one: capacity 8, 95% = 7, minus 3 held outside = 4.
    for item in document["items"]:
        name = item["metadata"]["name"]
        if item["kind"] == "Node" and name.startswith("h100-") and name != "h100-06":
            item["spec"]["unschedulable"] = True
    smaller = tmp_path / "smaller.json"
    smaller.write_text(json.dumps(document))
    code, out, err = run(capsys, "--snapshot", str(smaller), "--output", "json")
    assert code == 1
    report = json.loads(out)
    training = next(t for t in report["tenants"] if t["name"] == "training")
    assert training["classes"][0]["guaranteed"] == 4
    assert "h100: guarantee scaled: capacity 4 < guarantees 16" in err
    code, out, err = run(capsys, "--snapshot", str(smaller))  # the table too says why on stderr
    assert code == 1 and "guarantee scaled" in out
    assert "h100: guarantee scaled: capacity 4 < guarantees 16" in err


def test_a_snapshot_without_nodes_is_an_input_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pods_only = tmp_path / "pods.json"
    pods_only.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": []}))
    code, out, err = run(capsys, "--snapshot", str(pods_only))
    assert (code, out) == (2, "")
    assert err == f"{pods_only}: the snapshot holds no Node (expected a kubectl v1 List)\n"


def test_bad_input_exits_2_naming_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    code, out, err = run(capsys, "--snapshot", str(broken))
    assert (code, out) == (2, "")
    assert err.startswith(f"{broken}:1:2: not JSON")
    code, _, err = run(capsys, "--snapshot", str(tmp_path / "absent.json"))
    assert code == 2 and "absent.json: cannot read" in err
    bad_policy = tmp_path / "policy.yaml"
    bad_policy.write_text("apiVersion: quotaguard.dev/v1alpha1\nkind: TenantPolicy\n")
    code = main(["plan", "--policy", str(bad_policy), "--snapshot", str(FIXTURE)])
    assert code == 1  # an invalid policy is the answer "no", as in every verb
    assert str(bad_policy) in capsys.readouterr().err
    # Without --snapshot or --kubeconfig the cluster is found as kubectl finds it; none here.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KUBECONFIG", str(tmp_path / "absent"))
        assert main(["plan", "--policy", POLICY]) == 2
    assert "no cluster configuration" in capsys.readouterr().err


def test_unreachable_cluster_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    code, out, err = run(capsys, "--kubeconfig", str(kubeconfig))
    assert (code, out) == (2, "")
    assert err.startswith(f"{kubeconfig}: cannot read the cluster:")


def test_html_output_is_the_reports_page_without_a_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["plan", "-p", POLICY, "--snapshot", str(FIXTURE), "-o", "html"])
    page = capsys.readouterr().out
    assert code in (0, 1)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<svg" in page and "gpu-platform" in page
    assert 'http-equiv="refresh"' not in page  # a file, not a live page
