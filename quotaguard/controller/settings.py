"""How a controller is set up (`ControllerSettings`), what it did so far (`ControllerStatus`)
and where it reads its policy from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from quotaguard.controller.kube_clients import ServedGroups
from quotaguard.controller.node_layout_writes import NodeWrite
from quotaguard.controller.queue_writer import WriteOutcome
from quotaguard.controller.watch import WatchSettings
from quotaguard.geometry import operatorconfigs
from quotaguard.planning.cycle import WEIGHT_HOLD_FRACTION, CycleReport
from quotaguard.policy.kueue_dra import DEFAULT_KUEUE_NAMESPACE
from quotaguard.policy.model import Mode, TenantPolicy

PolicySource = Callable[[], TenantPolicy]


@dataclass
class ControllerSettings:
    mode: Mode | None = None  # overrides the policy's rebalance.mode
    interval: float | None = None  # overrides the policy's rebalance.interval (seconds)
    leader_election: bool = True
    lease_namespace: str | None = None  # default: the pod's namespace
    identity: str | None = None  # default: hostname + random suffix
    # a weight's moves up to this fraction are held: plan and queue keep the one it last moved to
    weight_tolerance: float = WEIGHT_HOLD_FRACTION
    # A write starts only while the Lease is ours for at least this long, and gives up after
    # it: so it cannot land after another replica could have taken over. It must stay below
    # the elector's renew_deadline - renew_period (5 s), or no write could ever start.
    write_timeout: float = 4.0
    watch_settings: Callable[[], WatchSettings] = WatchSettings
    # GPU telemetry (dcgm-exporter's series) from this Prometheus server; None: none
    prometheus_url: str | None = None
    prometheus_timeout: float = 10.0
    # where the GPU operator keeps default-mig-parted-config (configs the policy names only)
    gpu_operator_namespace: str = operatorconfigs.DEFAULT_NAMESPACE
    # where Kueue keeps its Configuration (kueue-manager-config: its deviceClassMappings)
    kueue_namespace: str = DEFAULT_KUEUE_NAMESPACE


@dataclass
class ControllerStatus:
    """What the controller did so far: read by reports, tests and the e2e suite (written by
    the controller's coroutine only)."""

    mode: str = "recommend"
    intervals: int = 0
    planned: int = 0
    stale: int = 0
    stale_reason: str | None = None
    errors: int = 0
    last_error: str | None = None
    writes: dict[str, int] = field(default_factory=dict)
    last_outcomes: tuple[WriteOutcome, ...] = ()
    last_report: CycleReport | None = None
    last_planned_at: float | None = None
    served: ServedGroups | None = None
    node_writes: tuple[NodeWrite, ...] = ()  # the last interval's layout patches

    @property
    def written(self) -> int:
        return self.writes.get("updated", 0) + self.writes.get("created", 0)

    def planned_interval(
        self, report: CycleReport, outcomes: tuple[WriteOutcome, ...], now: float
    ) -> None:
        for outcome in outcomes:
            self.writes[outcome.result] = self.writes.get(outcome.result, 0) + 1
        self.planned += 1
        self.last_outcomes = outcomes
        self.last_report = report
        self.last_planned_at = now


def policy_source(policy: Any) -> PolicySource:
    """A TenantPolicy, anything with a `.policy` (the PolicyStore), or a callable."""
    if isinstance(policy, TenantPolicy):
        return lambda: policy
    if hasattr(policy, "policy"):
        return lambda: policy.policy
    if callable(policy):
        source: PolicySource = policy
        return source
    raise TypeError(f"not a policy source: {policy!r}")
