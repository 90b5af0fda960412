"""The README's commands work as written, from the repository root, on the inputs the
repository ships; README and docs name no path outside the repository and no link of theirs
is broken. (The first command, `simulate` of the sample day, is run by
tests/simulate/test_cli.py.)"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from quotaguard.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "e2e" / "README.md"]
DOCS.append(ROOT / "bench" / "README.md")


def section(heading: str) -> str:
    """The text of README's `## heading` section."""
    text = README.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.DOTALL)


def commands(block: str) -> list[list[str]]:
    """The block's command lines (continuations joined, comments dropped), split as sh does."""
    joined = block.replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip()]


def run_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.chdir(ROOT)
    assert argv[0] == "quotaguard"
    return main(argv[1:])


def test_the_policy_commands_run_on_the_shipped_inputs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (block,) = shell_blocks(section("The tenant policy"))
    lines = commands(block)
    assert [line[:2] for line in lines] == [
        ["quotaguard", "validate"],
        ["quotaguard", "test"],
        ["quotaguard", "review"],
    ]
    for argv in lines:
        assert run_cli(argv, monkeypatch) == 0, argv
    out = capsys.readouterr().out
    patched = json.loads(out[out.index("\n{") :])  # the last command's: the patched Pod
    # The sample pod's nvidia.com/gpu: 1 with a 10Gi hint becomes the 1g.10gb MIG slice.
    (container,) = patched["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}


def test_the_plan_example_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (line,) = re.findall(r"`(quotaguard plan --policy [^`]+)`", section("How quotas are planned"))
    assert run_cli(shlex.split(line), monkeypatch) == 0
    assert "inference" in capsys.readouterr().out


STUBS = "\n".join(
    f'{tool}() {{ printf "%s\\t%s\\n" "$PWD" "$*" >> "$CALLS"; }}'
    for tool in ("docker", "kubectl", "helm", "kustomize")
)


def recorded_calls(block: str, tmp_path: Path) -> list[tuple[Path, list[str]]]:
    """Run the block in bash from the repository root with docker, kubectl, helm and
    kustomize replaced by functions that only record where they ran and with what."""
    calls = tmp_path / "calls"
    calls.touch()
    script = f"set -e\nCALLS={shlex.quote(str(calls))}\n{STUBS}\n{block}"
    bash = shutil.which("bash")
    assert bash is not None
    result = subprocess.run(
        [bash, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    recorded = []
    for line in calls.read_text().splitlines():
        where, _, args = line.partition("\t")
        recorded.append((Path(where), shlex.split(args)))
    return recorded


def paths_named(args: list[str]) -> list[str]:
    """The files and directories a deploy command reads."""
    named = [value for flag, value in itertools.pairwise(args) if flag in ("-f", "-k")]
    named += [a.split("=", 1)[1] for a in args if "=" in a and a.startswith("policy.content=")]
    if args[:1] == ["install"]:
        named.append(args[2])  # helm install NAME CHART
    if args[:1] == ["build"]:
        named.append(args[-1])  # docker build ... CONTEXT
    return named


def test_the_deploy_blocks_work_from_the_repository_root(tmp_path: Path) -> None:
    blocks = shell_blocks(section("Deploying"))
    assert len(blocks) == 2  # kustomize, and the Helm chart
    tools_run = set()
    for block in blocks:
        for where, args in recorded_calls(block, tmp_path):
            tools_run.add(args[0])
            for name in paths_named(args):
                assert (where / name).exists(), f"{name} does not exist in {where}"
            if args[:2] == ["edit", "set"]:  # kustomize edit: in a kustomization's directory
                assert (where / "kustomization.yaml").exists(), where
            if args[:1] == ["build"]:
                assert (where / args[-1] / "Dockerfile").exists()
            if args[:1] == ["install"]:
                assert (where / args[2] / "Chart.yaml").exists()
    assert {"build", "push", "edit", "apply", "install", "test"} <= tools_run


def test_the_sample_gpu_pod_is_the_one_the_readme_reviews() -> None:
    (block,) = shell_blocks(section("The tenant policy"))
    assert "config/samples/gpu-pod.yaml" in block
    assert (ROOT / "config" / "samples" / "gpu-pod.yaml").is_file()


# ---- paths and links ------------------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_path_outside_the_repository(doc: Path) -> None:
    text = doc.read_text()
    for outside in ("/work/", "../shared", "/tmp/", "/root/"):
        assert outside not in text, f"{doc.name} names {outside}"


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    assert not broken, broken
