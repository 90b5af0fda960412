"""Every validation rule of a tenant policy, as `quotaguard validate` reports it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from quotaguard.cli import main
from quotaguard.policy.loader import load_policy_documents, load_policy_file, load_policy_text
from quotaguard.policy.problems import PolicyInvalid

SAMPLE = Path(__file__).parents[2] / "config" / "policy.yaml"

BASE = textwrap.dedent(
    """\
    apiVersion: quotaguard.dev/v1alpha1
    kind: TenantPolicy
    metadata:
      name: p
    spec:
      gpuClasses:
        - name: h100
          resource: nvidia.com/gpu
          memory: 80Gi
        - name: mig1
          resource: nvidia.com/mig-1g.10gb
          memory: 10Gi
          slices: 1
        - name: shared
          resource: nvidia.com/gpu.shared
          memory: 80Gi
          sharing: time-slicing
          replicas: 4
      tenants:
        - name: a
          namespaces: [a, "a-*"]
          allowedClasses: [h100, mig1]
          quota:
            h100: {guaranteed: 2, max: 4}
          rewrite:
            - when: {gpus: 1}
              to: mig1
        - name: b
          namespaces: [b]
    """
)


def problems(text: str) -> list[str]:
    return [str(p) for d in load_policy_documents(text, "p.yaml") for p in d.problems]


def only(text: str) -> str:
    found = problems(text)
    assert len(found) == 1, found
    return found[0]


def test_sample_policy_is_valid() -> None:
    policy = load_policy_file(SAMPLE)
    assert {t.name for t in policy.spec.tenants} >= {"inference", "training", "notebooks"}
    assert problems(SAMPLE.read_text()) == []


def test_base_policy_is_valid_and_derives_values() -> None:
    policy = load_policy_text(BASE)
    assert policy.classes_by_name["mig1"].gpu_equivalent * 7 == 1
    assert policy.classes_by_name["shared"].gpu_equivalent * 4 == 1
    assert policy.cohort == "p"
    assert policy.tenant_of("a-x") is policy.tenants_by_name["a"]
    assert policy.tenant_of("c") is None
    assert policy.tenants_by_name["b"].queue == "b"
    assert policy.spec.rebalance.interval == 60


def test_unknown_field_is_located_with_suggestion() -> None:
    text = BASE.replace("      allowedClasses:", "      alowedClasses: []\n      allowedClasses:")
    message = only(text)
    assert message.startswith("p.yaml:22:7: spec.tenants[0].alowedClasses: unknown field")
    assert "did you mean 'allowedClasses'" in message


def test_unknown_top_level_field() -> None:
    assert "unknown field 'spek'" in only(BASE + "spek: {}\n")


def test_type_error_points_at_value() -> None:
    message = only(BASE.replace("h100: {guaranteed: 2, max: 4}", "h100: {guaranteed: x, max: 4}"))
    assert message.startswith("p.yaml:24:28: spec.tenants[0].quota.h100.guaranteed:")


def test_bad_memory_quantity() -> None:
    assert "memory size" in only(BASE.replace("memory: 10Gi", "memory: lots"))


def test_missing_required_field() -> None:
    text = BASE.replace("      resource: nvidia.com/gpu\n", "")
    # a class may be reached by DRA alone, so the message names both ways to back it
    assert "p.yaml:7:7: spec.gpuClasses[0]: a GPU class needs a resource" in only(text)


def test_all_problems_reported_at_once() -> None:
    text = (
        BASE.replace("weight", "w")
        .replace("name: b\n", "name: b\n      weight: -1\n      colour: red\n")
        .replace("to: mig1", "to: nope")
    )
    found = problems(text)
    assert len(found) == 3, found
    assert any("weight: must be greater than 0" in p for p in found)
    assert any("unknown field 'colour'" in p for p in found)
    assert any("'nope' is not a GPU class" in p for p in found)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("name: shared", "name: h100"), "duplicate GPU class name 'h100'"),
        (("name: b\n", "name: a\n"), "duplicate tenant name 'a'"),
        (("name: b\n", "name: b\n      queue: a\n"), "queue 'a' is already owned by tenant 'a'"),
        (("[b]", '["a-team"]'), "overlaps 'a-*' of tenant 'a' (both match 'a-team')"),
        (("[b]", '["*-x"]'), "overlaps 'a-*' of tenant 'a' (both match 'a-x')"),
        (("to: mig1", "to: shared"), "'shared' is not in the allowedClasses of tenant 'a'"),
        (("to: mig1", "to: gpu"), "rewrite target 'gpu' is not a GPU class"),
        (("[h100, mig1]", "[h100, mig1, mig2]"), "allows unknown GPU class 'mig2'"),
        (("guaranteed: 2, max: 4", "guaranteed: 5, max: 4"), "guaranteed 5 is more than max 4"),
        (("h100: {", "mig9: {"), "quota for unknown GPU class 'mig9'"),
        (("[h100, mig1]", "[mig1]"), "has quota for 'h100' but does not allow that class"),
        (("when: {gpus: 1}", "when: {memoryAtLeast: 20Gi, memoryAtMost: 10Gi}"), "never match"),
        (("      sharing: time-slicing\n", ""), "replicas only applies to shared classes"),
        (("backend: kueue", "backend: slurm"), None),
        (("kind: TenantPolicy", "kind: TenantPolicy\nextra: 1"), "unknown field 'extra'"),
        (("slices: 1", "slices: 9"), "slices: must be less than or equal to 7"),
        (("name: a\n", "name: A_\n"), "spec.tenants[0].name: must be a DNS label"),
        (
            ("resource: nvidia.com/gpu\n", "resource: gpu\n"),
            "resource: must be an extended resource name, <domain>/<name>, such as nvidia.com/gpu "
            "(not 'gpu')",
        ),
    ],
)
def test_each_error_rule(change: tuple[str, str], expected: str | None) -> None:
    old, new = change
    assert old in BASE or old == "backend: kueue"
    text = BASE.replace(old, new) if old in BASE else BASE.replace("spec:\n", f"spec:\n  {new}\n")
    errors = [p for p in problems(text) if ": warning:" not in p]
    assert len(errors) == 1, errors
    message = errors[0]
    if expected:
        assert expected in message
    with pytest.raises(PolicyInvalid):
        load_policy_text(text)


def test_classes_sharing_a_resource_need_node_selectors() -> None:
    text = BASE.replace(
        "      tenants:",
        "    - name: a100\n      resource: nvidia.com/gpu\n      memory: 80Gi\n  tenants:",
    ).replace("  tenants:\n", "  tenants:\n", 1)
    text = BASE.replace(
        "  tenants:\n",
        "    - name: a100\n      resource: nvidia.com/gpu\n      memory: 40Gi\n  tenants:\n",
    )
    found = problems(text)
    assert len(found) == 2 and all("share resource 'nvidia.com/gpu'" in p for p in found)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("memory: 10Gi", "memory: 13Gi"), "no known MIG profile has 1 slice(s) and 13Gi"),
        (("      replicas: 4\n", ""), "should state replicas"),
        (
            ("name: b\n      namespaces: [b]", "name: b\n      namespaces: [kube-*]"),
            "overlaps exempt namespace 'kube-system'",
        ),
        (("to: mig1\n", "to: mig1\n        - to: h100\n        - to: h100\n"), "never reached"),
        (
            (
                "      tenants:",
                "      rebalance: {interval: 10m, demandWindow: 1m}\n      tenants:",
            ),
            "demandWindow (60s) is shorter than interval (600s)",
        ),
        (
            ("resource: nvidia.com/gpu.shared", "resource: example.com/widget"),
            "pods asking for 'example.com/widget' alone are neither rewritten nor checked "
            "unless the registrations send it: render the registrations for this policy: "
            "`quotaguard registrations --policy FILE --out-dir DIR`",
        ),
    ],
)
def test_each_warning_rule(change: tuple[str, str], expected: str) -> None:
    text = BASE.replace(*change)
    if change[0] == "      tenants:":
        text = BASE.replace(
            "  tenants:\n", "  rebalance: {interval: 10m, demandWindow: 1m}\n  tenants:\n"
        )
    found = problems(text)
    assert found and all(": warning:" in p for p in found), found
    assert any(expected in p for p in found), found
    load_policy_text(text)  # warnings alone do not make a policy unusable


def test_mig_classes_matching_known_profiles_pass() -> None:
    for memory, slices in (("5Gi", 1), ("20Gi", 2), ("47Gi", 3), ("71Gi", 3), ("6Gi", 1)):
        text = BASE.replace(
            "memory: 10Gi\n      slices: 1", f"memory: {memory}\n      slices: {slices}"
        )
        assert problems(text) == [], memory


def test_yaml_syntax_error_is_located() -> None:
    message = only(BASE.replace("name: p", "name: [p"))
    assert message.startswith("p.yaml:")
    assert int(message.split(":")[1]) >= 4


def test_cli_exit_code_is_2_for_a_file_that_is_not_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(BASE.replace("name: p", "name: [p"))
    assert main(["validate", str(broken)]) == 2
    assert capsys.readouterr().err.startswith(f"{broken}:")
    for verb in (["review", "-n", "a", "-"], ["plan", "--snapshot", "x.json"]):
        assert main([verb[0], "--policy", str(broken), *verb[1:]]) == 2


def test_an_invalid_policy_is_exit_1_in_every_verb(tmp_path: Path) -> None:
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(BASE.replace("max: 4", "max: 1"))
    assert main(["validate", str(invalid)]) == 1
    assert main(["review", "--policy", str(invalid), "-n", "a", "-"]) == 1
    assert main(["plan", "--policy", str(invalid), "--snapshot", "x.json"]) == 1
    assert main(["simulate", "--policy", str(invalid), "--trace", "t.yaml"]) == 1


def test_duplicate_yaml_key_is_an_error() -> None:
    assert "duplicate" in only(BASE.replace("  name: p\n", "  name: p\n  name: q\n"))


def test_not_a_mapping() -> None:
    assert "must be a mapping" in only("- a\n- b\n")


def test_cli_exit_codes_and_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(BASE)
    bad = tmp_path / "bad.yaml"
    bad.write_text(BASE.replace("weight", "w").replace("name: b\n", "name: b\n      weigth: 1\n"))
    assert main(["validate", str(good)]) == 0
    assert "is valid" in capsys.readouterr().out
    assert main(["validate", str(good), str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:29:7: spec.tenants[1].weigth: unknown field 'weigth'" in err
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_cli_directory_skips_other_documents(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(BASE)
    (tmp_path / "kustomization.yaml").write_text("resources: [a.yaml]\n")
    (tmp_path / "notes.txt").write_text("not yaml")
    assert main(["validate", str(tmp_path)]) == 0
    (tmp_path / "other.yaml").write_text(BASE.replace("max: 4", "max: 1"))
    assert main(["validate", str(tmp_path)]) == 1


def test_cli_directory_still_reports_a_file_that_is_not_yaml_or_repeats_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "policy.yaml").write_text(BASE)
    broken = tmp_path / "broken.yaml"
    broken.write_text("workloads:\n  - {at: 1\n")
    assert main(["validate", str(tmp_path)]) == 2
    assert f"{broken}:" in capsys.readouterr().err
    broken.write_text("kind: ConfigMap\ndata: {a: 1, a: 2}\n")
    assert main(["validate", str(tmp_path)]) == 2
    assert f"{broken}:2:" in capsys.readouterr().err


def test_cli_strict_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    warned = tmp_path / "warned.yaml"
    warned.write_text(BASE.replace("      replicas: 4\n", ""))
    assert main(["validate", str(warned)]) == 0
    assert main(["validate", "--strict", str(warned)]) == 1
    capsys.readouterr()
    assert main(["validate", "--output", "json", str(warned)]) == 0
    out = capsys.readouterr().out
    assert '"severity": "warning"' in out and '"field": "spec.gpuClasses[2]"' in out


def test_explicit_file_without_policy_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another kind of file is the wrong input (exit 2), not an invalid policy (exit 1)."""
    other = tmp_path / "cm.yaml"
    other.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["validate", str(other)]) == 2
    assert (
        f"{other}: expected a TenantPolicy (apiVersion quotaguard.dev/v1alpha1); "
        "found ConfigMap (v1)" in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("      weight: .inf\n", "weight: must be a finite number"),
        ("      weight: .nan\n", "weight: must be a finite number"),
    ],
)
def test_non_finite_numbers_are_errors_not_crashes_later(line: str, expected: str) -> None:
    found = problems(BASE.replace("name: b\n", "name: b\n" + line))
    assert any(expected in p for p in found), found


@pytest.mark.parametrize("value", [".nan", ".inf", "'99999999999h'"])
def test_non_finite_or_absurd_durations_are_errors(value: str) -> None:
    text = BASE.replace("  tenants:\n", f"  rebalance: {{interval: {value}}}\n  tenants:\n", 1)
    assert any("rebalance.interval" in p for p in problems(text)), problems(text)


def test_a_class_of_another_vendors_gpu_is_sent_so_there_is_no_warning() -> None:
    text = BASE.replace("resource: nvidia.com/gpu.shared", "resource: amd.com/gpu")
    assert not any("neither rewritten nor checked" in p for p in problems(text))
