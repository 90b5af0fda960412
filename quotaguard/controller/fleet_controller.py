"""The fleet controller: every `rebalance.interval`, read the manager and each worker, plan the
fleet (`planning.fleet_plan`), and with `spec.fleet.mode: apply` write each worker's and the
manager's ClusterQueues.

One cycle is blocking (the kubernetes client) and runs in a thread; it never raises for a
cluster that cannot be read: a worker is then unreachable (it keeps the quotas it was last
seen or planned with, and its capacity leaves the fleet), the manager skips the cycle. Only the
holder of the `quotaguard-fleet` Lease writes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from quotaguard.controller.fleet_reads import (
    Reader,
    WorkerUnreadable,
    connect,
    discover_kueue,
    kubeconfig_of,
    read_cluster,
    worker_sources,
)
from quotaguard.controller.fleet_writes import FleetWrite, write_quotas
from quotaguard.controller.kube_clients import KubeClients
from quotaguard.metrics.fleet_metrics import FLEET_CYCLES, record_fleet, record_write
from quotaguard.planning.fleet_plan import FleetReport, WorkerRead, plan_fleet
from quotaguard.policy.fleet import Fleet, KubeConfigSource
from quotaguard.policy.model import TenantPolicy

log = logging.getLogger("quotaguard.fleet")
FLEET_LEASE = "quotaguard-fleet"


@dataclass
class FleetController:
    manager: KubeClients
    policy: Callable[[], TenantPolicy]
    may_write: Callable[[], bool] = lambda: True
    report: FleetReport | None = None
    writes: list[FleetWrite] = field(default_factory=list)
    # worker -> the quotas it was last seen with (or planned with, when written)
    last_quotas: dict[str, Mapping[str, Mapping[str, int]]] = field(default_factory=dict)
    _readers: dict[str, tuple[str, Reader]] = field(default_factory=dict)
    _manager_kueue: str | None = None

    def _worker(
        self, manager: Reader, name: str, source: KubeConfigSource | None, fleet: Fleet
    ) -> Reader:
        if source is None:
            raise WorkerUnreadable("no kubeConfig in spec.fleet and no MultiKueueCluster of it")
        timeout = fleet.read_timeout_seconds
        kubeconfig = kubeconfig_of(manager, source, fleet.kube_config_namespace, timeout)
        key = json.dumps(kubeconfig, sort_keys=True, default=str)
        cached = self._readers.get(name)
        if cached is not None and cached[0] == key:
            return cached[1]
        reader = connect(kubeconfig, timeout)
        self._readers[name] = (key, reader)
        return reader

    def _read_worker(
        self, manager: Reader, policy: TenantPolicy, name: str, source: KubeConfigSource | None
    ) -> WorkerRead:
        fleet = policy.spec.fleet or Fleet()
        try:
            reader = self._worker(manager, name, source, fleet)
            snapshot = read_cluster(reader, policy, fleet.read_timeout_seconds)
        except WorkerUnreadable as exc:
            self._readers.pop(name, None)  # connect afresh next time: it may have moved
            log.warning("fleet: worker %s unreachable: %s", name, exc)
            return WorkerRead(name, None, str(exc), self.last_quotas.get(name))
        return WorkerRead(name, snapshot)

    def cycle(self) -> FleetReport | None:
        """One fleet cycle (blocking); the report, or None when there is nothing to plan."""
        policy = self.policy()
        fleet = policy.spec.fleet
        if fleet is None or fleet.mode == "off":
            FLEET_CYCLES.labels("skipped").inc()
            return None
        timeout = fleet.read_timeout_seconds
        try:
            if self._manager_kueue is None:
                self._manager_kueue = discover_kueue(self.manager, timeout)
            manager = Reader(self.manager, self._manager_kueue)
            manager_snapshot = read_cluster(manager, policy, timeout, nodes=False)
        except WorkerUnreadable as exc:
            self._manager_kueue = None
            log.warning("fleet: the manager cannot be read: %s", exc)
            FLEET_CYCLES.labels("manager-unreachable").inc()
            return None
        reads = [
            self._read_worker(manager, policy, name, source)
            for name, source in worker_sources(manager, policy).items()
        ]
        plan = plan_fleet(policy, manager_snapshot, reads)
        report = plan.report(policy)
        for worker in plan.workers:
            if worker.reachable:
                self.last_quotas[worker.name] = worker.quotas
        if fleet.mode == "apply" and self.may_write():
            self.writes = self._write(
                policy, manager, plan.split.workers, plan.split.manager, reads
            )
        record_fleet(report)
        FLEET_CYCLES.labels("planned").inc()
        self.report = report
        return report

    def _write(
        self,
        policy: TenantPolicy,
        manager: Reader,
        workers: Mapping[str, Mapping[str, Mapping[str, int]]],
        sums: Mapping[str, Mapping[str, int]],
        reads: list[WorkerRead],
    ) -> list[FleetWrite]:
        """Workers first, then the manager: its quota never runs ahead of theirs."""
        timeout = (policy.spec.fleet or Fleet()).read_timeout_seconds
        written: list[FleetWrite] = []
        for read in reads:
            cached = self._readers.get(read.name)
            if read.snapshot is None or cached is None:
                continue
            written += write_quotas(read.name, cached[1], policy, workers[read.name], timeout)
            self.last_quotas[read.name] = workers[read.name]
        written += write_quotas("manager", manager, policy, sums, timeout)
        for write in written:
            record_write(write.cluster, write.changed, write.error)
        return written
