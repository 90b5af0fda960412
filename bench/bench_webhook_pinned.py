"""The webhook as a deployment runs it: one core per server, wall-clock req/s and p99 over TLS.

    python bench/bench_webhook_pinned.py [--seconds 8] [--rounds 5] [--before main]
        [--workload same|replicas|distinct]

The chart gives the webhook a limit of 1 CPU, so what a user's pod sees is the rate one core
sustains, not the requests per CPU second of an unpinned process. Each server runs pinned to
core 0 (`taskset`): quotaguard of this checkout ("after"), quotaguard of `--before` (a git
revision, exported with `git archive` into a temporary directory; "before") and
bench/bare_webhook.py --parse, an aiohttp server that `json.loads` the body and answers with
the uid (the least any webhook in Python does). The load generator, wrk (1 thread, 16
keep-alive connections, bench/wrk_post.lua), runs pinned to core 1 and POSTs the ~11 KB
AdmissionReview of a realistic GPU Pod (bench/realistic_pod.py) to /mutate, and the mutated Pod
to /validate. Turns are interleaved (bare, after, before, bare, ...) and each figure is the
median of `--rounds` turns, since other work on the machine disturbs single turns.

`--workload`: `same` sends that one body again and again (one uid); `replicas` sends the Pods of
one ReplicaSet, each with its own uid, name and pod uid, as the API server sends them (the
decision cache answers all but the first); `distinct` sends a different Pod every time (wrk
writes the request's number into its uid and template hash), so that every request is decided:
the cache's cost when it cannot help.

Target: after >= 1.0x bare in req/s on both paths, by wall clock and by the server's CPU
microseconds a request (on a busy machine other processes take turns on core 0 and wall-clock
turns swing 3x; CPU per request is the steadier of the two). The latest results go to
bench/results/webhook_pinned.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_webhook_vs_bare import check_answers, free_port, server
from bench.machine import cpu_seconds_of, load_average, machine, write_result
from bench.realistic_pod import POLICY_FILE, distinct_bodies, mutate_and_validate_bodies

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
RATIO_TARGET = 1.0
PATHS = ("mutate", "validate")
SERVER_CORE, CLIENT_CORE = "0", "1"
WORKLOADS = ("same", "replicas", "distinct")
REPLICAS = 64
SEQUENCE = "@SEQ@"  # replaced by wrk with the request's number (bench/wrk_post.lua)


def replica_bodies(count: int) -> tuple[list[bytes], list[bytes]]:
    """The /mutate and /validate bodies of `count` Pods of one ReplicaSet: the same Pod, each
    with the uid, generated name and pod uid the API server gives it."""
    mutate_body, validate_body = mutate_and_validate_bodies()
    bodies: tuple[list[bytes], list[bytes]] = ([], [])
    for index in range(count):
        for body, kept in zip((mutate_body, validate_body), bodies, strict=True):
            review = json.loads(body)
            request = review["request"]
            name = f"embedder-7d4f9c8b5-{index:05x}"
            request["uid"] = f"5b0c{index:04x}-6a1e-4c52-9f0e-{index:012x}"
            request["name"] = name
            request["object"]["metadata"]["name"] = name
            request["object"]["metadata"]["uid"] = f"a7e3{index:04x}-1d2c-4b8e-8f61-{index:012x}"
            kept.append(json.dumps(review).encode())
    return bodies


def _numbered(body: bytes) -> bytes:
    """`body` with wrk's request number in its uid and its Pod's template hash."""
    review = json.loads(body)
    request = review["request"]
    request["uid"] = f"bench-{SEQUENCE}"
    request["object"]["metadata"]["labels"]["pod-template-hash"] = f"h{SEQUENCE}"
    return json.dumps(review).encode()


def workload_bodies(workload: str) -> dict[str, list[bytes]]:
    """{path: bodies} of one workload (one body for `same`)."""
    if workload == "replicas":
        mutates, validates = replica_bodies(REPLICAS)
    elif workload == "distinct":
        mutates, validates = distinct_bodies(1)
        mutates, validates = [_numbered(mutates[0])], [_numbered(validates[0])]
    else:
        mutate_body, validate_body = mutate_and_validate_bodies()
        mutates, validates = [mutate_body], [validate_body]
    return {"mutate": mutates, "validate": validates}


def export_revision(revision: str, directory: Path) -> Path:
    """The tree of `revision` (e.g. `main`) as plain files under `directory`."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision], cwd=ROOT, capture_output=True, check=True
    ).stdout
    target = directory / "before"
    target.mkdir()
    with tempfile.TemporaryFile() as raw:
        raw.write(archive)
        raw.seek(0)
        with tarfile.open(fileobj=raw) as tar:
            tar.extractall(target, filter="data")
    return target


