"""JSON-lines logging and the one Prometheus registry every component of `serve` exports.

Metrics live in a registry of their own rather than prometheus_client's global one, so tests and
`serve` see exactly quotaguard's series and importing this module twice never double-registers.
Components define their metrics with `counter`, `gauge` and `histogram` (here or in their own
module), which make them in `REGISTRY`.
"""

from __future__ import annotations

import json
import logging
import platform
import sys
import time
from collections.abc import Sequence
from typing import IO, Any, Final

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

# -- admission webhook ---------------------------------------------------------------------------
ADMISSION_REQUESTS: Final = counter(
    "quotaguard_admission_requests",
    "Admission requests answered, by operation (mutate/validate), object kind and result.",
    ["operation", "kind", "result"],
)
ADMISSION_DURATION: Final = histogram(
    "quotaguard_admission_duration_seconds",
    "Time from the end of reading the request body to the encoded response.",
    ["operation"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
)
ADMISSION_DENIALS: Final = counter(
    "quotaguard_admission_denials",
    "Objects denied, by tenant (empty: a namespace no tenant owns) and the policy rule that "
    "denied them; an object denied by two rules counts under both.",
    ["tenant", "reason"],
)
ADMISSION_IN_FLIGHT: Final = gauge(
    "quotaguard_admission_in_flight_requests",
    "Admission requests being handled right now.",
)

# -- policy file ---------------------------------------------------------------------------------
POLICY_RELOADS: Final = counter(
    "quotaguard_policy_reloads",
    "Policy files loaded and put in force (the first load included).",
)
POLICY_RELOAD_FAILURES: Final = counter(
    "quotaguard_policy_reload_failures",
    "Changed policy files refused (reason: invalid or unreadable); the last good policy stays.",
    ["reason"],
)
POLICY_GENERATION: Final = gauge(
    "quotaguard_policy_generation",
    "Generation of the policy in force: 1 after the first load, +1 on every accepted change.",
)

# -- serving certificate -------------------------------------------------------------------------
TLS_RELOADS: Final = counter(
    "quotaguard_tls_certificate_reloads",
    "Serving certificate/key pairs loaded (the first load included).",
)
TLS_RELOAD_FAILURES: Final = counter(
    "quotaguard_tls_certificate_reload_failures",
    "Changed certificate/key files refused (unreadable or not a matching pair).",
)
TLS_CERTIFICATE_EXPIRY: Final = gauge(
    "quotaguard_tls_certificate_expiry_timestamp_seconds",
    "notAfter of the serving certificate in force, as a Unix time.",
)

# Series that exist from the start, so dashboards and alerts see zeros rather than nothing.
for _operation in ("mutate", "validate"):
    ADMISSION_DURATION.labels(operation=_operation)
for _reason in ("invalid", "unreadable"):
    POLICY_RELOAD_FAILURES.labels(reason=_reason)

# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged.
_STANDARD_ATTRIBUTES: Final = frozenset(
    {*vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)), "message", "asctime"}
)


class JsonLinesFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and every `extra=` field."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


def _rfc3339(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


def configure_logging(level: str = "info", *, stream: IO[str] | None = None) -> None:
    """Send every logger's records to `stream` (stderr) as JSON lines, at `level` and above."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonLinesFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # aiohttp's per-request access log would double every request; our own metrics cover it.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
