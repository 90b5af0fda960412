"""The results table of bench/README.md, from the latest bench/results/*.json.

    python bench/summarize.py

Each row: quotaguard's number, the baseline measured in the same run, their ratio, the
target, and the machine's 1-minute load average when that number was taken.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
Row = tuple[str, str, str, str, str, str, str]


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def webhook_rows(result: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    rate = 200
    for path in ("mutate", "validate"):
        best = result[path]["best"]
        turns = result[path]["throughput_turns"]["quotaguard"]
        load = max(turns, key=lambda t: t["per_cpu_second"])["load_average"]
        cpu, wall = best["per_cpu_second"], best["rate"]
        rows.append(
            (
                f"webhook `/{path}` over TLS, 11 KB Pod",
                "throughput, requests per server CPU-second",
                n(cpu["quotaguard"]),
                f"bare aiohttp {n(cpu['bare'])}; bare + json.loads {n(cpu['bare+json'])}",
                f"{cpu['ratio_to_bare']:.2f}; {cpu['ratio_to_bare+json']:.2f}",
                ">= 1.0 of bare + json.loads"
                + ("" if cpu["ratio_to_bare+json"] >= 1.0 else " (missed)"),
                f"{load:.1f}",
            )
        )
        rows.append(
            (
                f"webhook `/{path}`",
                "throughput, requests/s (wall, wrk 16 connections)",
                n(wall["quotaguard"]),
                f"bare {n(wall['bare'])}; bare + json.loads {n(wall['bare+json'])}",
                f"{wall['ratio_to_bare']:.2f}; {wall['ratio_to_bare+json']:.2f}",
                "",
                f"{load:.1f}",
            )
        )
        distinct = best.get("distinct_per_cpu_second")
        if distinct:
            rows.append(
                (
                    f"webhook `/{path}`",
                    "throughput, requests per server CPU-second, "
                    f"{result[path]['distinct_bodies']} different Pods in turn",
                    n(distinct["quotaguard"]),
                    f"bare {n(distinct['bare'])}; bare + json.loads {n(distinct['bare+json'])}",
                    f"{distinct['ratio_to_bare']:.2f}; {distinct['ratio_to_bare+json']:.2f}",
                    ">= 1.0 of bare + json.loads"
                    + ("" if distinct["ratio_to_bare+json"] >= 1.0 else " (missed)"),
                    f"{load:.1f}",
                )
            )
        latency = result[path]["latency"]
        ours, bare = latency["quotaguard"], latency["bare"]
        rows.append(
            (
                f"webhook `/{path}`",
                f"latency p50 / p99 at {rate} requests/s, open loop",
                f"{ours['p50_ms']:.1f} / {ours['p99_ms']:.1f} ms",
                f"bare {bare['p50_ms']:.1f} / {bare['p99_ms']:.1f} ms",
                f"{ours['p50_ms'] / bare['p50_ms']:.2f} / {ours['p99_ms'] / bare['p99_ms']:.2f}",
                "p99 <= 10 ms",
                f"{ours['load_average']:.1f}",
            )
        )
    return rows


def admission_rows(result: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    loads = result["json_loads_per_second"]
    load = result["machine"]["load_average"][0]
    for name, case in result["cases"].items():
        if name.startswith("offline"):
            continue
        body = "11 KB" if "11 KB" in name else "fixture"
        decoding = name.startswith("decode only")
        rows.append(
            (
                "admission core, one core",
                ("reviews decoded/s, " if decoding else "decisions/s, ")
                + name
                + ("" if body == "11 KB" else ", fixture pod"),
                n(case["per_second"]),
                f"json.loads of the same review {n(loads[body])}/s",
                f"{case['ratio_to_json_loads']:.2f}",
                "" if decoding else f">= {n(result['target_per_second'])}/s",
                f"{load:.1f}",
            )
        )
    return rows


def planner_rows(result: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    at_target = result.get("at_target")
    if at_target:
        point = next(p for p in result["curve"] if p["tenants"] == 1_000)
        rows.append(
            (
                "planner, 1,000 tenants x 12 classes",
                "plan with current quotas: CPU ms / wall ms (best of N)",
                f"{at_target['cpu_ms']:.0f} / {at_target['wall_ms']:.0f}",
                f"naive progressive filling {point['naive_ms']:.0f} wall ms",
                f"{point['naive_ms'] / at_target['wall_ms']:.1f}x faster",
                f"< {result['target_ms']:.0f} ms",
                f"{point['load_average']:.1f}",
            )
        )
    for point in result["curve"]:
        if point["tenants"] < 3_000:
            continue
        rows.append(
            (
                f"planner, {n(point['tenants'])} tenants x 12 classes",
                "plan with current quotas (without), wall ms, best of N",
                f"{point['plan_with_current_ms']:.0f} ({point['plan_ms']:.0f})",
                f"naive progressive filling {point['naive_ms']:.0f}",
                f"{point['naive_over_plan']:.1f}x faster",
                "the curve",
                f"{point['load_average']:.1f}",
            )
        )
    return rows


def controller_e2e_rows(result: dict[str, Any]) -> list[Row]:
    ours = result["quotaguard"]
    theirs = {run["mode"]: run for run in result["runs"]}
    client = theirs.get("client")
    gpu_only = theirs.get("client-gpu-only")
    rows: list[Row] = []
    wall = ours["list_wall_s"] + ours["plan_wall_s"]
    cpu = ours["list_cpu_s"] + ours["plan_cpu_s"]
    pods = n(result["pods"])
    if client and gpu_only:
        rows.append(
            (
                f"controller, initial list of {pods} pods from kube-apiserver",
                "list + trim + plan: wall s / CPU s of the reader (faster of 2 runs)",
                f"{wall:.1f} / {cpu:.1f}",
                f"client models {client['list_wall_s']:.1f} / {client['list_cpu_s']:.1f} "
                f"(GPU pods only: {gpu_only['list_wall_s']:.1f} / {gpu_only['list_cpu_s']:.1f})",
                f"{client['list_cpu_s'] / ours['list_cpu_s']:.1f}x less CPU",
                "< 30 s",
                f"{ours['load_average']:.1f}",
            )
        )
        rows.append(
            (
                f"controller, {pods} pods",
                "peak RSS of the reader process, MB",
                n(ours["max_rss_mb"]),
                f"client models {n(client['max_rss_mb'])} "
                f"(GPU pods only: {n(gpu_only['max_rss_mb'])})",
                f"{client['max_rss_mb'] / ours['max_rss_mb']:.0f}x less",
                "< 500 MB",
                f"{ours['load_average']:.1f}",
            )
        )
    if "kube-apiserver_cpu_s" in ours:
        rows.append(
            (
                f"controller, {pods} pods",
                "kube-apiserver CPU s while it served that list",
                f"{ours['kube-apiserver_cpu_s']:.1f}",
                f"while serving the client: {client['kube-apiserver_cpu_s']:.1f}" if client else "",
                "",
                "",
                f"{ours['load_average']:.1f}",
            )
        )
    return rows


def controller_rows(result: dict[str, Any]) -> list[Row]:
    page = result["page_of_500"]
    load = result["machine"]["load_average"][0]
    return [
        (
            f"controller, {n(result['pods'])} pods from memory (no API server)",
            "initial list, CPU s / one interval's pure part, CPU s",
            f"{result['list_cpu_s']:.2f} / {result['plan_cpu_s']:.2f}",
            f"one 500-pod page: client models {page['client_models_ms']:.0f} ms, "
            f"json.loads + trim {page['json_loads_and_trim_ms']:.0f} ms",
            f"{page['ratio']:.0f}x",
            f"< {result['list_target_s']:.0f} s / < {result['plan_target_s']:.0f} s",
            f"{load:.1f}",
        )
    ]


def simulate_rows(result: dict[str, Any]) -> list[Row]:
    load = result["machine"]["load_average"][0]
    return [
        (
            f"simulate, {n(result['workloads'])} workloads, both arms",
            "simulate(), CPU s",
            f"{result['simulate_cpu_s']:.2f}",
            f"the admission pass alone {result['admission_cpu_s']:.2f}",
            f"{result['simulate_cpu_s'] / result['admission_cpu_s']:.0f}x",
            f"<= {result['target_cpu_s']:.0f} s",
            f"{load:.1f}",
        )
    ]


SECTIONS = (
    ("webhook", webhook_rows),
    ("admission", admission_rows),
    ("planner", planner_rows),
    ("controller_e2e", controller_e2e_rows),
    ("controller", controller_rows),
    ("simulate", simulate_rows),
)


def main() -> int:
    header = ("what", "measure", "quotaguard", "baseline, same run", "ratio", "target", "load")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    dates = []
    for name, rows_of in SECTIONS:
        result = load(name)
        if result is None:
            continue
        dates.append(f"{name} {result['machine']['date']}")
        for row in rows_of(result):
            print("| " + " | ".join(row) + " |")
    print("\nTaken: " + "; ".join(dates) + ".")
    return 0


if __name__ == "__main__":
    sys.exit(main())
