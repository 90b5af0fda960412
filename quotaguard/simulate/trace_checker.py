"""The problems of a trace document, collected as (field path, message, at key) while it is
read: every part of a trace (`trace`, `fleet_trace`) reports through one checker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quotaguard.kube.quantity import QuantityError, parse_duration
from quotaguard.policy.problems import Path as FieldPath


class TraceChecker:
    """Reads the plain document and collects (field path, message) problems."""

    def __init__(self) -> None:
        # (field path, message, whether to point at the key rather than its value)
        self.problems: list[tuple[FieldPath, str, bool]] = []

    def problem(self, path: FieldPath, message: str, *, at_key: bool = False) -> None:
        self.problems.append((path, message, at_key))

    def mapping(self, value: object, path: FieldPath, what: str) -> Mapping[str, Any] | None:
        if isinstance(value, Mapping):
            return value
        self.problem(path, f"{what} must be a mapping, not {kind_of(value)}")
        return None

    def unknown(self, value: Mapping[str, Any], allowed: frozenset[str], path: FieldPath) -> None:
        for key in value:
            if key not in allowed:
                self.problem(
                    (*path, str(key)),
                    f"unknown field {key!r}; allowed: {', '.join(sorted(allowed))}",
                    at_key=True,
                )

    def seconds(
        self, value: object, path: FieldPath, *, positive: bool, default: float | None = None
    ) -> float | None:
        if value is None:
            if default is None:
                self.problem(path, "required field is missing")
            return default
        try:
            seconds = parse_duration(value)
        except QuantityError:
            self.problem(path, f"must be seconds or a duration such as 90s or 2h, not {value!r}")
            return None
        if seconds < 0 or (positive and seconds == 0):
            self.problem(path, "must be positive" if positive else "must not be negative")
            return None
        return seconds

    def string_map(self, value: object, path: FieldPath) -> dict[str, str]:
        found = self.mapping(value, path, str(path[-1]) if path else "value")
        if found is None:
            return {}
        result = {}
        for key, item in found.items():
            if isinstance(item, str | int | float | bool):
                result[str(key)] = str(item).lower() if isinstance(item, bool) else str(item)
            else:
                self.problem((*path, str(key)), f"must be a string, not {kind_of(item)}")
        return result


def kind_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__
