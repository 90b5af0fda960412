"""The tenant policy (quotaguard.dev/v1alpha1 TenantPolicy) as typed, immutable values.

Field names follow the YAML contract (camelCase aliases); unknown fields are errors so that
a typo never passes silently. Derived values (whole-GPU equivalents, lookups by resource and
namespace) are computed once when the policy is built.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from fractions import Fraction
from functools import cached_property, lru_cache
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    model_validator,
)

from quotaguard.kube.cel import AttributeValue, Condition, Selection, read_selector
from quotaguard.kube.kinds import BY_ID as _KINDS_BY_ID
from quotaguard.kube.names import (
    DRA_EXTENDED_RESOURCE_PREFIX,
    GPU_RESOURCE,
    KUEUE_CONTROLLER,
    MIG_PREFIX,
    SHARED_GPU_RESOURCE,
)
from quotaguard.kube.quantity import QuantityError, format_bytes, format_duration, parse_duration
from quotaguard.kube.quantity import parse_quantity as _parse_quantity
from quotaguard.policy.catalogue import whole_gpu_slices
from quotaguard.policy.fleet import Fleet
from quotaguard.policy.gpumodels import gpu_model
from quotaguard.policy.sections import Scheduling, Showback
from quotaguard.policy.strict import Strict

API_VERSION = "quotaguard.dev/v1alpha1"
KIND = "TenantPolicy"
BEST_FIT = "best-fit"
DEFAULT_EXEMPT = ("kube-system", "quotaguard-system")
WHOLE_GPU_SLICES = 7
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
CLASS_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
RESOURCE_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
# How Volcano names a DRA DeviceClass among a Queue's resources; a DRA class without a
# `resource` of its own is counted under this name.
DEVICE_CLASS_RESOURCE_PREFIX = "deviceclass/"
# a resource name Kueue accepts in deviceClassMappings: a DNS label, or prefix/label
KUEUE_RESOURCE_NAME = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def _bytes(value: object) -> int:
    try:
        amount = _parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(f"{exc}; use a memory size such as 10Gi") from exc
    if amount <= 0:
        raise ValueError("memory must be positive")
    return int(amount)


def _seconds(value: object) -> float:
    try:
        seconds = parse_duration(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc
    if seconds <= 0:
        raise ValueError("duration must be positive")
    return seconds


def _owner_kinds(value: object) -> object:
    if isinstance(value, dict):
        for key in value:
            if key not in _KINDS_BY_ID:
                known = ", ".join(_KINDS_BY_ID)
                raise ValueError(f"{key!r} is not a workload kind; the keys are: {known}")
    return value


Bytes = Annotated[int, BeforeValidator(_bytes), PlainSerializer(format_bytes, return_type=str)]
Seconds = Annotated[
    float, BeforeValidator(_seconds), PlainSerializer(format_duration, return_type=str)
]


_Strict = Strict


class DraDevices(_Strict):
    """The devices of a GPU class under Dynamic Resource Allocation: those of a DeviceClass,
    narrowed by a CEL `selector` and exact `attributes` (both optional, both must hold)."""

    device_class_name: Annotated[str, Field(pattern=DNS_SUBDOMAIN, max_length=253)]
    # A conjunction (&&) of `device.attributes["<domain>"].<name> == <value>` (or `in [...]`)
    # and `device.driver == "..."` terms; `quotaguard validate` refuses anything else.
    selector: Annotated[str | None, Field(min_length=1)] = None
    # qualified attribute name (`gpu.nvidia.com/profile`) -> value
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)
    # Devices of the class one node offers at most: bounds a request of allocationMode All.
    max_devices_per_node: Annotated[int | None, Field(ge=1)] = None
    # The resource Kueue counts the DeviceClass's devices under (the `name` of its
    # deviceClassMappings entry); the controller reads it from Kueue's Configuration when
    # not given here. ClusterQueues are written under it.
    kueue_resource: Annotated[str | None, Field(pattern=KUEUE_RESOURCE_NAME, max_length=253)] = None
    # The extended resource the DeviceClass serves through DRA (its own `extendedResourceName`,
    # or the implicit `deviceclass.resource.kubernetes.io/<DeviceClass>`): pods may ask for it
    # in their containers' resources, the API server builds the claim, and a rewrite may put
    # `nvidia.com/gpu: N` on it.
    extended_resource_name: Annotated[str | None, Field(pattern=RESOURCE_NAME)] = None

    @cached_property
    def selection(self) -> Selection:
        """What the selector and attributes pin, as one selection."""
        from_selector = read_selector(self.selector) if self.selector else Selection()
        pinned = tuple(
            Condition(name, frozenset({value})) for name, value in self.attributes.items()
        )
        return Selection(from_selector.conditions + pinned, from_selector.unread)


class GpuClass(_Strict):
    """One GPU shape the cluster offers: a whole GPU, a MIG slice or a shared GPU, as an
    extended resource of a device plugin, as DRA devices of a DeviceClass, or both."""

    name: Annotated[str, Field(pattern=CLASS_NAME, max_length=63)]
    # The extended resource pods ask for (a device plugin's, or a DeviceClass's
    # extendedResourceName); None for a class only DRA reaches.
    resource_name: Annotated[str | None, Field(alias="resource", pattern=RESOURCE_NAME)] = None
    dra: DraDevices | None = None
    flavor_name: Annotated[str | None, Field(alias="flavor", pattern=CLASS_NAME)] = None
    memory: Bytes
    slices: Annotated[int, Field(ge=1, le=WHOLE_GPU_SLICES)] = WHOLE_GPU_SLICES
    node_selector: dict[str, str] = Field(default_factory=dict)
    sharing: Literal["none", "time-slicing", "mps"] = "none"
    replicas: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="after")
    def _backed(self) -> GpuClass:
        if self.resource_name is None and self.dra is None:
            raise ValueError(
                "a GPU class needs a resource (an extended resource such as nvidia.com/gpu), "
                "dra (a DeviceClass), or both"
            )
        return self

    @property
    def resource(self) -> str:
        """The resource the class is counted under in queues and a rewrite puts on a
        container: its extended resource, else the one its DeviceClass serves through DRA
        (`dra.extendedResourceName`), else the name Kueue counts its DeviceClass under
        (`dra.kueueResource`), else `deviceclass/<DeviceClass>` (the name Volcano counts DRA
        devices by)."""
        if self.resource_name is not None:
            return self.resource_name
        assert self.dra is not None  # _backed
        if self.dra.extended_resource_name is not None:
            return self.dra.extended_resource_name
        if self.dra.kueue_resource is not None:
            return self.dra.kueue_resource
        return DEVICE_CLASS_RESOURCE_PREFIX + self.dra.device_class_name

    @property
    def flavor(self) -> str:
        return self.flavor_name or self.name

    @property
    def shared(self) -> bool:
        return self.sharing != "none"

    @cached_property  # admission's best-fit asks it of every class, per request
    def mig(self) -> bool:
        return self.resource.startswith(MIG_PREFIX)

    @cached_property
    def gpu_equivalent(self) -> Fraction:
        """Whole GPUs one unit of this class is worth (per replica when shared): slices/7, or
        of the slices of the class's GPU when the catalogue knows it has another number (a
        2g.48gb of an RTX PRO 6000 is half of one: it has four)."""
        whole = WHOLE_GPU_SLICES
        if self.mig:
            whole = whole_gpu_slices(self.resource, gpu_model(self.node_selector))
        share = Fraction(min(self.slices, whole), whole)
        return share / self.replicas if self.shared else share


class ClassQuota(_Strict):
    guaranteed: Annotated[int, Field(ge=0)] = 0
    max: Annotated[int | None, Field(ge=0)] = None


class RewriteCondition(_Strict):
    """All given keys must hold; an empty condition matches every request."""

    gpus: Annotated[int | None, Field(ge=1)] = None
    memory_at_most: Bytes | None = None
    memory_at_least: Bytes | None = None
    priority_class_names: list[str] | None = None
    match_labels: dict[str, str] | None = None

    @property
    def empty(self) -> bool:
        return all(value is None for value in self.model_dump().values())


def _target(value: object) -> object:
    """A class name, `best-fit`, or a list of classes on one resource; a list of one class is
    that class (`to: [h100]` is `to: h100`)."""
    if isinstance(value, list | tuple):
        if not value:
            raise ValueError("an empty list names no GPU class; name one class or several")
        if not all(isinstance(name, str) and name for name in value):
            raise ValueError("every entry of a list of classes must be a class name")
        if len(value) == 1:
            return value[0]
        return tuple(value)
    if isinstance(value, str) and not value:
        raise ValueError("a rewrite target must name a GPU class")
    if not isinstance(value, str):
        raise ValueError("must be a GPU class, best-fit, or a list of classes on one resource")
    return value


class RewriteRule(_Strict):
    when: RewriteCondition = Field(default_factory=RewriteCondition)
    # a tuple: several classes on one resource, the flavor left to Kueue (flavor fungibility)
    to: Annotated[str | tuple[str, ...], BeforeValidator(_target)]

    @property
    def classes(self) -> tuple[str, ...]:
        """The class names the rule targets (`best-fit` stands for itself)."""
        return (self.to,) if isinstance(self.to, str) else self.to

    @property
    def fungible(self) -> bool:
        """Whether Kueue picks the class among several (no nodeSelector is set)."""
        return not isinstance(self.to, str)


class FlavorFungibility(_Strict):
    """Kueue's ClusterQueue `spec.flavorFungibility`: whether a workload tries the next flavor
    of a resource before borrowing or preempting in the one it is looking at."""

    when_can_borrow: Literal["Borrow", "MayStopSearch", "TryNextFlavor"] = "MayStopSearch"
    when_can_preempt: Literal["Preempt", "MayStopSearch", "TryNextFlavor"] = "TryNextFlavor"

    @property
    def borrow_next(self) -> bool:
        return self.when_can_borrow == "TryNextFlavor"

    @property
    def preempt_next(self) -> bool:
        return self.when_can_preempt == "TryNextFlavor"


class Tenant(_Strict):
    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    namespaces: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    queue_name: Annotated[str | None, Field(alias="queue", pattern=DNS_LABEL)] = None
    local_queue_name: Annotated[str | None, Field(alias="localQueue", pattern=DNS_LABEL)] = None
    # Queues (LocalQueues with kueue) the tenant's workloads may name besides its own.
    extra_queues: list[Annotated[str, Field(pattern=DNS_LABEL)]] = Field(default_factory=list)
    weight: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    max_gpus_per_pod: Annotated[float | None, Field(alias="maxGPUsPerPod", gt=0)] = None
    allowed_classes: list[str] | None = None
    quota: dict[str, ClassQuota] = Field(default_factory=dict)
    rewrite: list[RewriteRule] = Field(default_factory=list)
    # written to the tenant's ClusterQueue when given; unset, Kueue's defaults hold
    flavor_fungibility: FlavorFungibility | None = None

    @property
    def queue(self) -> str:
        return self.queue_name or self.name

    @property
    def local_queue(self) -> str:
        return self.local_queue_name or self.queue

    @property
    def queues(self) -> tuple[str, ...]:
        """Every queue the tenant's workloads may name: its own and its `extraQueues`."""
        return tuple(dict.fromkeys([self.queue, self.local_queue, *self.extra_queues]))

    def owns(self, namespace: str) -> bool:
        return any(fnmatch.fnmatchcase(namespace, pattern) for pattern in self.namespaces)

    def allows(self, class_name: str) -> bool:
        return self.allowed_classes is None or class_name in self.allowed_classes


