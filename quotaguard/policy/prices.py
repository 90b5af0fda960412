"""What a GPU-hour costs by the policy's `spec.showback.pricePerGPUHour`, and the GPU model a
node's labels name, which model keys are matched against.

A key prices a class when it is the class's name; otherwise it is a GPU model, matched word by
word against the product name GPU feature discovery gives a node (`nvidia.com/gpu.product`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

UNKNOWN_MODEL = "unknown"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by GPU feature discovery
# GPU feature discovery appends the MIG profile (MIG strategy `single`) or `-SHARED`
# (time-slicing without renaming) to the product name: the GPU model is what comes before.
_PRODUCT_SUFFIX = re.compile(r"(-MIG(-.*)?|-SHARED)$", re.IGNORECASE)
_TOKEN_SEPARATOR = re.compile(r"[-_ ]+")


def model_of(labels: Mapping[str, str]) -> str:
    """The GPU model of a node, as GPU feature discovery names it (`NVIDIA-H100-80GB-HBM3`),
    without the MIG or sharing suffix it may carry; `unknown` without the label."""
    product = str(labels.get(GPU_PRODUCT_LABEL, "")).strip()
    return _PRODUCT_SUFFIX.sub("", product) or UNKNOWN_MODEL


def words(name: str) -> list[str]:
    """The words of a key or product name, as matched: split at `-`, `_` and spaces, any case."""
    return [token for token in _TOKEN_SEPARATOR.split(name.lower()) if token]


def _in_order(wanted: list[str], tokens: list[str]) -> bool:
    remaining = iter(tokens)
    return all(token in remaining for token in wanted)


def price_of(prices: Mapping[str, float], class_name: str, model: str) -> float | None:
    """The price of one whole GPU for an hour: the class's own when the policy names it, else
    that of the most specific key whose words (split at `-`, `_`, spaces; any case) all appear,
    in order, among the model's (`h100` and `H100-80GB` are both prices of
    `NVIDIA-H100-80GB-HBM3`, `h200` is not one of `NVIDIA-GH200-480GB`); None when unpriced."""
    if class_name in prices:
        return prices[class_name]
    if model == UNKNOWN_MODEL:
        return None
    tokens = words(model)
    matching = [
        (len(wanted), key) for key in prices if (wanted := words(key)) and _in_order(wanted, tokens)
    ]
    if not matching:
        return None
    _, key = min(matching, key=lambda found: (-found[0], found[1]))  # ties: the first by name
    return prices[key]
