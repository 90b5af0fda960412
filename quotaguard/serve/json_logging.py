"""JSON-lines logging for `quotaguard serve`: one JSON object per line, every `extra=` field."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import IO, Any, Final

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
