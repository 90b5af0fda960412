"""Demand for GPUs asked through DRA claims: of Kueue Workloads' pod sets, and of the Pods of
tenants without Workloads (Volcano PodGroups' pods, plain Pods), as `quota.demand` reads
resources from the first source a tenant has.

A pod set's claims name ResourceClaimTemplates (a claim per pod: counted `count` times) or
ResourceClaims (shared: counted once per Workload); a Pod's, a template once per Pod and a
ResourceClaim once however many Pods share it (usage while any of them is bound). Volcano
counts a PodGroup's `minResources` from its pods' container resources, not their claims, so a
group's claims are counted from its pods. Each request counts for the first class
(policy order) its DeviceClass and selectors may get; a `firstAvailable` request for its first
subrequest the policy covers (the scheduler's preference); `allocationMode: All` for the
class's `dra.maxDevicesPerNode`, or not at all without it. Templates and claims come from the
snapshot's DRA objects; a claim that names one not in it is not counted (and reported).

Kueue counts DRA devices under the resource names of its `deviceClassMappings`: where a class's
queue resource (`resource`, or `dra.kueueResource`) is that name and the Workload's admission
already counts it, the claims are not counted again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from quotaguard.kube.dra import ALL, ClaimSpec, DeviceChoice, DraObjects, PodClaim, dra_objects
from quotaguard.policy.dra_classes import classes_for_request
from quotaguard.policy.model import GpuClass, Tenant, TenantPolicy
from quotaguard.quota.cluster import ClusterSnapshot, Pod, PodSet, Workload
from quotaguard.quota.demand import ClassDemand


@dataclass(frozen=True, slots=True)
class DraDemand:
    # tenant -> class -> demand
    demand: Mapping[str, Mapping[str, ClassDemand]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


def claim_units(policy: TenantPolicy, spec: ClaimSpec) -> dict[str, int]:
    """Class name -> devices a claim made from `spec` takes."""
    found: dict[str, int] = {}
    for request in spec.requests:
        for choice in request.choices:
            counted = _choice_units(policy, choice)
            if counted is not None:
                gpu_class, units = counted
                found[gpu_class.name] = found.get(gpu_class.name, 0) + units
                break  # firstAvailable: the first the policy covers
    return found


def _choice_units(policy: TenantPolicy, choice: DeviceChoice) -> tuple[GpuClass, int] | None:
    classes = classes_for_request(policy, choice.device_class, choice.selection)
    if not classes:
        return None
    gpu_class = classes[0]
    if choice.mode == ALL:
        bound = gpu_class.dra.max_devices_per_node if gpu_class.dra else None
        return (gpu_class, bound) if bound else None
    units = choice.count * (gpu_class.replicas if gpu_class.shared else 1)
    return gpu_class, units


def dra_demand(policy: TenantPolicy, snapshot: ClusterSnapshot) -> DraDemand:
    """Usage (quota reserved) and pending demand of the claims of unfinished Workloads, and of
    the Pods of tenants without any."""
    lookup = dra_objects(list(snapshot.dra_objects))
    usage: dict[tuple[str, str], int] = {}
    pending: dict[tuple[str, str], int] = {}
    problems: list[str] = []
    for workload, tenant in _workloads_by_tenant(policy, snapshot):
        target = usage if workload.holds_quota else pending
        for name, units in _workload_units(policy, workload, lookup, problems).items():
            target[tenant.name, name] = target.get((tenant.name, name), 0) + units
    _pods_claims(policy, snapshot, lookup, usage, pending, problems)
    demand: dict[str, dict[str, ClassDemand]] = {}
    for owner, name in sorted(usage.keys() | pending.keys()):
        demand.setdefault(owner, {})[name] = ClassDemand(
            usage.get((owner, name), 0), pending.get((owner, name), 0)
        )
    return DraDemand(demand, tuple(problems))


def _workloads_by_tenant(
    policy: TenantPolicy, snapshot: ClusterSnapshot
) -> Iterator[tuple[Workload, Tenant]]:
    """Unfinished Workloads with their tenant: of the ClusterQueue holding their quota, else
    of their namespace."""
    for workload in snapshot.workloads:
        if workload.finished or policy.exempt(workload.namespace):
            continue
        queue = workload.cluster_queue if workload.holds_quota else None
        tenant = (policy.tenant_of_queue(queue) if queue else None) or policy.tenant_of(
            workload.namespace
        )
        if tenant is not None:
            yield workload, tenant


def _pods_claims(
    policy: TenantPolicy,
    snapshot: ClusterSnapshot,
    lookup: DraObjects,
    usage: dict[tuple[str, str], int],
    pending: dict[tuple[str, str], int],
    problems: list[str],
) -> None:
    """Tally the claims of active Pods of tenants without Workloads."""
    # their demand `quota.demand` reads from Workloads: their Pods are not counted again
    with_workloads = {tenant.name for _, tenant in _workloads_by_tenant(policy, snapshot)}
    # a shared ResourceClaim: (namespace, name) -> (tenant, units, held by a bound pod)
    shared: dict[tuple[str, str], tuple[str, dict[str, int], bool]] = {}
    for pod in snapshot.pods:
        if not pod.claims or not pod.active or policy.exempt(pod.namespace):
            continue
        tenant = policy.tenant_of(pod.namespace)
        if tenant is None or tenant.name in with_workloads:
            continue
        target = usage if pod.bound else pending
        for claim, units in _pod_claim_units(policy, pod, lookup, problems):
            if claim.claim_name is None:
                _add(target, tenant.name, units)
                continue
            key = (pod.namespace, claim.claim_name)
            _, _, bound = shared.get(key, (tenant.name, units, False))
            shared[key] = (tenant.name, units, bound or pod.bound)
    for owner, units, bound in shared.values():
        _add(usage if bound else pending, owner, units)


def _pod_claim_units(
    policy: TenantPolicy, pod: Pod, lookup: DraObjects, problems: list[str]
) -> Iterator[tuple[PodClaim, dict[str, int]]]:
    """Each claim of `pod` the snapshot resolves, with the devices per class it takes."""
    for claim in pod.claims:
        if claim.claim_name is not None:
            spec = lookup.claim(pod.namespace, claim.claim_name)
        else:
            assert claim.template_name is not None
            spec = lookup.template(pod.namespace, claim.template_name)
        if spec is None:
            problems.append(
                f"Pod {pod.namespace}/{pod.name}: {claim.source} is not in the snapshot; "
                "its GPUs are not counted"
            )
            continue
        yield claim, claim_units(policy, spec)


def _add(target: dict[tuple[str, str], int], tenant: str, units: Mapping[str, int]) -> None:
    for name, count in units.items():
        target[tenant, name] = target.get((tenant, name), 0) + count


def _workload_units(
    policy: TenantPolicy, workload: Workload, lookup: DraObjects, problems: list[str]
) -> dict[str, int]:
    counted = {r for a in workload.assignments for r in a.usage}
    found: dict[str, int] = {}
    for pod_set in workload.pod_sets:
        for name, units in _pod_set_units(policy, workload, pod_set, lookup, problems).items():
            if policy.classes_by_name[name].resource in counted:
                continue  # Kueue's admission counts it under its deviceClassMappings name
            found[name] = found.get(name, 0) + units
    return found


def _pod_set_units(
    policy: TenantPolicy,
    workload: Workload,
    pod_set: PodSet,
    lookup: DraObjects,
    problems: list[str],
) -> dict[str, int]:
    found: dict[str, int] = {}
    for claim in pod_set.claims:
        if claim.claim_name is not None:
            spec, times = lookup.claim(workload.namespace, claim.claim_name), 1
        else:
            assert claim.template_name is not None
            spec, times = lookup.template(workload.namespace, claim.template_name), pod_set.count
        if spec is None:
            problems.append(
                f"Workload {workload.namespace}/{workload.name}: {claim.source} of pod set "
                f'"{pod_set.name}" is not in the snapshot; its GPUs are not counted'
            )
            continue
        for name, units in claim_units(policy, spec).items():
            found[name] = found.get(name, 0) + units * times
    return found


def with_dra_demand(
    demand: Mapping[str, Mapping[str, ClassDemand]], dra: DraDemand
) -> dict[str, dict[str, ClassDemand]]:
    """`demand_of`'s demand with the claims' added: the hook for `plan` and the controller."""
    merged = {tenant: dict(classes) for tenant, classes in demand.items()}
    for tenant, classes in dra.demand.items():
        for name, extra in classes.items():
            have = merged.setdefault(tenant, {}).get(name, ClassDemand())
            merged[tenant][name] = ClassDemand(
                have.usage + extra.usage, have.pending + extra.pending, have.discounted
            )
    return merged