def start(
    stack: contextlib.ExitStack, directory: Path, before: Path | None
) -> tuple[dict[str, tuple[str, int]], Path]:
    """Every server pinned to SERVER_CORE: {name: (base URL, pid)}."""
    subprocess.run(
        [sys.executable, "-m", "quotaguard", "certs", "--out-dir", str(directory / "tls"),
         "--ip-address", "127.0.0.1"],
        check=True, capture_output=True, cwd=ROOT,
    )  # fmt: skip
    cafile = directory / "tls" / "ca.crt"
    tls = ["--tls-cert-file", str(directory / "tls" / "tls.crt")]
    tls += ["--tls-key-file", str(directory / "tls" / "tls.key")]
    pin = ["taskset", "-c", SERVER_CORE, sys.executable]

    def quotaguard(port: int) -> list[str]:
        return [
            *pin, "-m", "quotaguard", "serve", "--policy", str(POLICY_FILE),
            "--components", "webhook", "--bind-address", "127.0.0.1",
            "--webhook-port", str(port), "--http-port", str(free_port()), *tls,
            "--reports-auth", "none", "--log-level", "warning",
        ]  # fmt: skip

    ports = {name: free_port() for name in ("bare+json", "after", "before")}
    argvs = {
        "bare+json": [*pin, str(BENCH / "bare_webhook.py"), *tls, "--parse"],
        "after": quotaguard(ports["after"]),
    }
    argvs["bare+json"] += ["--port", str(ports["bare+json"])]
    roots = dict.fromkeys(argvs, ROOT)
    if before is not None:
        argvs["before"], roots["before"] = quotaguard(ports["before"]), before
    servers = {}
    for name, argv in argvs.items():
        log = directory / f"{name}.log"
        pid = stack.enter_context(server(argv, ports[name], cafile, log, roots[name]))
        servers[name] = (f"https://127.0.0.1:{ports[name]}", pid)
    return servers, cafile


def turn(url: str, body_file: Path, seconds: float, pid: int, *, mode: str) -> dict[str, Any]:
    """One closed-loop wrk turn from CLIENT_CORE; the server's CPU time is read around it (CPU
    microseconds a request, which other work on the machine inflates less than wall time)."""
    cpu_before = cpu_seconds_of(pid)
    output = subprocess.run(
        ["taskset", "-c", CLIENT_CORE, "wrk", "-t1", "-c16", f"-d{seconds:g}s",
         "-s", str(BENCH / "wrk_post.lua"), url],
        env={
            **os.environ,
            "BODY_FILE": str(body_file),
            "BODY_LINES": "1" if mode == "replicas" else "",
            "BODY_SEQ": "1" if mode == "distinct" else "",
        },
        capture_output=True, text=True, check=True, timeout=seconds + 60,
    ).stdout  # fmt: skip
    line = next(line for line in output.splitlines() if line.startswith("WRK_JSON "))
    raw = json.loads(line.removeprefix("WRK_JSON "))
    cpu = cpu_seconds_of(pid) - cpu_before
    return {
        "rate": raw["requests"] / (raw["duration_us"] / 1e6),
        "cpu_us": cpu / raw["requests"] * 1e6 if raw["requests"] else 0.0,
        "p99_ms": raw["p99_us"] / 1e3,
        "p50_ms": raw["p50_us"] / 1e3,
        "errors": raw["non_2xx"] + raw["socket_errors"],
        "load_average": load_average()[0],
    }