# What the quota controller (and the geometry planner) do with their plan.
Mode = Literal["apply", "recommend", "off"]


def _percent(value: object) -> object:
    """A percentage as a number (5) or a string with a percent sign ("5%")."""
    if isinstance(value, str) and value.strip().endswith("%"):
        return value.strip()[:-1].strip()
    return value


Percent = Annotated[float, BeforeValidator(_percent), Field(ge=0, le=100, allow_inf_nan=False)]
# XIDs the NVIDIA device plugin does not treat as a GPU failure (application errors and the like).
DEVICE_PLUGIN_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)


class GpuHealth(_Strict):
    """Which DCGM telemetry and node conditions take a GPU out of capacity, and for how long."""

    # Every XID is critical except these; `criticalXids`, when given, lists the critical ones.
    ignored_xids: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=lambda: list(DEVICE_PLUGIN_IGNORED_XIDS)
    )
    critical_xids: list[Annotated[int, Field(ge=1)]] | None = None
    # Node conditions (node-problem-detector, NVSentinel) that take all GPUs of a node out.
    node_conditions: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=lambda: ["SysLogsXIDError", "GpuMemWatch"]
    )
    # A faulty GPU counts again only after this long without a fault.
    quiet_period: Seconds = 600.0

    def critical_xid(self, xid: int) -> bool:
        if xid <= 0:
            return False
        if self.critical_xids is not None:
            return xid in self.critical_xids
        return xid not in self.ignored_xids


