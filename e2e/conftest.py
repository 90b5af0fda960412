"""Fixtures for the e2e suite: a real control plane started once per session.

The toolchain (kube-apiserver & co., built by `python -m e2e.build`) missing means: skip
locally; under CI=true (the e2e suite must run in CI) or QUOTAGUARD_E2E_BUILD=1 build it here
(~15 min cold on 2 cores), and a failed build fails the suite.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e import build
from e2e.cluster import Cluster

_clusters: list[Cluster] = []
_failed: list[str] = []


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def toolchain() -> build.Toolchain:
    tc = build.toolchain()
    if not tc.missing():
        return tc
    if _truthy("QUOTAGUARD_E2E_BUILD") or _truthy("CI"):
        try:
            return build.ensure_toolchain()
        except build.BuildError as err:
            pytest.fail(f"e2e toolchain build failed (CI must run e2e, not skip it): {err}")
    pytest.skip(
        f"e2e toolchain missing ({', '.join(tc.missing())}); "
        f"run `python -m e2e.build` (cache {build.cache_dir()})"
    )


def _start(tc: build.Toolchain, **kwargs: Any) -> Cluster:
    cluster = Cluster(tc, **kwargs)
    _clusters.append(cluster)
    cluster.start()
    return cluster


def _finish(cluster: Cluster) -> None:
    cluster.stop()
    if not _failed and not _truthy("QUOTAGUARD_E2E_KEEP"):
        cluster.cleanup()


@pytest.fixture(scope="session")
def cluster(toolchain: build.Toolchain) -> Iterator[Cluster]:
    """The shared control plane: etcd, kube-apiserver, controller-manager, scheduler, kwok,
    CRDs installed. Tests must not stop or restart it (use `make_cluster` for that)."""
    c = _start(toolchain, controllers=not _truthy("QUOTAGUARD_E2E_NO_CONTROLLERS"))
    yield c
    _finish(c)


def _factory(toolchain: build.Toolchain) -> Iterator[Callable[..., Cluster]]:
    started: list[Cluster] = []

    def factory(**kwargs: Any) -> Cluster:
        c = _start(toolchain, **kwargs)
        started.append(c)
        return c

    yield factory
    for c in started:
        _finish(c)


@pytest.fixture
def make_cluster(toolchain: build.Toolchain) -> Iterator[Callable[..., Cluster]]:
    """A factory for a private cluster (same keyword arguments as Cluster), stopped after the
    test: for tests that restart or break the control plane."""
    yield from _factory(toolchain)


@pytest.fixture(scope="module")
def make_module_cluster(toolchain: build.Toolchain) -> Iterator[Callable[..., Cluster]]:
    """The same factory, for a private cluster one module's tests share (stopped after the
    module): for a control plane set up differently from the session's, e.g. with Kueue."""
    yield from _factory(toolchain)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report: pytest.TestReport = yield
    if report.failed:
        _failed.append(item.nodeid)
        if len(_failed) == 1:  # the first failure's logs; a section travels back from xdist
            logs = "\n".join(c.failure_report() for c in _clusters)
            report.sections.append(("e2e control-plane logs", logs))
    return report
