"""`quotaguard simulate` as a user runs it: the README's first command, JSON, HTML, bad input."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

from quotaguard.cli import main
from quotaguard.simulate.preemption import PRESETS, SAMPLE_PRESET, Preemption

ROOT = Path(__file__).parents[2]
POLICY = str(ROOT / "config" / "policy.yaml")
DAY = str(ROOT / "config" / "traces" / "day.yaml")


@pytest.fixture(scope="module")
def day_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The sample trace once, as text with an HTML report (the README's first command)."""
    html = tmp_path_factory.mktemp("report") / "simulation.html"
    out = io.StringIO()  # capsys is function-scoped; this fixture is module-scoped
    with contextlib.redirect_stdout(out):
        code = main(["simulate", "--policy", POLICY, "--trace", DAY, "--html", str(html)])
    assert code == 0
    return out.getvalue(), html


def test_the_sample_trace_prints_every_arm_side_by_side_and_a_verdict(day_run):
    text, _ = day_run
    assert re.search(r"^\s+none\s+static\s+pool\s+dynamic\s+geometry\s+bound$", text, re.MULTILINE)
    for label in ("GPU utilisation", "useful utilisation", "mean wait", "p95 wait", "denied"):
        assert any(line.startswith(label) for line in text.splitlines()), label
    for tenant in ("inference", "training", "notebooks"):
        assert re.search(rf"^{tenant}\s+utilisation(\s+\S+%){{5}}$", text, re.MULTILINE), tenant
    assert text.startswith("With quotaguard (pool = dynamic = geometry) GPU utilisation is")
    said = " ".join(text.split("\n\n")[-2].split())
    assert said.startswith("Findings: - Against no quotaguard")
    # the sample ClusterQueues reclaim: preemption is told for every arm
    assert any(line.startswith("preempted") for line in text.splitlines())
    assert "in the none arm" in said and "in the dynamic arm" in said


def test_the_sample_day_shows_what_its_workloads_keep_busy(day_run):
    # day.yaml says `uses` for every workload: notebooks holding a whole GPU (no quotaguard)
    # keep a twelfth of it busy; on a quarter of a shared GPU the same work wastes less
    text, _ = day_run
    rows = {
        found[0]: found[1].split()
        for found in (re.split(r"\s{2,}", line, maxsplit=1) for line in text.splitlines())
        if len(found) == 2
    }
    allocated = [float(cell.rstrip("%")) for cell in rows["GPU utilisation"]]
    useful = [float(cell.rstrip("%")) for cell in rows["useful utilisation"]]
    assert all(u < a for u, a in zip(useful[:-1], allocated[:-1], strict=True))
    held = [float(cell.replace(",", "")) for cell in rows["held but idle"]]
    assert all(hours > 0 for hours in held)


def test_the_html_report_is_self_contained_with_charts(day_run):
    _, html = day_run
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg") >= 5
    for arm in ("none", "static", "pool", "dynamic", "bound"):
        assert f"<th>{arm}</th>" in page
    assert "Where the idle GPU-hours went" in page
    assert "<script" not in page
    assert not re.search(r"""(src|href)\s*=""", page)
    for svg in re.findall(r"<svg.*?</svg>", page, re.DOTALL):
        ElementTree.fromstring(svg)  # well-formed: every string escaped


def test_json_output_has_both_arms(capsys):
    trace = ROOT / "tests" / "simulate" / "small.yaml"
    assert main(["simulate", "--policy", POLICY, "--trace", str(trace), "--output", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {"static", "dynamic"} <= set(document)
    assert document["static"]["denied"] == document["dynamic"]["denied"] == 1
    for arm in ("static", "dynamic"):
        assert isinstance(document[arm]["preempted"], int)
        assert isinstance(document[arm]["gpuHoursLost"], float | int)


def sample_cluster_queue_preemption() -> list[Preemption]:
    """spec.preemption of every ClusterQueue in the Kueue samples, as the model reads it."""
    path = ROOT / "config" / "samples" / "kueue" / "clusterqueues.yaml"
    found = []
    for document in yaml.safe_load_all(path.read_text()):
        if document and document.get("kind") == "ClusterQueue":
            spec = document["spec"].get("preemption", {})
            borrow = spec.get("borrowWithinCohort", {})
            found.append(
                Preemption(
                    reclaim_within_cohort=spec.get("reclaimWithinCohort", "Never"),
                    within_cluster_queue=spec.get("withinClusterQueue", "Never"),
                    borrow_within_cohort=borrow.get("policy", "Never"),
                    max_priority_threshold=borrow.get("maxPriorityThreshold"),
                )
            )
    return found


def test_by_default_every_arm_preempts_as_the_sample_cluster_queues_declare(capsys):
    declared = sample_cluster_queue_preemption()
    assert declared and all(found == PRESETS[SAMPLE_PRESET] for found in declared)
    trace = str(ROOT / "tests" / "simulate" / "small.yaml")
    assert main(["simulate", "--policy", POLICY, "--trace", trace, "--output", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["preemption"] == {
        "setting": SAMPLE_PRESET,
        "reclaimWithinCohort": declared[0].reclaim_within_cohort,
        "withinClusterQueue": declared[0].within_cluster_queue,
        "borrowWithinCohort": declared[0].borrow_within_cohort,
    }


def test_the_header_says_which_preemption_every_arm_ran_with(capsys):
    trace = str(ROOT / "tests" / "simulate" / "small.yaml")
    assert main(["simulate", "--policy", POLICY, "--trace", trace, "--preemption", "never"]) == 0
    header = capsys.readouterr().out.split("\n\n")[1]  # after the lead sentence
    assert "preemption, in every arm: never" in header
    assert "the sample ClusterQueues declare reclaimWithinCohort Any" in header


def test_a_bad_trace_exits_2_with_located_errors(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "nodes: [{name: n, allocatable: {nvidia.com/gpu: '8'}}]\n"
        "workloads:\n"
        "  - {at: 0, duration: -5, namespace: training, pod: {spec: {}}}\n"
    )
    assert main(["simulate", "--policy", POLICY, "--trace", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"{bad}:3:23: workloads[0].duration: must be positive\n"


def test_a_missing_trace_exits_2_naming_it(tmp_path, capsys):
    missing = tmp_path / "nope.yaml"
    assert main(["simulate", "--policy", POLICY, "--trace", str(missing)]) == 2
    assert capsys.readouterr().err.startswith(f"{missing}: cannot read")


def test_an_invalid_policy_exits_1(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text("apiVersion: quotaguard.dev/v1alpha1\nkind: TenantPolicy\n")
    assert main(["simulate", "--policy", str(policy), "--trace", DAY]) == 1
    assert str(policy) in capsys.readouterr().err


def test_the_progress_bar_draws_one_line_and_clears_it():
    from quotaguard.commands.simulate import ProgressBar
    from quotaguard.simulate.arms import ARMS

    stream = io.StringIO()
    bar = ProgressBar(stream)
    last = list(ARMS)[-1]
    bar("static", 0.5)  # the second arm, half done
    bar(last, 1.0)  # the last one, done
    bar.close()
    frames = stream.getvalue().split("\r")[1:]
    assert f"{100 * 1.5 / len(ARMS):3.0f}%" in frames[0] and "static" in frames[0]
    assert "100%" in frames[1] and last in frames[1]
    assert frames[-1] == "" and frames[-2].strip() == ""
    assert "\n" not in stream.getvalue()
