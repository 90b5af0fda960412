"""What an interval's queue writes cost in requests, and that sending them concurrently keeps
the cuts-before-raises order (requests counted against the fake API server)."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from quotaguard.controller.backoff import Backoff
from quotaguard.controller.queue_fanout import WRITES_IN_FLIGHT
from quotaguard.controller.quota_controller import Controller, ControllerSettings
from quotaguard.controller.watch import WatchSettings
from quotaguard.policy.loader import load_policy_text

from .fakes import FakeApiServer, FakeResponse, fake_clients
from .test_loop import (
    CQ,
    cluster_queue,
    gpu_quotas,
    make_controller,
    node,
    pending_pod,
    run,
    settle,
    synced_interval,
)

MIG = "nvidia.com/mig-1g.10gb"
CUTS = 12  # more than WRITES_IN_FLIGHT: the pool must queue some of them
CAPACITY = 2 * CUTS + 24
MANY_TENANTS_POLICY = f"""
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {{name: many}}
spec:
  cohort: pool
  gpuClasses:
    - {{name: mig, resource: {MIG}, memory: 10Gi, slices: 1}}
  tenants:
    - {{name: big, namespaces: [big], allowedClasses: [mig], quota: {{mig: {{max: {CAPACITY}}}}}}}
"""
for _index in range(CUTS):
    MANY_TENANTS_POLICY += (
        f"    - {{name: c{_index:02d}, namespaces: [c{_index:02d}], allowedClasses: [mig],"
        " quota: {mig: {max: 8}}}\n"
    )
MANY_TENANTS_POLICY += "  rebalance: {mode: apply, interval: 1s, maxStepPercent: 100}\n"


def many_tenants() -> tuple[FakeApiServer, Controller]:
    """`big` holds 24 and wants everything; twelve others hold 2 each and want nothing: one
    interval cuts twelve queues to 0 and raises big's to the whole capacity."""
    server = FakeApiServer()
    server.groups = {"kueue.x-k8s.io": ["v1beta2"]}
    server.put("v1/nodes", node("mig-1", MIG, CAPACITY))
    server.put(CQ, cluster_queue("big", MIG, "mig", 24))
    for index in range(CUTS):
        server.put(CQ, cluster_queue(f"c{index:02d}", MIG, "mig", 2))
    pod = pending_pod("want-all", "big", 0)
    pod["spec"] = {"containers": [{"name": "main", "resources": {"limits": {MIG: "48"}}}]}
    server.put("v1/pods", pod)
    settings = ControllerSettings(
        leader_election=False,
        watch_settings=lambda: WatchSettings(backoff=Backoff(base=0.001, cap=0.005)),
    )
    ticks = itertools.count(1_000_000, 1)
    the_policy = load_policy_text(MANY_TENANTS_POLICY, "many.yaml")
    return server, Controller(the_policy, fake_clients(server), settings, clock=lambda: next(ticks))


class SlowApplies:
    """Wraps the fake server's apply: each takes 30 ms; records when each started and ended
    and how many were in flight at once."""

    def __init__(self, server: FakeApiServer) -> None:
        self.inner = server.custom_apply
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.spans: list[tuple[str, float, float]] = []
        server.custom_apply = self  # type: ignore[method-assign]

    def __call__(self, path: str, name: str, body: Any, kwargs: dict[str, Any]) -> FakeResponse:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        started = time.monotonic()
        try:
            time.sleep(0.03)
            return self.inner(path, name, body, kwargs)
        finally:
            with self.lock:
                self.in_flight -= 1
                self.spans.append((name, started, time.monotonic()))


def test_writes_go_out_concurrently_and_every_cut_lands_before_the_raise() -> None:
    server, controller = many_tenants()
    applies = SlowApplies(server)

    async def body(c: Controller) -> None:
        assert await synced_interval(c) == "planned"

    run(controller, body)
    assert 1 < applies.most <= WRITES_IN_FLIGHT
    cuts = [span for span in applies.spans if span[0] != "big"]
    (raise_,) = [span for span in applies.spans if span[0] == "big"]
    assert len(cuts) == CUTS
    assert raise_[1] >= max(end for _, _, end in cuts)  # started after the last cut ended
    held: dict[str, int] = {}
    for _, _, obj in server.log[CQ]:
        held[obj["metadata"]["name"]] = int(gpu_quotas(obj)[("mig", MIG)]["nominalQuota"])
        assert sum(held.values()) <= CAPACITY, held
    assert held["big"] == CAPACITY and sum(held.values()) == CAPACITY


def test_a_cut_that_fails_holds_the_raise_back_with_writes_in_flight() -> None:
    server, controller = many_tenants()
    failing = server.custom_apply

    def apply(path: str, name: str, body: Any, kwargs: dict[str, Any]) -> FakeResponse:
        if name == "c05":
            raise ConnectionResetError("connection reset")
        return failing(path, name, body, kwargs)

    server.custom_apply = apply  # type: ignore[method-assign]

    async def body(c: Controller) -> None:
        assert await synced_interval(c) == "planned"

    run(controller, body)
    written = {call[2]["body"]["metadata"]["name"] for call in server.writes("apply")}
    # every other cut landed (c05's never reached the server), the raise was not sent
    assert written == {f"c{index:02d}" for index in range(CUTS)} - {"c05"}
    results = {o.queue: o.result for o in controller.status.last_outcomes}
    assert results["c05"] == "error"
    big = server.get(CQ, "big")
    assert big is not None and gpu_quotas(big)[("mig", MIG)]["nominalQuota"] == "24"


def test_an_interval_writes_from_the_cache_one_request_per_queue_and_event_per_change() -> None:
    server, controller = many_tenants()

    async def body(c: Controller) -> None:
        assert await synced_interval(c) == "planned"

    run(controller, body)
    verbs = [call[0] for call in server.calls if call[0] in ("get", "apply", "create")]
    assert verbs == ["apply"] * (CUTS + 1)  # no read before any write
    assert sorted(e["involvedObject"]["name"] for e in server.events) == sorted(
        ["big", *(f"c{index:02d}" for index in range(CUTS))]
    )


def test_a_write_that_only_moves_the_weight_has_no_event_of_its_own() -> None:
    server = FakeApiServer()
    server.groups = {"kueue.x-k8s.io": ["v1beta2"]}
    for index in (1, 2):
        server.put("v1/nodes", node(f"gpu-{index}", "nvidia.com/gpu", 8, {"product": "h100"}))
    server.put("v1/nodes", node("mig-1", MIG, 14))
    server.put("v1/nodes", node("shared-1", "nvidia.com/gpu.shared", 8))
    server.put(CQ, cluster_queue("training", "nvidia.com/gpu", "h100", 8))
    server.put(CQ, cluster_queue("inference", MIG, "mig", 7))
    server.put(CQ, cluster_queue("notebooks", "nvidia.com/gpu.shared", "shared", 4))
    controller = make_controller(server)

    async def body(c: Controller) -> None:
        assert await synced_interval(c) == "planned"
        await settle(server, c)
        await c.run_interval()
        events = len(server.events)
        applies = len(server.writes("apply"))
        moved = server.get(CQ, "training")
        assert moved is not None
        moved["spec"]["fairSharing"] = {"weight": "9"}  # someone moved the weight by hand
        server.put(CQ, moved)
        await settle(server, c)
        await c.run_interval()
        assert [x[2]["body"]["metadata"]["name"] for x in server.writes("apply")[applies:]] == [
            "training"
        ]
        assert len(server.events) == events

    run(controller, body)
    training = server.get(CQ, "training")
    assert training is not None and training["spec"]["fairSharing"]["weight"] != "9"
