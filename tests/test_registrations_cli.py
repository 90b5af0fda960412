"""`quotaguard registrations`: the webhook configurations that send every resource name a
policy governs; and the hostile tenant they stop, who asks only for such a name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from quotaguard.cli import main
from quotaguard.webhook.registrations import configurations, render
from tests.deploy.test_sent_names import POLICY, POLICY_NAMES, SLICE

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_POLICY = str(ROOT / "config" / "policy.yaml")
SNEAKY_POD = f"""\
apiVersion: v1
kind: Pod
metadata: {{name: sneak, namespace: research}}
spec: {{containers: [{{name: main, image: x, resources: {{limits: {{{SLICE}: "4"}}}}}}]}}
"""


@pytest.fixture
def policy(tmp_path: Path) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return str(path)


def test_the_three_configurations_are_printed_with_the_policys_names(
    policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["registrations", "-p", policy]) == 0
    printed = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert printed == configurations(POLICY_NAMES)
    assert [d["metadata"]["name"] for d in printed] == [
        "00-quotaguard-mutating",
        "quotaguard-validating",
        "quotaguard-validating-resources",
    ]


def test_names_and_json_outputs(policy: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["registrations", "-p", policy, "-o", "names"]) == 0
    assert capsys.readouterr().out == "example.com/a100-slice\nexample.org/fabric\n"
    assert main(["registrations", "-p", policy, "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["kind"] == "List" and listed["items"] == configurations(POLICY_NAMES)


def test_out_dir_holds_webhooks_files_rendered_for_the_policy(
    policy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "registrations"
    assert main(["registrations", "-p", policy, "--out-dir", str(out)]) == 0
    rendered = render(POLICY_NAMES)
    written = sorted(p.name for p in out.iterdir())
    assert written == [
        "mutatingwebhookconfiguration.yaml",
        "validatingwebhookconfiguration-resources.yaml",
        "validatingwebhookconfiguration.yaml",
    ]
    for name in written:
        assert (out / name).read_text() == rendered[f"webhook/{name}"]
    assert capsys.readouterr().out.count("wrote ") == 3


def test_a_policy_of_default_names_gets_the_shipped_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["registrations", "-p", SHIPPED_POLICY, "--out-dir", str(tmp_path)]) == 0
    assert len(list(tmp_path.iterdir())) == 3
    for path in tmp_path.iterdir():
        assert path.read_text() == (ROOT / "webhook" / path.name).read_text()
    capsys.readouterr()
    assert main(["registrations", "-p", SHIPPED_POLICY, "-o", "names"]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (
            ["-p", "/nonexistent/policy.yaml"],
            2,
            "/nonexistent/policy.yaml: cannot read: no such file",
        ),
        (["-p", str(ROOT / "webhook" / "service.yaml")], 2, "expected a TenantPolicy"),
        (["-p", "POLICY", "--out-dir", "/proc/nonexistent/out"], 2, "cannot write: no such file"),
        (["-p", "POLICY", "-o", "xml"], 2, "invalid choice: 'xml'"),
        (["-p", "INVALID"], 1, "allowedClasses"),
    ],
)
def test_bad_input_is_an_error_in_words(
    argv: list[str],
    code: int,
    message: str,
    policy: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(POLICY.replace("allowedClasses: [a100-slice]", "allowedClasses: [nope]"))
    argv = [{"POLICY": policy, "INVALID": str(invalid)}.get(word, word) for word in argv]
    assert main(["registrations", *argv]) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_tenant_asking_only_for_the_policys_own_name_is_judged(
    policy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hostile tenant: no nvidia.com/ key, no accelerator-like name, over its max. Sent
    (the rendered registrations name the resource), it is refused by the same answers the
    webhook gives."""
    pod = tmp_path / "pod.yaml"
    pod.write_text(SNEAKY_POD)
    assert main(["registrations", "-p", policy, "-o", "names"]) == 0
    assert SLICE in capsys.readouterr().out.split()
    assert main(["review", "-p", policy, str(pod)]) == 1
    response = json.loads(capsys.readouterr().out)["response"]
    assert response["allowed"] is False
    assert response["auditAnnotations"] == {"tenant": "research", "denied": "max-gpus-per-pod"}
    assert f"pod asks for 4 (main: {SLICE}: 4)" in response["status"]["message"]


def cluster_holding(monkeypatch: pytest.MonkeyPatch, configs: list[dict[str, Any]] | None) -> None:
    """`--check` reads these configurations (None: the cluster cannot be read)."""
    from quotaguard.commands import registrations

    def reader(kubeconfig: str | None, context: str | None) -> Any:
        if configs is None:
            raise registrations._Unreadable("k: cannot load a cluster configuration: no file")
        by_name = {c["metadata"]["name"]: c for c in configs}
        return lambda kind, name: by_name.get(name)

    monkeypatch.setattr(registrations, "_configuration_reader", reader)


@pytest.mark.parametrize(
    ("installed", "code", "said"),
    [
        (POLICY_NAMES, 0, "send every resource name of"),
        ((), 1, f"{SLICE}: the cluster's webhook registrations do not send a pod asking for it"),
        (POLICY_NAMES[1:], 1, f"{SLICE}: the cluster's webhook registrations do not send"),
    ],
)
def test_check_compares_the_clusters_registrations_with_the_policy(
    policy: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    installed: tuple[str, ...],
    code: int,
    said: str,
) -> None:
    cluster_holding(monkeypatch, configurations(installed))
    assert main(["registrations", "-p", policy, "--check"]) == code
    captured = capsys.readouterr()
    assert said in captured.out + captured.err
    if code:
        assert f"apply `quotaguard registrations --policy {policy}`" in captured.err
        assert "example.org/fabric" not in captured.err or not installed


def test_check_says_what_is_missing_or_unreadable(
    policy: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster_holding(monkeypatch, configurations(POLICY_NAMES)[:1])
    assert main(["registrations", "-p", policy, "--check"]) == 1
    err = capsys.readouterr().err
    assert "not in the cluster: quotaguard-validating, quotaguard-validating-resources" in err
    cluster_holding(monkeypatch, None)
    assert main(["registrations", "-p", policy, "--check"]) == 2
    assert "cannot load a cluster configuration" in capsys.readouterr().err
