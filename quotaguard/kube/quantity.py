"""Kubernetes resource quantities and durations: the one parser every module uses."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")
# Far beyond any real quantity (Kubernetes caps them at 2^63-1 and 1n).
_MAX_EXPONENT = 64
MAX_COUNT = 2**63 - 1  # the largest quantity Kubernetes stores
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|h|m|s)")
_DURATION_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class QuantityError(ValueError):
    """A string is not a Kubernetes quantity or duration."""


def parse_quantity(value: object) -> Fraction:
    """Parse `8`, `"8"`, `"10Gi"`, `"500m"`, `"1e3"` exactly (no float rounding)."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"not a quantity: {value!r}")
        return Fraction(Decimal(repr(value)))
    if not isinstance(value, str):
        raise QuantityError(f"not a quantity: {value!r}")
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(f"not a quantity: {value!r}")
    number, suffix = match.groups()
    try:
        decimal = Decimal(number)
    except (InvalidOperation, ValueError) as exc:
        raise QuantityError(f"not a quantity: {value!r}") from exc
    # An exact Fraction of "1e999999999" would take minutes and gigabytes to build.
    if decimal and abs(decimal.adjusted()) > _MAX_EXPONENT:
        raise QuantityError(f"not a quantity: {value!r} is out of range")
    base = Fraction(decimal)
    scale = _BINARY.get(suffix)
    return base * (Fraction(scale) if scale is not None else _DECIMAL[suffix])


def parse_gpu_count(value: object) -> int | None:
    """A GPU count as Kubernetes extended resources require it: a whole number.

    Returns None when the value is not a whole, non-negative number, or is past what a
    Kubernetes quantity holds (2^63 - 1): a 400-digit count is a bad value, not a number to
    compute with.
    """
    # Admission parses a few of these per request: plain digits skip the regex and Fraction.
    if type(value) is str and value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    if type(value) is int:
        return value if 0 <= value <= MAX_COUNT else None
    try:
        amount = parse_quantity(value)
    except QuantityError:
        return None
    if amount.denominator != 1 or not 0 <= amount <= MAX_COUNT:
        return None
    return int(amount)


def parse_duration(value: object) -> float:
    """Seconds in a Go-style duration (`90s`, `15m`, `1h30m`) or a plain number of seconds."""
    if isinstance(value, bool):
        raise QuantityError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        return _finite_duration(float(value), value)
    if not isinstance(value, str) or not value:
        raise QuantityError(f"not a duration: {value!r}")
    text = value.strip()
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _DURATION_UNIT[match.group(2)]
        position = match.end()
    if position != len(text) or position == 0:
        raise QuantityError(f"not a duration (use e.g. 90s, 15m, 24h): {value!r}")
    return _finite_duration(total, value)


# Ten years: longer spans are typos, and NaN or infinity would make every comparison false.
MAX_DURATION_SECONDS = 10 * 365 * 86400.0


def _finite_duration(seconds: float, value: object) -> float:
    if not math.isfinite(seconds) or abs(seconds) > MAX_DURATION_SECONDS:
        raise QuantityError(f"not a duration of at most ten years: {value!r}")
    return seconds


def format_bytes(amount: int | Fraction) -> str:
    """Bytes in the largest binary unit that divides them (`10Gi`), else plain bytes."""
    whole = int(amount)
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if whole and whole % unit == 0:
            return f"{whole // unit}{suffix}"
    return str(whole)


def format_duration(seconds: float) -> str:
    whole = int(seconds)
    if whole != seconds:
        return f"{seconds}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{secs}s" if secs else "",
    ]
    return "".join(parts) or "0s"