class Rebalance(_Strict):
    mode: Mode = "recommend"
    interval: Seconds = 60.0
    demand_window: Seconds = 900.0
    usage_half_life: Seconds = 86400.0
    min_change: Annotated[int, Field(ge=0)] = 1
    max_step_percent: Annotated[float, Field(gt=0, le=100)] = 25.0
    usable_capacity_percent: Annotated[float, Field(gt=0, le=100)] = 100.0
    # How far usage history may move a tenant's weight away from its base weight, both ways.
    max_weight_factor: Annotated[float, Field(ge=1, le=100)] = 2.0
    # Nodes carrying one of these taint keys or labels (a GPU health checker's mark for XID or
    # ECC errors) are not counted as capacity.
    faulty_node_taints: list[str] = Field(default_factory=lambda: ["nvidia.com/gpu.unhealthy"])
    faulty_node_labels: dict[str, str] = Field(default_factory=dict)
    manage_queues: bool = False
    # Queue fields another manager server-side applied (Argo CD, Flux) are reported as a
    # conflict and left alone; true takes them over.
    force_conflicts: bool = False
    # GPU telemetry (DCGM through Prometheus): faulty GPUs, and allocations idle below
    # `idleBelow` percent for `idleFor`; `discount` stops counting idle-held GPUs above the
    # guarantee as demand.
    gpu_health: GpuHealth = Field(default_factory=GpuHealth)
    idle_demand: Literal["count", "discount"] = "count"
    idle_below: Percent = 5.0
    idle_for: Seconds = 1800.0
    # Lend the guaranteed quota a tenant neither uses nor waits for (lendingLimit up to its
    # nominal quota); the tenant takes it back by Kueue's reclaim when its demand returns.
    lend_idle_guarantees: bool = False


