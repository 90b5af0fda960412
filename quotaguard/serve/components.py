"""`quotaguard serve` as a library: one policy store, named components, one HTTP server.

A component is `async def start(ctx: ServeContext) -> None`. It runs once at start-up, before
anything is ready, and hooks itself into the process through the context: HTTP routes for the
plain-HTTP server, readiness checks, long-running tasks, and shutdown callbacks. It raises
`StartupError` when it cannot run with the options given (the process exits 2 with the message).
Components are looked up by name in `COMPONENTS` and imported only when asked for.

Lifecycle: load the policy -> start each component (in `COMPONENTS` order) -> start the HTTP
server -> poll the policy -> wait for SIGTERM/SIGINT or a task failure -> mark not ready -> run
shutdown callbacks (newest first; servers stop accepting and finish in-flight requests) -> stop
the HTTP server -> cancel tasks.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, cast

from aiohttp import web

from quotaguard.kube.documents import read_error
from quotaguard.policy.model import Mode
from quotaguard.serve.access import AccessControl, KubernetesReviews
from quotaguard.serve.plain_http import ReadinessCheck, StatusReport, build_http_app
from quotaguard.serve.policystore import DEFAULT_POLL_INTERVAL, PolicyStore

log = logging.getLogger("quotaguard.serve")


COMPONENTS: dict[str, str] = {
    # name -> "module:function"; the function is `async def start(ctx: ServeContext) -> None`.
    "webhook": "quotaguard.webhook.component:start",
    "controller": "quotaguard.controller.controller_component:start",
    # Each start() adds its routes, readiness checks, tasks and shutdown callbacks to ctx.
    "reports": "quotaguard.reports.reports_component:start",
    # the MultiKueue fleet's quotas (spec.fleet), on the manager cluster; not run by default
    "fleet": "quotaguard.controller.fleet_component:start",
}
DEFAULT_COMPONENTS: tuple[str, ...] = ("webhook", "controller", "reports")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


ReportsAuth = Literal["kubernetes", "none"]
REPORTS_AUTH: tuple[ReportsAuth, ...] = ("kubernetes", "none")


class StartupError(Exception):
    """A component cannot start with the options given; the message is for the user."""


@dataclass(frozen=True)
class ServeOptions:
    policy: str
    components: tuple[str, ...] = DEFAULT_COMPONENTS
    bind_address: str | None = None  # None: every interface
    webhook_port: int = 8443
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    http_port: int = 8080
    kubeconfig: str | None = None
    context: str | None = None  # the kubeconfig's context (None: its current one)
    mode: Mode | None = None  # overrides the policy's spec.rebalance.mode when set
    policy_poll_interval: float = DEFAULT_POLL_INTERVAL
    tls_poll_interval: float = 5.0
    shutdown_timeout: float = 25.0
    prometheus_url: str | None = None  # GPU telemetry for the controller
    prometheus_timeout: float = 10.0
    gpu_operator_namespace: str = "gpu-operator"  # default-mig-parted-config's namespace
    kueue_namespace: str = "kueue-system"  # kueue-manager-config's (its deviceClassMappings)
    # the webhook's connection bounds (webhook/guard.py)
    webhook_max_connections: int = 1000
    webhook_max_connections_per_peer: int = 100
    webhook_idle_timeout: float = 60.0
    webhook_header_timeout: float = 10.0
    webhook_body_timeout: float = 10.0
    # SO_REUSEPORT on the webhook port: several processes share it, the kernel spreads
    # connections over them
    webhook_reuse_port: bool = False
    # who may read /metrics and /reports: callers the API server vouches for (TokenReview) and
    # allows (SubjectAccessReview), or everyone ("none", a trusted network); serve/access.py
    reports_auth: ReportsAuth = "kubernetes"
    # the webhook reads the ResourceClaimTemplates, ResourceClaims and DeviceClasses that DRA
    # claims name (it needs the RBAC of the `dra` deploy component)
    webhook_read_dra: bool = False
    # answers of identical requests the webhook keeps (admission/decision_cache.py); 0: none
    webhook_decision_cache_entries: int = 4096


Component = Callable[["ServeContext"], Awaitable[None]]
ShutdownCallback = Callable[[], Awaitable[None]]
Provided = TypeVar("Provided")


@dataclass(frozen=True)
class Slot(Generic[Provided]):
    """A typed hand-over between components: one started earlier provides the value (e.g. the
    controller, whose latest plan the reports routes read), later ones take it. Defined once,
    by the package that reads it, so both ends agree on the name and the type."""

    name: str


@dataclass
class ServeContext:
    """What a component gets at start-up to join the process."""

    options: ServeOptions
    store: PolicyStore
    # what components provided for the ones started after them (`provide`, `provided`)
    slots: dict[str, object] = field(default_factory=dict)
    routes: list[web.AbstractRouteDef] = field(default_factory=list)
    readiness_checks: dict[str, ReadinessCheck] = field(default_factory=dict)
    status_reports: dict[str, StatusReport] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    shutdown_callbacks: list[ShutdownCallback] = field(default_factory=list)

    def provide(self, slot: Slot[Provided], value: Provided) -> None:
        self.slots[slot.name] = value

    def provided(self, slot: Slot[Provided]) -> Provided | None:
        """What a component started earlier provided in `slot` (None: nothing)."""
        return cast("Provided | None", self.slots.get(slot.name))

    def add_routes(self, routes: Iterable[web.AbstractRouteDef]) -> None:
        """Routes for the plain-HTTP server (it starts after every component's start())."""
        self.routes.extend(routes)

    def add_readiness_check(self, name: str, check: ReadinessCheck) -> None:
        self.readiness_checks[name] = check

    def add_status(self, name: str, report: StatusReport) -> None:
        """A JSON-able report shown under `name` on /readyz."""
        self.status_reports[name] = report

    def run_task(self, name: str, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run until shutdown, when it is cancelled. A task that ends on its own, by returning or
        raising, stops the process (exit 1 when it raised) so that Kubernetes restarts it."""
        self.tasks[name] = asyncio.get_running_loop().create_task(coroutine, name=name)

    def on_shutdown(self, callback: ShutdownCallback) -> None:
        """Awaited at shutdown, newest first, before tasks are cancelled."""
        self.shutdown_callbacks.append(callback)


def resolve_components(names: Sequence[str]) -> list[tuple[str, Component]]:
    """The start functions of the named components in start-up order; StartupError for a name
    that is unknown or whose package is not part of this installation."""
    unknown = [name for name in names if name not in COMPONENTS]
    if unknown:
        raise StartupError(
            f"unknown component {', '.join(unknown)}; choose from {', '.join(COMPONENTS)}"
        )
    resolved = []
    for name, target in COMPONENTS.items():
        if name not in names:
            continue
        module_name, _, function = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if not (module_name == missing or module_name.startswith(missing + ".")):
                raise  # a missing dependency inside the component: a real bug, show it
            raise StartupError(
                f"component {name!r} is not available in this build ({module_name} is missing)"
            ) from exc
        resolved.append((name, getattr(module, function)))
    return resolved


async def serve(
    options: ServeOptions, *, stop: asyncio.Event | None = None, handle_signals: bool = True
) -> int:
    """Run until `stop` is set (or SIGTERM/SIGINT with `handle_signals`); the exit code.
    Raises StartupError and PolicyInvalid before anything is ready."""
    components = resolve_components(options.components)
    store = PolicyStore(options.policy)
    try:
        store.load()
    except OSError as exc:
        raise StartupError(f"{options.policy}: {read_error(exc)}") from exc
    stop = stop or asyncio.Event()
    context = ServeContext(options, store)
    stopping = False
    context.add_readiness_check("shutdown", lambda: "shutting down" if stopping else None)
    http_runner: web.AppRunner | None = None
    try:
        for name, start in components:
            await start(context)
            log.info("component started", extra={"component": name})
        http_runner = await _start_http(context)
        context.run_task("policy-watch", store.watch(options.policy_poll_interval))
        if handle_signals:
            _install_signal_handlers(stop)
        code = await _wait(stop, context.tasks)
    finally:
        stopping = True
        await _shut_down(context, http_runner)
    log.info("stopped", extra={"exit_code": code})
    return code


async def _start_http(context: ServeContext) -> web.AppRunner:
    options = context.options
    access = None
    if options.reports_auth == "kubernetes":
        # reads the kubeconfig (and may run its exec plugin) with blocking calls
        access = await asyncio.to_thread(_kubernetes_access, options.kubeconfig)
    app = build_http_app(
        context.store,
        extra_routes=context.routes,
        readiness_checks=context.readiness_checks,
        status_reports=context.status_reports,
        access=access,
    )
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=options.shutdown_timeout)
    await runner.setup()
    site = web.TCPSite(runner, options.bind_address, options.http_port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise StartupError(f"cannot listen on HTTP port {options.http_port}: {exc}") from exc
    log.info("http listening", extra={"addresses": [list(a) for a in runner.addresses]})
    return runner


def _kubernetes_access(kubeconfig: str | None) -> AccessControl:
    from quotaguard.kube.client import api_client

    try:
        client = api_client(kubeconfig)
    except Exception as exc:  # NoClusterConfig, or the client's own ConfigException
        raise StartupError(
            "/metrics and /reports check their callers with the API server (TokenReview, "
            f"SubjectAccessReview), which needs cluster access: {exc}; or serve them to "
            "everyone on a trusted network with --reports-auth none"
        ) from exc
    return AccessControl(KubernetesReviews(client))


def _install_signal_handlers(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
            return


async def _wait(stop: asyncio.Event, tasks: dict[str, asyncio.Task[None]]) -> int:
    stopped = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait(
            [stopped, *tasks.values()], return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stopped.cancel()
    if stopped in done:
        log.info("shutting down")
        return EXIT_OK
    for name, task in tasks.items():
        if task in done:
            error = task.exception()
            if error is not None:
                log.error("task failed", exc_info=error, extra={"task": name})
                return EXIT_FAILED
            log.error("task ended unexpectedly", extra={"task": name})
    return EXIT_FAILED


async def _shut_down(context: ServeContext, http_runner: web.AppRunner | None) -> None:
    for callback in reversed(context.shutdown_callbacks):
        try:
            await callback()
        except Exception:
            log.exception("shutdown callback failed")
    if http_runner is not None:
        await http_runner.cleanup()
    for task in context.tasks.values():
        task.cancel()
    await asyncio.gather(*context.tasks.values(), return_exceptions=True)
