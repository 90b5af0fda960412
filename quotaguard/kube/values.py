"""Plain JSON values as the API server sends them: maps that may be missing, UTC timestamps."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

# RFC 3339 in UTC with whole seconds, as Kubernetes writes metav1.Time.
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def mapping(value: object) -> Mapping[str, Any]:
    """`value` when it is a map, else an empty one (a field absent, null or of another type)."""
    if type(value) is dict:  # decoded JSON: skips the slower check against the Mapping ABC
        return value
    return value if isinstance(value, Mapping) else {}


def utc_timestamp(moment: datetime | float) -> str:
    """A datetime (naive ones are taken as local time) or Unix seconds, as TIMESTAMP_FORMAT."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, UTC)
    return moment.astimezone(UTC).strftime(TIMESTAMP_FORMAT)


def unix_seconds(value: object) -> float | None:
    """An RFC 3339 timestamp (metav1.Time: `2026-12-03T18:00:00Z`) as Unix seconds; None for
    anything else, or one without a zone."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return None if moment.tzinfo is None else moment.timestamp()
