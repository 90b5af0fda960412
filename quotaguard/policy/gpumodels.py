"""Which of the catalogue's GPUs a node has, from GPU feature discovery's labels.

GPU feature discovery (the GPU operator's GFD) labels a node `nvidia.com/gpu.product` with the
product name NVML reports, spaces as dashes: `NVIDIA-A100-SXM4-80GB`, `NVIDIA-H100-80GB-HBM3`,
`NVIDIA-H100-NVL`, `NVIDIA-H200`, `NVIDIA-GH200-480GB` (the superchip's memory, not the GPU's),
`NVIDIA-GH200-144G-HBM3e`, `NVIDIA-B200`, `NVIDIA-GB200`, `NVIDIA-B300-SXM6-AC`,
`NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition`; with MIG's single strategy it appends
`-MIG-<profile>`, with time-slicing `-SHARED`. `nvidia.com/gpu.memory` is the GPU's memory in
MiB. The product is read by whole dash-separated words, so `GH200` is never taken for `H200`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB, set by GPU feature discovery


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str  # the catalogue's name
    family: str  # the product word GFD's label holds
    memory_gb: int


# Per family, the first is taken when the memory cannot be told.
MODELS: tuple[GpuModel, ...] = (
    GpuModel("A100-80GB", "A100", 80),
    GpuModel("A100-40GB", "A100", 40),
    GpuModel("A30-24GB", "A30", 24),
    GpuModel("H100-80GB", "H100", 80),
    GpuModel("H100-94GB", "H100", 94),
    GpuModel("H100-96GB", "H100", 96),
    GpuModel("H20-96GB", "H20", 96),
    GpuModel("GH200-96GB", "GH200", 96),
    GpuModel("GH200-144GB", "GH200", 144),
    GpuModel("H200-141GB", "H200", 141),
    GpuModel("B200-180GB", "B200", 180),
    GpuModel("GB200-186GB", "GB200", 186),
    GpuModel("B300-269GB", "B300", 269),
    GpuModel("GB300-278GB", "GB300", 278),
    GpuModel("RTX-PRO-6000-96GB", "RTX-PRO-6000", 96),
)

# Product words of the same silicon under another name (export variants).
_FAMILY_OF = {"A800": "A100", "H800": "H100"}

# PCI device IDs (as mig-parted's device-filter spells them), from the device-filters of the
# GPU operator's default-mig-parted-config (NVIDIA/gpu-operator v26.7.0). H100-96GB, GH200,
# H20 and PG506-96GB share one entry there (the same profiles); each model takes its own ID.
PCI_IDS: Mapping[str, tuple[str, ...]] = {
    "A100-40GB": ("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"),
    "A100-80GB": ("0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"),
    "A30-24GB": ("0x20B710DE",),
    "H100-80GB": ("0x233010DE", "0x233110DE", "0x232210DE", "0x232410DE"),
    "H100-94GB": ("0x232110DE", "0x233A10DE"),
    "H100-96GB": ("0x233D10DE", "0x20B610DE"),
    "H20-96GB": ("0x232910DE",),
    "GH200-96GB": ("0x234210DE",),
    "GH200-144GB": ("0x234810DE",),
    "H200-141GB": ("0x233510DE", "0x233B10DE"),
    "B200-180GB": ("0x290110DE",),
    "GB200-186GB": ("0x294110DE",),
    "B300-269GB": ("0x318210DE",),
    "GB300-278GB": ("0x31C210DE",),
    "RTX-PRO-6000-96GB": ("0x2BB510DE",),
}

_SUFFIX = re.compile(r"-(MIG-.*|SHARED)$")
_MEMORY_WORD = re.compile(r"([0-9]{1,4})GB?")


def _words(product: str) -> list[str]:
    text = re.sub(r"[\s_]+", "-", product.strip()).upper()
    return _SUFFIX.sub("", text).split("-")


def _family(words: list[str]) -> str | None:
    joined = "-".join(words)
    if "-RTX-PRO-6000-" in f"-{joined}-":
        return "RTX-PRO-6000"
    families = {model.family for model in MODELS}
    for word in words:
        family = _FAMILY_OF.get(word, word)
        if family in families:
            return family
    return None


def _stated_memory(words: list[str], models: list[GpuModel]) -> int | None:
    """Memory a word of the product states (`80GB`, `144G`), when it is one of the family's:
    GH200's `480GB` is the superchip's memory, not its GPU's."""
    sizes = {model.memory_gb for model in models}
    for word in words:
        found = _MEMORY_WORD.fullmatch(word)
        if found and int(found.group(1)) in sizes:
            return int(found.group(1))
    if "NVL" in words and 94 in sizes:  # H100 NVL, H800 NVL
        return 94
    if "HBM3E" in words and 144 in sizes:  # GH200 144G HBM3e
        return 144
    return None


def gpu_model(labels: Mapping[str, str]) -> str | None:
    """The catalogue's name (`A100-80GB`) of the GPUs a node's GPU feature discovery labels
    describe (`nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB`), or None when unknown."""
    words = _words(labels.get(GPU_PRODUCT_LABEL, ""))
    family = _family(words)
    if family is None:
        return None
    models = [model for model in MODELS if model.family == family]
    memory = _stated_memory(words, models)
    mib = labels.get(GPU_MEMORY_LABEL, "")
    if memory is None and mib.isascii() and mib.isdigit():
        memory = round(int(mib) / 1024)
    if memory is None:
        return models[0].name
    return min(models, key=lambda model: abs(model.memory_gb - memory)).name
