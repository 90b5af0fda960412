"""`quotaguard trace from-prometheus` against the real Prometheus binary, on recorded series.

Three hours of kube-state-metrics and DCGM series (a training pod that queued, ran an hour at
half GPU activity and completed; a serving pod running throughout; a pod that never left
Pending; a GPU pod in a namespace no tenant owns; one 8-GPU node) are written as OpenMetrics,
turned into TSDB blocks by the real `promtool tsdb create-blocks-from openmetrics`, and served
by the real Prometheus. The verb's trace is checked field by field and replayed by `simulate`;
a range with no GPU pods is exit 1, a Prometheus that does not answer exit 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from e2e.build import Layout, Toolchain, cache_dir
from e2e.cluster import Cluster, free_port
from e2e.prometheus import Prometheus, prometheus_binary, restart_prometheus

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "config" / "policy.yaml"
STEP = 60
MINUTE = 60


@dataclass
class Recorded:
    prometheus: Prometheus
    start: int  # the first recorded sample (Unix seconds)
    end: int  # the last


def _pod_series(start: int) -> list[str]:
    """OpenMetrics families, one sample a minute for three hours from `start`."""
    minutes = range(0, 181)
    train = {"namespace": "training", "pod": "train-1"}
    serve = {"namespace": "inference", "pod": "serve-1"}
    stuck = {"namespace": "training", "pod": "stuck-1"}
    stray = {"namespace": "scratch", "pod": "stray-1"}

    def line(name: str, labels: dict[str, str], value: float, minute: int) -> str:
        shown = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return f"{name}{{{shown}}} {value} {start + minute * MINUTE}"

    def alive(pod: dict[str, str]) -> range:
        return {"train-1": range(10, 81), "stuck-1": range(100, 181)}.get(pod["pod"], minutes)

    requests, created, phase, completion, util = [], [], [], [], []
    for pod, gpus in ((train, 4), (serve, 1), (stuck, 2), (stray, 1)):
        for minute in alive(pod):
            labels = {**pod, "container": "main", "resource": "nvidia_com_gpu", "unit": "integer"}
            requests.append(line("kube_pod_container_resource_requests", labels, gpus, minute))
            born = {"train-1": 10, "stuck-1": 100}.get(pod["pod"], -60)
            created.append(line("kube_pod_created", pod, start + born * MINUTE, minute))
            running = pod is serve or pod is stray or (pod is train and 20 <= minute < 80)
            phase.append(
                line("kube_pod_status_phase", {**pod, "phase": "Running"}, int(running), minute)
            )
    for minute in range(80, 181):
        completion.append(line("kube_pod_completion_time", train, start + 80 * MINUTE, minute))
    for minute in range(20, 80):
        for gpu in range(4):
            labels = {
                "gpu": str(gpu),
                "exported_namespace": "training",
                "exported_pod": "train-1",
                "namespace": "gpu-operator",
                "pod": "nvidia-dcgm-exporter-x",
            }
            util.append(line("DCGM_FI_DEV_GPU_UTIL", labels, 40 + 20 * (gpu % 2), minute))
    node = {"node": "gpu-1", "resource": "nvidia_com_gpu", "unit": "integer"}
    model = {"node": "gpu-1", "label_nvidia_com_gpu_product": "NVIDIA-H100-80GB-HBM3"}
    allocatable = [line("kube_node_status_allocatable", node, 8, m) for m in minutes]
    labels = [line("kube_node_labels", model, 1, m) for m in minutes]
    families = {
        "kube_pod_container_resource_requests": requests,
        "kube_pod_created": created,
        "kube_pod_status_phase": phase,
        "kube_pod_completion_time": completion,
        "DCGM_FI_DEV_GPU_UTIL": util,
        "kube_node_status_allocatable": allocatable,
        "kube_node_labels": labels,
    }
    text = []
    for name, lines in families.items():
        text.append(f"# TYPE {name} gauge")
        text.extend(sorted(lines, key=lambda item: (item.split(" ")[0], int(item.split()[-1]))))
    return [*text, "# EOF"]


@pytest.fixture(scope="module")
def recorded(toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    work = tmp_path_factory.mktemp("trace-prometheus")
    binary = prometheus_binary()
    promtool = Layout(cache_dir()).binary("promtool")
    # two hours back from a whole hour: within retention, and in blocks of their own
    start = (int(time.time()) // 3600) * 3600 - 5 * 3600
    series = work / "series.om"
    series.write_text("\n".join(_pod_series(start)) + "\n")
    subprocess.run(
        [
            str(promtool),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(series),
            str(work / "data"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (work / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": []}))
    port = free_port()
    argv = [
        str(binary),
        f"--config.file={work / 'prometheus.yml'}",
        f"--storage.tsdb.path={work / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    processes = Cluster(toolchain, workdir=work / "cluster", kwok=False, crds=False)
    processes.logs.mkdir(parents=True, exist_ok=True)
    server = Prometheus(f"http://127.0.0.1:{port}", argv)
    restart_prometheus(processes, server)
    try:
        yield Recorded(server, start, start + 180 * MINUTE)
    finally:
        processes.stop()


def quotaguard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quotaguard", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def from_prometheus(
    recorded: Recorded, out: Path, start: int, end: int
) -> subprocess.CompletedProcess[str]:
    return quotaguard(
        "trace", "from-prometheus", "--url", recorded.prometheus.url,
        "--start", str(start), "--end", str(end), "--step", f"{STEP}s",
        "--policy", str(POLICY), "-o", str(out),
    )  # fmt: skip


def test_the_recorded_history_becomes_a_trace_simulate_replays(
    recorded: Recorded, tmp_path: Path
) -> None:
    out = tmp_path / "trace.yaml"
    done = from_prometheus(recorded, out, recorded.start, recorded.end)
    assert done.returncode == 0, done.stderr
    assert "skipped 1 GPU pods of namespace scratch: no tenant owns it" in done.stderr
    assert "skipped 1 GPU pods never Running in the range" in done.stderr
    trace = yaml.safe_load(out.read_text())
    assert trace["horizon"] == f"{180 * MINUTE}s"
    assert trace["nodes"] == [
        {
            "name": "gpu-1",
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "allocatable": {"nvidia.com/gpu": "8"},
        }
    ]
    by_pod = {item["pod"]["metadata"]["name"]: item for item in trace["workloads"]}
    assert sorted(by_pod) == ["serve-1", "train-1"]
    serve, train = by_pod["serve-1"], by_pod["train-1"]
    # created before the range, running throughout: from 0 to the end, no DCGM series
    assert (serve["at"], serve["duration"], serve["namespace"]) == (0, 180 * MINUTE, "inference")
    assert "uses" not in serve
    # created at minute 10, Running from 20 until its completion at 80, GPUs 40% and 60% busy
    assert (train["at"], train["duration"], train["namespace"]) == (600, 3600, "training")
    assert train["uses"] == 0.5
    limits = train["pod"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "4"}

    replay = quotaguard("simulate", "--policy", str(POLICY), "--trace", str(out), "-o", "json")
    assert replay.returncode == 0, replay.stderr
    report = json.loads(replay.stdout)
    assert report["dynamic"]["workloads"] == 2
    assert report["dynamic"]["gpuHours"] > 0


def test_a_range_without_gpu_pods_is_exit_1_and_says_so(recorded: Recorded, tmp_path: Path) -> None:
    out = tmp_path / "trace.yaml"
    done = from_prometheus(recorded, out, recorded.start - 7200, recorded.start - 3600)
    assert done.returncode == 1, done.stderr
    assert "no pod asking for a GPU resource of the policy" in done.stderr
    assert not out.exists()


def test_a_prometheus_that_does_not_answer_is_exit_2_in_one_line(tmp_path: Path) -> None:
    done = quotaguard(
        "trace", "from-prometheus", "--url", f"http://127.0.0.1:{free_port()}",
        "--start", "1h", "--policy", str(POLICY), "-o", str(tmp_path / "t.yaml"),
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "unreachable" in done.stderr
    assert "Traceback" not in done.stderr