PERCENT = r"^([1-9][0-9]?|100)%$"


class SharingConfig(_Strict):
    """A device plugin time-slicing config (the key the node label
    `nvidia.com/device-plugin.config` names): each whole GPU offered `replicas` times."""

    replicas: Annotated[int, Field(ge=2, le=64)]
    # true: offered as nvidia.com/gpu.shared (the device plugin's renameByDefault)
    rename_by_default: bool = True

    @property
    def resource(self) -> str:
        return SHARED_GPU_RESOURCE if self.rename_by_default else GPU_RESOURCE


class GeometryPool(_Strict):
    """Nodes whose MIG layout or GPU sharing follows demand, and the layouts they may take."""

    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    node_selector: dict[str, str] = Field(default_factory=dict)
    # The catalogue's GPU model (A100-80GB, ...); default: from nodeSelector's gpu.product.
    gpu: str | None = None
    configs: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    max_changing: int | Annotated[str, Field(pattern=PERCENT)] = 1
    min_dwell: Seconds = 1800.0
    drain: Literal["wait", "idle-only"] = "idle-only"
    # drain: wait gives up (and uncordons) when the GPU pods have not ended by then
    drain_timeout: Seconds = 3600.0

    def changing_allowed(self, pool_size: int) -> int:
        """Nodes of the pool that may be changing at once (a percentage rounds down, to 1)."""
        if isinstance(self.max_changing, int):
            return max(1, self.max_changing)
        return max(1, pool_size * int(self.max_changing.rstrip("%")) // 100)


class Geometry(_Strict):
    mode: Mode = "recommend"
    # How long a node serves nothing while mig-manager applies a layout (the simulator's figure)
    reconfigure_time: Seconds = 300.0
    # A change not reported success by then counts as failed
    change_timeout: Seconds = 1800.0
    mig_configs: dict[str, Any] | None = None  # mig-parted format: version, mig-configs
    sharing_configs: dict[str, SharingConfig] = Field(default_factory=dict)
    pools: list[GeometryPool] = Field(default_factory=list)


class Metadata(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]


class PolicySpec(_Strict):
    backend: Literal["kueue", "volcano"] = "kueue"
    cohort: Annotated[str | None, Field(pattern=DNS_LABEL)] = None
    unmatched_namespaces: Literal["allow", "deny"] = "allow"
    exempt_namespaces: list[str] = Field(default_factory=lambda: list(DEFAULT_EXEMPT))
    gpu_classes: Annotated[list[GpuClass], Field(min_length=1)]
    tenants: list[Tenant] = Field(default_factory=list)
    rebalance: Rebalance = Field(default_factory=Rebalance)
    geometry: Geometry | None = None
    showback: Showback | None = None
    scheduling: Scheduling | None = None
    # worker clusters of a MultiKueue fleet; tenants' quotas then hold for the whole fleet
    fleet: Fleet | None = None
    # Usernames (`system:serviceaccount:NS:NAME`) of operators whose owner references admission
    # believes, besides kube-controller-manager's (see quotaguard.admission.owners).
    trusted_controllers: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    # Owner kind -> the usernames of its controller, replacing quotaguard's default for that
    # kind (quotaguard.admission.owners.DEFAULT_OWNER_CONTROLLERS).
    owner_controllers: Annotated[
        dict[str, list[Annotated[str, Field(min_length=1)]]], BeforeValidator(_owner_kinds)
    ] = Field(default_factory=dict)
    # Who may lift Kueue's hold (gate, suspend) off a GPU workload (see quotaguard.admission.holds).
    kueue_controllers: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] = (
        Field(default_factory=lambda: [KUEUE_CONTROLLER])
    )
    # schedulerNames GPU workloads may use besides the backend's (default-scheduler / volcano).
    allowed_schedulers: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)


