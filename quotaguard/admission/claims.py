"""DRA claims of a pod spec resolved to the policy's GPU classes and counted in GPUs.

A pod spec's `resourceClaims` name a ResourceClaimTemplate (a claim of the pod's own) or a
ResourceClaim (shared by name). Each request of the claim (`exactly`, or `firstAvailable`
subrequests of which the scheduler takes the first it can satisfy) names a DeviceClass and may
narrow it with CEL selectors. A request counts for every policy class of its DeviceClass whose
pinned attributes its selectors do not contradict (the scheduler may hand it any of their
devices), and is worth its count times the largest of their GPU-equivalents. Pure: the
templates, claims and DeviceClasses come in as data (`quotaguard.kube.dra.DraLookup`).

What cannot be resolved is an outcome of its own, worded for the user and naming the claim: a
template or claim not found, a DeviceClass that does not exist, `allocationMode: All` on a GPU
class without `dra.maxDevicesPerNode` (how many devices it takes is only known on the node).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from quotaguard.kube.cel import DRIVER
from quotaguard.kube.dra import (
    ALL,
    ClaimSpec,
    DeviceChoice,
    DeviceRequest,
    DraLookup,
    PodClaim,
    pod_claims,
)
from quotaguard.kube.names import KNOWN_GPU_DEVICE_CLASSES
from quotaguard.kube.podspec import KNOWN_GPU_RESOURCES
from quotaguard.policy.dra_classes import classes_for_request, classes_of_device_class
from quotaguard.policy.model import GpuClass, TenantPolicy

# DRA drivers of GPUs: a DeviceClass of one of them is a GPU class even when the policy names
# it nowhere (NVIDIA's, AMD's, Intel's).
GPU_DRIVERS = frozenset({"gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com"})


@dataclass(frozen=True, slots=True)
class ChoiceGpus:
    """One `exactly` request or `firstAvailable` subrequest, resolved: the classes its devices
    may be (none: a GPU DeviceClass no class of the policy covers), its device count and its
    worth in whole GPUs. `gpu` is False for devices that are not GPUs (a NIC's claim)."""

    choice: DeviceChoice
    gpu: bool
    classes: tuple[GpuClass, ...] = ()
    count: int = 0
    worth: Fraction = Fraction(0)


@dataclass(frozen=True, slots=True)
class RequestGpus:
    request: DeviceRequest
    choices: tuple[ChoiceGpus, ...]

    @property
    def worth(self) -> Fraction:
        """The most any of its choices may take (the scheduler picks one)."""
        return max((c.worth for c in self.choices), default=Fraction(0))


@dataclass(frozen=True, slots=True)
class ClaimGpus:
    """One entry of a pod spec's `resourceClaims`, resolved; `unresolved` says why it could
    not be, naming the claim."""

    pod_claim: PodClaim
    requests: tuple[RequestGpus, ...] = ()
    unresolved: str | None = None

    @property
    def worth(self) -> Fraction:
        return sum((r.worth for r in self.requests), Fraction(0))

    @property
    def gpu(self) -> bool:
        return any(c.gpu for r in self.requests for c in r.choices)

    @property
    def title(self) -> str:
        return f'claim "{self.pod_claim.name}" ({self.pod_claim.source})'


@dataclass(frozen=True, slots=True)
class PodClaimGpus:
    """The DRA claims of one pod spec."""

    claims: tuple[ClaimGpus, ...] = ()

    @property
    def asks_gpus(self) -> bool:
        """GPUs asked through a claim, or a claim that may ask for some (unresolved)."""
        return any(c.gpu or c.unresolved is not None for c in self.claims)

    @property
    def worth(self) -> Fraction:
        return sum((c.worth for c in self.claims), Fraction(0))

    @property
    def unresolved(self) -> tuple[ClaimGpus, ...]:
        return tuple(c for c in self.claims if c.unresolved is not None)

    def per_class(self) -> dict[str, int]:
        """Devices per class name, for claims resolved to one class per choice (the most
        any choice of a request takes)."""
        found: dict[str, int] = {}
        for claim in self.claims:
            for request in claim.requests:
                best: dict[str, int] = {}
                for choice in request.choices:
                    if choice.gpu and len(choice.classes) >= 1:
                        name = choice.classes[0].name
                        best[name] = max(best.get(name, 0), choice.count)
                for name, count in best.items():
                    found[name] = found.get(name, 0) + count
        return found


NO_CLAIMS = PodClaimGpus()


def pod_claim_gpus(
    policy: TenantPolicy, spec: Mapping[str, Any], namespace: str, lookup: DraLookup
) -> PodClaimGpus:
    """The claims of a pod spec in `namespace`, each resolved to the policy's classes."""
    refs = pod_claims(spec)
    if not refs:
        return NO_CLAIMS
    return PodClaimGpus(tuple(_claim(policy, ref, namespace, lookup) for ref in refs))


def claim_spec_gpus(
    policy: TenantPolicy, pod_claim: PodClaim, spec: ClaimSpec, lookup: DraLookup
) -> ClaimGpus:
    """A claim's requests resolved (a ResourceClaimTemplate or ResourceClaim judged as it is
    created, before any pod names it)."""
    requests = []
    for request in spec.requests:
        choices = []
        for choice in request.choices:
            resolved = resolve_choice(policy, choice, lookup)
            if isinstance(resolved, str):
                return ClaimGpus(pod_claim, unresolved=_named(pod_claim, resolved))
            choices.append(resolved)
        requests.append(RequestGpus(request, tuple(choices)))
    if spec.problems:
        return ClaimGpus(pod_claim, unresolved=_named(pod_claim, "; ".join(spec.problems)))
    return ClaimGpus(pod_claim, tuple(requests))


def _claim(policy: TenantPolicy, ref: PodClaim, namespace: str, lookup: DraLookup) -> ClaimGpus:
    if ref.claim_name is not None:
        spec = lookup.claim(namespace, ref.claim_name)
        missing = f'ResourceClaim "{ref.claim_name}" is not found in namespace "{namespace}"'
        todo = "create the ResourceClaim first"
    else:
        assert ref.template_name is not None  # pod_claims keeps only claims naming one
        spec = lookup.template(namespace, ref.template_name)
        missing = (
            f'ResourceClaimTemplate "{ref.template_name}" is not found in namespace "{namespace}"'
        )
        todo = "create the ResourceClaimTemplate before the workload that names it"
    if spec is None:
        return ClaimGpus(
            ref,
            unresolved=(
                f'claim "{ref.name}": {missing}, so the GPUs it asks for cannot be judged; {todo}'
            ),
        )
    return claim_spec_gpus(policy, ref, spec, lookup)


def _named(ref: PodClaim, reason: str) -> str:
    return f'claim "{ref.name}" ({ref.source}): {reason}'


def resolve_choice(
    policy: TenantPolicy, choice: DeviceChoice, lookup: DraLookup
) -> ChoiceGpus | str:
    """The classes a request's devices may be and what it is worth, or why that cannot be
    known (a message naming the request)."""
    if not classes_of_device_class(policy, choice.device_class):
        gpu = _gpu_device_class(policy, choice.device_class, lookup)
        if isinstance(gpu, str):
            return f'request "{choice.name}": {gpu}'
        if not gpu:
            return ChoiceGpus(choice, gpu=False)
        return ChoiceGpus(choice, gpu=True, count=_count_or_one(choice))
    classes = classes_for_request(policy, choice.device_class, choice.selection)
    count = _count(choice, classes)
    if count is None:
        return (
            f'request "{choice.name}" takes every matching device of a node (allocationMode: '
            f"All), a number known only on the node; ask for count: N instead"
        )
    worth = count * max((c.gpu_equivalent for c in classes), default=Fraction(1))
    return ChoiceGpus(choice, gpu=True, classes=classes, count=count, worth=worth)


def _count(choice: DeviceChoice, classes: tuple[GpuClass, ...]) -> int | None:
    if choice.mode != ALL:
        return choice.count
    bounds = [c.dra.max_devices_per_node for c in classes if c.dra is not None]
    if not bounds or any(b is None for b in bounds):
        return None
    return max(b for b in bounds if b is not None)


def _count_or_one(choice: DeviceChoice) -> int:
    return choice.count if choice.mode != ALL else 1


def _gpu_device_class(policy: TenantPolicy, name: str, lookup: DraLookup) -> bool | str:
    """Whether a DeviceClass no class of the policy names hands out GPUs; a message when it
    does not exist. Without any DeviceClass read, it is judged by its name."""
    info = lookup.device_class(name)
    if info is None:
        if lookup.knows_device_classes:
            return (
                f'DeviceClass "{name}" does not exist, so what it hands out cannot be judged; '
                "name an existing DeviceClass (kubectl get deviceclasses)"
            )
        return name in KNOWN_GPU_DEVICE_CLASSES
    if info.extended_resource_name is not None and (
        info.extended_resource_name in policy.gpu_resources
        or info.extended_resource_name in KNOWN_GPU_RESOURCES
    ):
        return True
    drivers = info.selection.pinned().get(DRIVER)
    if drivers is None:
        return True  # any driver's devices, GPUs among them
    return bool(drivers & (GPU_DRIVERS | _policy_drivers(policy, lookup)))


def _policy_drivers(policy: TenantPolicy, lookup: DraLookup) -> frozenset[str]:
    """The drivers the DeviceClasses of the policy's classes select."""
    found: set[str] = set()
    for device_class in policy.gpu_device_classes:
        info = lookup.device_class(device_class)
        if info is not None:
            found |= {str(d) for d in info.selection.pinned().get(DRIVER, frozenset())}
    return frozenset(found)
