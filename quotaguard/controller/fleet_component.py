"""The `fleet` component of `quotaguard serve` (`--components ...,fleet`): the fleet controller
on the manager cluster, one writer at a time by the `quotaguard-fleet` Lease, every
`rebalance.interval`; its last report on /readyz under `fleet`."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from quotaguard.controller.fleet_controller import FLEET_LEASE, FleetController
from quotaguard.controller.kube_clients import KubeClients
from quotaguard.controller.leader import (
    KubeLeaseStore,
    LeaderElector,
    default_identity,
    default_namespace,
)
from quotaguard.serve.components import ServeContext, StartupError

log = logging.getLogger("quotaguard.fleet")
# a write starts only while the Lease is ours for at least this long
WRITE_MARGIN = 5.0


async def start(ctx: ServeContext) -> None:
    try:
        clients = await asyncio.to_thread(
            KubeClients.connect, ctx.options.kubeconfig, context=ctx.options.context
        )
    except Exception as exc:
        where = ctx.options.kubeconfig or "in-cluster configuration"
        raise StartupError(f"cannot configure the Kubernetes client from {where}: {exc}") from exc
    namespace = default_namespace()
    elector = LeaderElector(
        KubeLeaseStore(clients.coordination, name=FLEET_LEASE, namespace=namespace),
        default_identity(),
        name=FLEET_LEASE,
        namespace=namespace,
    )
    controller = FleetController(
        clients, lambda: ctx.store.policy, may_write=lambda: elector.is_leader(WRITE_MARGIN)
    )
    ctx.add_status("fleet", lambda: controller.report)
    stop = asyncio.Event()

    async def cycles() -> None:
        while not stop.is_set():
            try:
                await asyncio.to_thread(controller.cycle)
            except Exception:  # a cycle's bug is logged; the next interval tries again
                log.exception("fleet cycle failed")
            interval = ctx.store.policy.spec.rebalance.interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)

    ctx.run_task("fleet-leader", elector.run(stop))
    ctx.run_task("fleet", cycles())

    async def shut_down() -> None:
        stop.set()
        for name in ("fleet", "fleet-leader"):
            task = ctx.tasks.get(name)
            if task is not None:
                with contextlib.suppress(Exception, asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(task), timeout=10)

    ctx.on_shutdown(shut_down)
