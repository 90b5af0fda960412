"""Sections of the policy's spec that stand alone: showback prices and GPU pod scheduling."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, Field

from quotaguard.policy.strict import Strict as _Strict

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"

_PRICE_KEY = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def _price_key(value: object) -> object:
    """A class name, or a GPU model as GPU feature discovery spells it (`H100`, `a100-80gb`)."""
    if isinstance(value, str) and not _PRICE_KEY.fullmatch(value):
        raise ValueError(
            f"{value!r} is neither a class name nor a GPU model (letters, digits, '-', '_', "
            "'.', at most 63)"
        )
    return value


def _currency(value: object) -> object:
    if isinstance(value, str) and not (0 < len(value) <= 16 and value.strip() == value):
        raise ValueError("a currency is a short name such as USD, EUR or credits (1-16 characters)")
    return value


PriceKey = Annotated[str, BeforeValidator(_price_key)]
Price = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Showback(_Strict):
    """What a GPU-hour costs, for the showback reports: per class name or GPU model, the price
    of one whole GPU for one hour (a MIG slice or a shared unit costs its whole-GPU
    equivalent of it)."""

    price_per_gpu_hour: Annotated[dict[PriceKey, Price], Field(alias="pricePerGPUHour")] = Field(
        default_factory=dict
    )
    currency: Annotated[str | None, BeforeValidator(_currency)] = None


class Scheduling(_Strict):
    """How the GPU pods quotaguard decides are placed: `schedulerName` names the kube-scheduler
    profile that packs them (tools/scheduler_profile.py, docs/packing.md); the webhook sets it
    on the pod templates of a tenant's GPU workloads under the Kueue backend."""

    scheduler_name: Annotated[str | None, Field(pattern=DNS_SUBDOMAIN, max_length=253)] = None
