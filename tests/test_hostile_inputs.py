"""Every verb on hostile input (tests/fixtures/hostile/): a located one-line error, exit 2, no
traceback, and no time or memory beyond the input's bounds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from quotaguard.cli import main

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "fixtures" / "hostile"
POLICY = str(ROOT / "config" / "policy.yaml")
LOCATED = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<column>\d+): ")

CASES = [
    # (argv, fixture, what stderr says)
    (["validate"], "policy-alias-bomb.yaml", "once aliases are expanded"),
    (["validate"], "policy-deep.yaml", "nested deeper than 100 levels"),
    (["validate"], "policy-huge-max.yaml", "does not fit in 64 bits"),
    (
        ["review", "--policy", "{fixture}", "config/tests/objects/jobset.yaml"],
        "policy-alias-bomb.yaml",
        "once aliases",
    ),
    (
        ["plan", "--snapshot", "tests/fixtures/snapshots/cluster.json", "--policy"],
        "policy-huge-max.yaml",
        "64 bits",
    ),
    (
        ["review", "--patched", "--policy", POLICY],
        "pod-alias-bomb.yaml",
        "once aliases are expanded",
    ),
    (["review", "--policy", POLICY], "pod-binary.yaml", "!!binary has no JSON equivalent"),
    (["review", "--policy", POLICY], "pod-set.yaml", "!!set has no JSON equivalent"),
    (["review", "--policy", POLICY], "pod-deep.json", "nested deeper than 100 levels"),
    (["review", "--policy", POLICY], "pod-huge-int.json", "does not fit in 64 bits"),
    (["review", "--policy", POLICY], "pod-duplicate-key.json", "duplicate key 'containers'"),
    (["review", "--policy", POLICY], "pod-duplicate-key.yaml", "duplicate key 'containers'"),
    (["simulate", "--policy", POLICY, "--trace"], "trace-alias-bomb.yaml", "once aliases"),
    (
        ["simulate", "--policy", POLICY, "--trace"],
        "trace-duplicate-key.yaml",
        "duplicate key 'horizon'",
    ),
    (["simulate", "--policy", POLICY, "--trace"], "trace-binary.yaml", "!!binary"),
    (["simulate", "--policy", POLICY, "--trace"], "trace-date.yaml", "not '2026-01-01'"),
    (["plan", "--policy", POLICY, "--snapshot"], "snapshot-huge-int.json", "64 bits"),
    (["plan", "--policy", POLICY, "--snapshot"], "snapshot-deep.json", "nested deeper"),
    (["test"], "suite-alias-bomb.yaml", "once aliases are expanded"),
]


@pytest.mark.parametrize(
    ("argv", "fixture", "says"), CASES, ids=[f"{a[0]}-{f}" for a, f, _ in CASES]
)
def test_hostile_input_is_a_located_input_error(argv, fixture, says, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    path = str(HOSTILE / fixture)
    args = [part.replace("{fixture}", path) for part in argv]
    if "{fixture}" not in " ".join(argv):
        args.append(path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    first = err.splitlines()[0]
    match = LOCATED.match(first)
    assert match and match["file"] == path, first
    assert says in first


def test_validate_refuses_two_policies_in_one_file_as_serve_and_review_do(capsys):
    path = str(HOSTILE / "policy-two-documents.yaml")
    assert main(["validate", path]) == 1
    err = capsys.readouterr().err
    assert f"{path}:94:1: a second TenantPolicy in this file" in err
    assert main(["review", "--policy", path, str(ROOT / "config/tests/objects/jobset.yaml")]) == 1
    assert f"{path}:94:1: a second TenantPolicy" in capsys.readouterr().err
