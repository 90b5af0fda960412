"""The one Prometheus registry every component of `serve` exports, and the way a quotaguard
metric is made in it.

Metrics live in a registry of their own rather than prometheus_client's global one, so tests and
`serve` see exactly quotaguard's series and importing this module twice never double-registers.
Components define their metrics with `counter`, `gauge` and `histogram` (in this package),
which make them in `REGISTRY`.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
)

from quotaguard import __version__

# Counters and histograms export no `_created` series: they double the series count and no
# dashboard or alert here reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

REGISTRY: Final = CollectorRegistry(auto_describe=True)


# The one way a quotaguard metric is made: in REGISTRY (the webhook's, the controller's and the
# reports' metrics alike).
def counter(name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
    return Counter(name, documentation, labels, registry=REGISTRY)


def gauge(name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
    return Gauge(name, documentation, labels, registry=REGISTRY)


def histogram(
    name: str, documentation: str, labels: Sequence[str] = (), *, buckets: Sequence[float]
) -> Histogram:
    return Histogram(name, documentation, labels, buckets=buckets, registry=REGISTRY)


BUILD_INFO: Final = Info(
    "quotaguard_build",
    "The quotaguard release and Python it runs on (value always 1).",
    registry=REGISTRY,
)
BUILD_INFO.info({"version": __version__, "python_version": platform.python_version()})
