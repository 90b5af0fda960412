"""The Prometheus text exposition format, as dcgm-exporter serves it, into series of one point.

The parser is prometheus_client's (the format has enough corner cases — escapes, HELP/TYPE
lines, timestamps — that a hand-written one would be the weaker copy). A document it cannot
parse whole is parsed again line by line so that one bad line costs only itself.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

from quotaguard.telemetry.series import METRICS, GpuMetrics, SeriesBuilder


def _samples(text: str) -> Iterable[tuple[str, dict[str, str], float, float | None]]:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            timestamp = sample.timestamp
            at = float(timestamp) if isinstance(timestamp, int | float) else None
            yield sample.name, dict(sample.labels), float(sample.value), at


def _wanted(line: str) -> bool:
    name = line.split("{", 1)[0].split(" ", 1)[0].strip()
    return name in METRICS


def parse_exposition(text: str, *, at: float, source: str = "<metrics>") -> GpuMetrics:
    """A scrape's text; samples without a timestamp are taken at `at` (when it was read)."""
    builder = SeriesBuilder()
    try:
        rows = list(_samples(text))
    except (ValueError, TypeError, IndexError):
        rows = []
        for line in text.splitlines():
            if not line.strip() or line.startswith("#") or not _wanted(line):
                continue
            try:
                rows.extend(_samples(line + "\n"))
            except (ValueError, TypeError, IndexError):
                builder.warn("malformed line")
    for name, labels, value, stamp in rows:
        builder.add(name, labels, [(at if stamp is None else stamp, value)])
    return builder.build(source, at=None, single_sample=True, fallback=at)
