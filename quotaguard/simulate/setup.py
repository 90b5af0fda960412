"""What every arm of a simulation shares: policy, cluster, admitted arrivals, clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.class_capacity import ClassCapacity, class_capacity
from quotaguard.quota.cluster import Node, Pod
from quotaguard.simulate.arrivals import Arrival
from quotaguard.simulate.placement import Cluster, Scoring
from quotaguard.simulate.preemption import PRESETS, SAMPLE_PRESET, Preemption
from quotaguard.simulate.trace import Trace

StaticBaseline = Literal["guarantees", "pool"]


@dataclass(frozen=True)
class Setup:
    """The policy, the cluster, the admitted arrivals and the clock, for every arm."""

    policy: TenantPolicy
    arrivals: tuple[Arrival, ...]
    capacity: Mapping[str, ClassCapacity]
    horizon: float
    interval: float
    static_baseline: StaticBaseline = "guarantees"
    preemption: Preemption = PRESETS[SAMPLE_PRESET]
    nodes: tuple[Node, ...] = ()
    pods: tuple[Pod, ...] = ()
    scoring: Scoring = "LeastAllocated"

    @cached_property
    def units(self) -> dict[str, int]:
        """Class units tenants can be given on the cluster (capacity minus what others hold)."""
        return {name: max(0, c.capacity - c.held_outside) for name, c in self.capacity.items()}

    @cached_property
    def capacity_gpus(self) -> float:
        classes = self.policy.classes_by_name
        return sum(
            c.capacity * float(classes[name].gpu_equivalent)
            for name, c in self.capacity.items()
            if name in classes
        )

    def cluster(self) -> Cluster:
        """A fresh copy of the cluster's nodes, every GPU free (but those held outside)."""
        return Cluster(self.policy, self.nodes, self.pods, scoring=self.scoring)

    @cached_property
    def empty(self) -> Cluster:
        """The cluster with nothing of the tenants on it: what can ever be placed."""
        return self.cluster()

    def queued(self, arrival: Arrival) -> bool:
        """Whether the arrival enters a tenant's queue: allowed, owned, and asking for GPUs."""
        return (
            arrival.tenant is not None and arrival.verdict.allowed and bool(arrival.verdict.request)
        )


def setup(
    policy: TenantPolicy,
    trace: Trace,
    arrivals: Sequence[Arrival],
    *,
    static_baseline: StaticBaseline = "guarantees",
    preemption: Preemption = PRESETS[SAMPLE_PRESET],
    scoring: Scoring = "LeastAllocated",
) -> Setup:
    return Setup(
        policy=policy,
        arrivals=tuple(arrivals),
        capacity=class_capacity(policy, trace.nodes, trace.pods),
        horizon=trace.end,
        interval=policy.spec.rebalance.interval,
        static_baseline=static_baseline,
        preemption=preemption,
        nodes=trace.nodes,
        pods=trace.pods,
        scoring=scoring,
    )
