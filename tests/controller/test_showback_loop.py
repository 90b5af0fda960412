"""The controller counts GPU-hours as it runs: per UTC day in its report, since it started in
its metrics."""

from __future__ import annotations

from quotaguard.controller.quota_controller import Controller

from .fakes import FakeApiServer
from .test_loop import make_controller, run, server, settle, synced_interval  # noqa: F401

MIDNIGHT = 1_764_892_800.0  # 2025-12-05T00:00:00Z


def running_pod(name: str, namespace: str, node: str, gpus: int) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
        "status": {"phase": "Running"},
    }


def test_gpu_hours_are_counted_per_day_and_since_start(server: FakeApiServer) -> None:  # noqa: F811
    server.put("v1/pods", running_pod("train-1", "training", "gpu-1", 6))
    controller: Controller = make_controller(server, mode="recommend")
    # the first look counts nothing; the second the second before it; the third crosses
    # midnight; the fourth comes after an hour stopped, and counts at most two intervals
    times = iter([MIDNIGHT - 2, MIDNIGHT - 1, MIDNIGHT + 1, MIDNIGHT + 3601])
    clock = {"now": MIDNIGHT - 3.0}

    def tick() -> float:
        return clock["now"]

    controller.clock = tick

    async def body(c: Controller) -> list[dict]:
        await synced_interval(c)  # stale ones and the first plan, all before the times
        await settle(server, c)
        reports = []
        for moment in times:
            clock["now"] = moment
            assert await c.run_interval() == "planned"
            reports.append(c.latest_report()["showback"])
        return reports

    reports = run(controller, body)
    last = reports[-1]
    assert last["basis"] == "accumulated"
    by_day = {row["day"]: row for row in last["rows"] if row["tenant"] == "training"}
    # 6 GPUs: 2 s before midnight (1 + the first half of the crossing), then 1 s, then 2 s
    assert by_day["2025-12-04"]["allocatedGpuHours"] == round(6 * 3 / 3600, 4)
    assert by_day["2025-12-05"]["allocatedGpuHours"] == round(6 * 3 / 3600, 4)
    assert by_day["2025-12-05"]["unobservedGpuHours"] == by_day["2025-12-05"]["allocatedGpuHours"]
    assert by_day["2025-12-05"]["model"] == "unknown" and by_day["2025-12-05"]["class"] == "h100"
    since = next(row for row in last["sinceStart"] if row["tenant"] == "training")
    assert since["allocatedGpuHours"] == round(6 * 6 / 3600, 4)
    assert since["cost"] is None  # no prices in the policy
