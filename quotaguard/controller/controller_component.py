"""The `controller` component of `quotaguard serve`."""

from __future__ import annotations

import asyncio
import contextlib

from quotaguard.controller.kube_clients import KubeClients
from quotaguard.controller.quota_controller import Controller, ControllerSettings
from quotaguard.reports.reports_component import REPORT_SOURCE
from quotaguard.serve.components import ServeContext, StartupError


async def start(ctx: ServeContext) -> None:
    try:
        # reads the kubeconfig (and may run its exec plugin) with blocking calls
        clients = await asyncio.to_thread(
            KubeClients.connect, ctx.options.kubeconfig, context=ctx.options.context
        )
    except Exception as exc:
        where = ctx.options.kubeconfig or "in-cluster configuration"
        raise StartupError(f"cannot configure the Kubernetes client from {where}: {exc}") from exc
    controller = Controller(
        ctx.store,
        clients,
        ControllerSettings(
            mode=ctx.options.mode,
            prometheus_url=ctx.options.prometheus_url,
            prometheus_timeout=ctx.options.prometheus_timeout,
            gpu_operator_namespace=ctx.options.gpu_operator_namespace,
            kueue_namespace=ctx.options.kueue_namespace,
        ),
    )
    ctx.provide(REPORT_SOURCE, controller)
    stop = asyncio.Event()
    ctx.run_task("controller", controller.run(stop))

    async def shut_down() -> None:
        stop.set()
        task = ctx.tasks.get("controller")
        if task is not None:
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), timeout=10)

    ctx.on_shutdown(shut_down)
