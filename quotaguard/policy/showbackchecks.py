"""Checks of `spec.showback` a schema cannot express, all warnings: the reports are right either
way, but GPU-hours may go without a cost, or a price may not be the one meant.

Like `checks.py`, they read the raw document defensively so they run next to schema errors.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from quotaguard.kube.values import mapping as _map
from quotaguard.policy.prices import GPU_PRODUCT_LABEL, model_of, price_of, words
from quotaguard.policy.problems import Problem

BASE = ("spec", "showback")
PRICES = (*BASE, "pricePerGPUHour")


def _prices(showback: Mapping[str, Any]) -> dict[str, float]:
    """Every key with its price, 0 for a price the schema refuses (reported there)."""
    found: dict[str, float] = {}
    for key, value in _map(showback.get("pricePerGPUHour")).items():
        usable = isinstance(value, int | float) and not isinstance(value, bool)
        found[str(key)] = float(value) if usable and math.isfinite(value) else 0.0
    return found


def _same_words(prices: Mapping[str, float], classes: set[str]) -> Iterator[Problem]:
    """Model keys of the same words (`H100` and `h100`): one of them is never used."""
    seen: dict[tuple[str, ...], str] = {}
    for key in sorted(prices):
        if key in classes:
            continue
        spelled = tuple(words(key))
        if spelled in seen:
            yield Problem(
                (*PRICES, key),
                f"{key!r} matches the same GPU models as {seen[spelled]!r}, whose price is used",
                "warning",
            )
        else:
            seen[spelled] = key


def _unpriced_classes(spec: Mapping[str, Any], prices: Mapping[str, float]) -> Iterator[Problem]:
    """A class whose nodeSelector names the GPU model, and that no key prices."""
    classes = spec.get("gpuClasses")
    for index, gpu_class in enumerate(classes if isinstance(classes, list) else []):
        gpu_class = _map(gpu_class)
        name = gpu_class.get("name")
        selector = _map(gpu_class.get("nodeSelector"))
        product = selector.get(GPU_PRODUCT_LABEL)
        if not isinstance(name, str) or not isinstance(product, str):
            continue
        if price_of(prices, name, model_of({GPU_PRODUCT_LABEL: product})) is None:
            yield Problem(
                ("spec", "gpuClasses", index, "name"),
                f"class {name!r} ({product}) has no price in spec.showback.pricePerGPUHour: "
                "its GPU-hours are reported without a cost",
                "warning",
            )


def check_showback(spec: Mapping[str, Any]) -> list[Problem]:
    showback = spec.get("showback")
    if not isinstance(showback, Mapping):
        return []
    prices = _prices(showback)
    if not prices:
        if showback.get("currency") is not None:
            return [Problem((*BASE, "currency"), "a currency without prices", "warning")]
        return []
    listed = spec.get("gpuClasses")
    classes = {
        c["name"]
        for c in (listed if isinstance(listed, list) else [])
        if isinstance(c, Mapping) and isinstance(c.get("name"), str)
    }
    return [
        *_same_words(prices, classes),
        *_unpriced_classes(spec, prices),
    ]
