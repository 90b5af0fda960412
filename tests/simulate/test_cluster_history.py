"""`quotaguard trace from-prometheus` on answers recorded from a real Prometheus (the series of
e2e/test_trace_from_prometheus.py, queried once and kept in tests/fixtures/prometheus_history)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.cli import main
from quotaguard.policy.loader import load_policy_file
from quotaguard.simulate import cluster_history
from quotaguard.simulate.cluster_history import (
    HistoryError,
    Range,
    history_trace,
    read_history,
)
from quotaguard.telemetry.metrics_sources import PrometheusClient
from quotaguard.telemetry.promjson import QueryRefused

ROOT = Path(__file__).resolve().parents[2]
POLICY_PATH = ROOT / "config" / "policy.yaml"
POLICY = load_policy_file(POLICY_PATH)
RECORDED = json.loads((ROOT / "tests/fixtures/prometheus_history/answers.json").read_text())
SPAN = Range(RECORDED["start"], RECORDED["end"], RECORDED["step"])
MINUTE = 60


class Recorded:
    """A Prometheus that answers each query from the recorded answer, cut to the range asked,
    and refuses an answer of more than `max_points` points as Prometheus refuses a large one."""

    name = "http://recorded"

    def __init__(self, max_points: int | None = None) -> None:
        self.max_points = max_points
        self.asked: list[tuple[float, float]] = []

    def query_range(self, expr: str, start: float, end: float, step: float) -> object:
        self.asked.append((start, end))
        answer = RECORDED["answers"][expr]
        result = []
        for series in answer["data"]["result"]:
            values = [p for p in series["values"] if start <= p[0] <= end]
            if values:
                result.append({"metric": series["metric"], "values": values})
        if self.max_points is not None and sum(len(s["values"]) for s in result) > self.max_points:
            raise QueryRefused(f"{self.name}: HTTP 422: too many samples")
        return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def trace_of(source: Recorded, span: Range = SPAN) -> dict[str, Any]:
    document, _ = history_trace(read_history(source, POLICY, span), POLICY, span, source="p")
    return document


def test_each_gpu_pod_that_ran_is_a_workload_with_its_arrival_run_and_activity() -> None:
    document, skipped = history_trace(
        read_history(Recorded(), POLICY, SPAN), POLICY, SPAN, source="p"
    )
    by_pod = {item["pod"]["metadata"]["name"]: item for item in document["workloads"]}
    assert sorted(by_pod) == ["serve-1", "train-1"]
    train, serve = by_pod["train-1"], by_pod["serve-1"]
    assert (train["at"], train["duration"], train["uses"]) == (10 * MINUTE, 60 * MINUTE, 0.5)
    assert train["pod"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert (serve["at"], serve["duration"], "uses" in serve) == (0, 180 * MINUTE, False)
    assert document["nodes"] == [
        {
            "name": "gpu-1",
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "allocatable": {"nvidia.com/gpu": "8"},
        }
    ]
    assert (dict(skipped.no_tenant), skipped.never_ran) == ({"scratch": 1}, 1)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 200), st.sampled_from([None, 40, 400]))
def test_the_trace_is_the_same_however_the_range_is_cut(
    chunk_steps: int, max_points: int | None
) -> None:
    whole = trace_of(Recorded())
    original = cluster_history.CHUNK_STEPS
    cluster_history.CHUNK_STEPS = chunk_steps
    try:
        source = Recorded(max_points)
        assert trace_of(source) == whole
    finally:
        cluster_history.CHUNK_STEPS = original
    covered = sorted(source.asked)
    assert covered[0][0] == SPAN.start and max(end for _, end in covered) == SPAN.end


def test_a_range_refused_even_one_step_at_a_time_is_an_error() -> None:
    with pytest.raises(QueryRefused):
        trace_of(Recorded(max_points=0))


def test_a_range_without_gpu_pods_says_what_was_looked_for() -> None:
    before = Range(SPAN.start - 7200, SPAN.start - 3600, 60)
    with pytest.raises(HistoryError, match="no pod asking for a GPU resource of the policy"):
        trace_of(Recorded(), before)


def test_the_written_trace_is_replayed_by_simulate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = Recorded()
    monkeypatch.setattr(PrometheusClient, "query_range", lambda self, *a: recorded.query_range(*a))
    out = tmp_path / "trace.json"
    argv = ["trace", "from-prometheus", "--url", "http://prometheus:9090", "-p", str(POLICY_PATH)]
    code = main([*argv, "--start", str(SPAN.start), "--end", str(SPAN.end), "-o", str(out)])
    assert code == 0
    assert "2 workloads on 1 nodes" in capsys.readouterr().err
    assert len(json.loads(out.read_text())["workloads"]) == 2
    assert main(["simulate", "-p", str(POLICY_PATH), "--trace", str(out), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["dynamic"]["workloads"] == 2


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--start", "yesterday"], "--start: not a time or a duration: 'yesterday'"),
        (["--start", "2026-12-01T00:00:00"], "give a time zone"),
        (["--start", "100", "--end", "50"], "--start must be before --end"),
        (["--start", "1h", "--step", "0s"], "--step: must be positive"),
        (["--start", "3650d", "--step", "1s"], "more than 10,000,000 steps"),
        (["--start", "1h", "--url", "ftp://x"], "not an http(s) URL"),
        (["--start", "1h", "--url", "http://127.0.0.1:1"], "unreachable"),
    ],
)
def test_bad_flags_and_no_prometheus_are_exit_2_in_one_line(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["trace", "from-prometheus", "--url", "http://127.0.0.1:1", "-p", str(POLICY_PATH)]
    assert main([*argv, *flags]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1


def test_the_trace_verb_without_a_source_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["trace"]) == 2
    assert "from-prometheus" in capsys.readouterr().err


def test_yaml_output_is_what_simulate_reads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = Recorded()
    monkeypatch.setattr(PrometheusClient, "query_range", lambda self, *a: recorded.query_range(*a))
    argv = ["trace", "from-prometheus", "--url", "http://p", "-p", str(POLICY_PATH)]
    assert main([*argv, "--start", "2026-12-04T09:00:00Z", "--end", str(SPAN.end)]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["horizon"] == f"{SPAN.end - 1796374800}s"
