"""A controller on its own thread and event loop, for the synchronous e2e tests."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from quotaguard.controller.kube_clients import KubeClients
from quotaguard.controller.quota_controller import Controller, ControllerSettings


class ControllerThread:
    """`start()` runs a Controller in the background; `stop()` ends it and releases its Lease.

    Read `controller.status` (intervals, stale, writes, last_report) and `controller.watches`
    while it runs.
    """

    def __init__(
        self,
        policy: Any,
        *,
        kubeconfig: str | None = None,
        clients: KubeClients | None = None,
        settings: ControllerSettings | None = None,
    ) -> None:
        self.controller = Controller(policy, clients or KubeClients.connect(kubeconfig), settings)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self.error: BaseException | None = None

    def start(self) -> Controller:
        self._thread = threading.Thread(
            target=self._main, name="quotaguard-controller", daemon=True
        )
        self._thread.start()
        self._started.wait(10)
        return self.controller

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._started.set()
            await self.controller.run(self._stop)

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to the caller through `error`
            self.error = exc
            self._started.set()

    def stop(self, timeout: float = 20.0) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_for(self, condition: Callable[[Controller], bool], timeout: float = 30.0) -> bool:
        """Poll `condition(controller)` until true; False after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition(self.controller):
                return True
            time.sleep(0.05)
        return condition(self.controller)

    def __enter__(self) -> Controller:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