def summarize(turns: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Medians per path and server, and the ratios to bare+json."""
    summary: dict[str, Any] = {}
    for path, by_server in turns.items():
        rows: dict[str, Any] = {}
        for name, runs in by_server.items():
            rows[name] = {
                key: statistics.median(run[key] for run in runs)
                for key in ("rate", "p50_ms", "p99_ms", "cpu_us")
            }
        bare, bare_cpu = rows["bare+json"]["rate"], rows["bare+json"]["cpu_us"]
        for name in rows:
            rows[name]["ratio_to_bare+json"] = rows[name]["rate"] / bare
            # Requests one core serves in a CPU second, relative: what wall time would show on
            # a quiet machine, where the core is the server's alone.
            rows[name]["cpu_ratio_to_bare+json"] = bare_cpu / rows[name]["cpu_us"]
        summary[path] = {"median": rows, "turns": by_server}
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="per turn")
    parser.add_argument("--rounds", type=int, default=5, help="turns per path and server")
    parser.add_argument("--before", help="a git revision to run as 'before' (e.g. main)")
    parser.add_argument("--workload", choices=WORKLOADS, default="same")
    args = parser.parse_args()
    sent = workload_bodies(args.workload)

    with (
        tempfile.TemporaryDirectory(prefix="bench-pinned-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        directory = Path(tmp)
        before = export_revision(args.before, directory) if args.before else None
        bodies = {"mutate": directory / "mutate.json", "validate": directory / "validate.json"}
        first = {"mutate": directory / "mutate-1.json", "validate": directory / "validate-1.json"}
        for path in PATHS:
            bodies[path].write_bytes(b"\n".join(sent[path]) + b"\n")
            first[path].write_bytes(sent[path][0].replace(SEQUENCE.encode(), b"0"))
        servers, cafile = start(stack, directory, before)
        for name in servers:
            if name != "bare+json":
                check_answers(servers[name][0], first, cafile)
        turns: dict[str, dict[str, list[dict[str, Any]]]] = {
            path: {name: [] for name in servers} for path in PATHS
        }
        for _ in range(args.rounds):
            for path in PATHS:
                for name, (base, pid) in servers.items():
                    url = f"{base}/{path}"
                    result = turn(url, bodies[path], args.seconds, pid, mode=args.workload)
                    turns[path][name].append(result)
                    print(
                        f"  /{path:8s} {name:10s} {result['rate']:7,.0f} req/s "
                        f"p99 {result['p99_ms']:5.2f} ms  {result['cpu_us']:4.0f} CPU us/req  "
                        f"load {result['load_average']:.1f}",
                        flush=True,
                    )
    summary = summarize(turns)
    errors = [
        f"/{path} {name}"
        for path in PATHS
        for name, runs in turns[path].items()
        if any(run["errors"] for run in runs)
    ]
    ok = not errors
    where = f"servers on core {SERVER_CORE}, wrk on {CLIENT_CORE}"
    print(f"\n{args.workload}: medians of {args.rounds} turns, {where}")
    for path in PATHS:
        for name, row in summary[path]["median"].items():
            print(
                f"  /{path:8s} {name:10s} {row['rate']:7,.0f} req/s  p50 {row['p50_ms']:5.2f} ms"
                f"  p99 {row['p99_ms']:5.2f} ms  {row['cpu_us']:4.0f} CPU us/req"
                f"  {row['ratio_to_bare+json']:.2f}x bare+json wall,"
                f" {row['cpu_ratio_to_bare+json']:.2f}x by CPU"
            )
        after = summary[path]["median"]["after"]
        ok &= min(after["ratio_to_bare+json"], after["cpu_ratio_to_bare+json"]) >= RATIO_TARGET
    for line in errors:
        print(f"  NOT 200: {line}")
    verdict = "ok" if ok else "MISSED"
    print(f"target: after >= {RATIO_TARGET:.1f}x bare+json, wall and by CPU: {verdict}")
    summary["seconds_per_turn"] = args.seconds
    summary["before"] = args.before
    summary["body_bytes"] = {path: len(sent[path][0]) for path in PATHS}
    summary["workload"] = args.workload
    summary["target_met"] = ok
    name = "webhook_pinned" if args.workload == "same" else f"webhook_pinned_{args.workload}"
    path = write_result(name, summary)
    print(f"wrote {path.relative_to(ROOT)}; machine {machine()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