# Namespaces whose tenant and exemption are remembered per policy (least recently asked go).
NAMESPACE_MEMO = 10_000


class TenantPolicy(_Strict):
    api_version: Literal["quotaguard.dev/v1alpha1"]
    kind: Literal["TenantPolicy"]
    metadata: Metadata
    spec: PolicySpec

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def cohort(self) -> str:
        return self.spec.cohort or self.metadata.name

    @property
    def volcano_parent(self) -> str | None:
        """The Volcano parent queue of every tenant queue: the policy's `cohort` when it names
        one (unset, Volcano queues stay where they are, rather than under a queue named after
        the policy that nobody created)."""
        return self.spec.cohort if self.spec.backend == "volcano" else None

    @cached_property
    def classes_by_name(self) -> dict[str, GpuClass]:
        return {gpu_class.name: gpu_class for gpu_class in self.spec.gpu_classes}

    @cached_property
    def classes_by_resource(self) -> dict[str, list[GpuClass]]:
        """Classes by the extended resources pods ask for, a device plugin's or one a
        DeviceClass serves through DRA (classes only claims reach have none)."""
        found: dict[str, list[GpuClass]] = {}
        for gpu_class in self.spec.gpu_classes:
            if gpu_class.resource_name is not None:
                found.setdefault(gpu_class.resource_name, []).append(gpu_class)
        for resource, device_class in self.served_resources.items():
            classes = found.setdefault(resource, [])
            classes += [
                c
                for c in self.dra_classes
                if c.dra and c.dra.device_class_name == device_class and c not in classes
            ]
        return found

    @cached_property
    def served_resources(self) -> dict[str, str]:
        """Extended resources the policy's DeviceClasses serve through DRA -> the DeviceClass:
        each one's implicit `deviceclass.resource.kubernetes.io/<DeviceClass>`, and the names
        classes declare (`dra.extendedResourceName`). A container asking for one gets devices
        of the DeviceClass, of any of its classes, as a claim without selectors would."""
        found = {DRA_EXTENDED_RESOURCE_PREFIX + c: c for c in sorted(self.gpu_device_classes)}
        for gpu_class in self.dra_classes:
            assert gpu_class.dra is not None  # dra_classes
            served = gpu_class.dra.extended_resource_name
            if served is not None:
                found.setdefault(served, gpu_class.dra.device_class_name)
        return found

    @cached_property
    def dra_classes(self) -> tuple[GpuClass, ...]:
        """The classes backed by a DeviceClass, in policy order."""
        return tuple(c for c in self.spec.gpu_classes if c.dra is not None)

    @cached_property
    def gpu_device_classes(self) -> frozenset[str]:
        """Every DeviceClass a class of the policy names."""
        return frozenset(c.dra.device_class_name for c in self.dra_classes if c.dra)

    @cached_property
    def gpu_resources(self) -> frozenset[str]:
        """Every resource name that counts as a GPU: the classes' (those pods ask for and those
        queues count DRA devices under) and the plain one."""
        queued = {gpu_class.resource for gpu_class in self.spec.gpu_classes}
        return frozenset(self.classes_by_resource) | queued | {GPU_RESOURCE}

    @cached_property
    def tenants_by_name(self) -> dict[str, Tenant]:
        return {tenant.name: tenant for tenant in self.spec.tenants}

    # Namespace names come from the cluster, and anyone who may create namespaces adds more:
    # the memos keep the most recently asked ones (lru_cache is bounded, thread-safe and in the
    # standard library, so no cache package is needed for this).
    @cached_property
    def _exempt_memo(self) -> Callable[[str], bool]:
        patterns = tuple(self.spec.exempt_namespaces)
        return lru_cache(maxsize=NAMESPACE_MEMO)(
            lambda namespace: any(fnmatch.fnmatchcase(namespace, p) for p in patterns)
        )

    @cached_property
    def _tenant_memo(self) -> Callable[[str], Tenant | None]:
        tenants = tuple(self.spec.tenants)
        return lru_cache(maxsize=NAMESPACE_MEMO)(
            lambda namespace: next((t for t in tenants if t.owns(namespace)), None)
        )

    def exempt(self, namespace: str) -> bool:
        """Whether admission leaves the namespace alone (memoised; asked on every request)."""
        return self._exempt_memo(namespace)

    def tenant_of(self, namespace: str) -> Tenant | None:
        """The first tenant whose namespaces match (memoised)."""
        return self._tenant_memo(namespace)

    @cached_property
    def _tenants_by_queue(self) -> dict[str, Tenant]:
        found: dict[str, Tenant] = {}
        for tenant in self.spec.tenants:  # the first tenant naming a queue owns it
            found.setdefault(tenant.queue, tenant)
            found.setdefault(tenant.local_queue, tenant)
        return found

    def tenant_of_queue(self, queue: str) -> Tenant | None:
        """The first tenant whose queue or LocalQueue this is (looked up once per workload of
        every interval: a scan of 300 tenants per workload was most of a plan's time)."""
        return self._tenants_by_queue.get(queue)

    def class_of_resource(self, resource: str, node_labels: dict[str, str]) -> GpuClass | None:
        """The class a node's resource counts for: the one whose nodeSelector it matches."""
        candidates = self.classes_by_resource.get(resource, [])
        for gpu_class in candidates:
            if all(node_labels.get(k) == v for k, v in gpu_class.node_selector.items()):
                return gpu_class
        return None


_GLOB_SPECIAL = re.compile(r"[*?\[]")


def is_glob(pattern: str) -> bool:
    return _GLOB_SPECIAL.search(pattern) is not None
