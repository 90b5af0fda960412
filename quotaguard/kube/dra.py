"""Dynamic Resource Allocation objects (resource.k8s.io/v1) as plain typed values.

What a pod's `spec.resourceClaims` names, what a ResourceClaim or ResourceClaimTemplate asks
for (each request `exactly` or as `firstAvailable` subrequests, with its DeviceClass, selectors,
allocation mode and count), what a DeviceClass selects, and the devices a ResourceSlice
publishes. Parsing only, defensively: a field of the wrong type is read as absent, and a
request that cannot be read is kept as a problem to report, never dropped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from quotaguard.kube.cel import AttributeValue, Selection, read_selectors
from quotaguard.kube.quantity import QuantityError, parse_quantity
from quotaguard.kube.values import mapping

RESOURCE_GROUP = "resource.k8s.io"
CLAIM_KIND = "ResourceClaim"
TEMPLATE_KIND = "ResourceClaimTemplate"
DEVICE_CLASS_KIND = "DeviceClass"
SLICE_KIND = "ResourceSlice"
TAINT_RULE_KIND = "DeviceTaintRule"  # resource.k8s.io/v1beta2 (beta and off by default in 1.36)
EXACT_COUNT = "ExactCount"
ALL = "All"
# Taint effects that keep new claims off a device (NoExecute also evicts the pods using it).
BLOCKING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

AllocationMode = Literal["ExactCount", "All"]


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _string(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def is_resource_kind(obj: Mapping[str, Any], kind: str) -> bool:
    """Whether `obj` is a resource.k8s.io object of `kind` (any version)."""
    api_version = obj.get("apiVersion")
    return (
        obj.get("kind") == kind
        and isinstance(api_version, str)
        and api_version.split("/")[0] == RESOURCE_GROUP
    )


def is_dra_kind(obj: Mapping[str, Any]) -> bool:
    """A ResourceSlice, DeviceClass, ResourceClaim, ResourceClaimTemplate or DeviceTaintRule."""
    kinds = (SLICE_KIND, DEVICE_CLASS_KIND, CLAIM_KIND, TEMPLATE_KIND, TAINT_RULE_KIND)
    return obj.get("kind") in kinds and (is_resource_kind(obj, str(obj.get("kind"))))


@dataclass(frozen=True, slots=True)
class DeviceChoice:
    """One way to satisfy a request: an `exactly` request, or one `firstAvailable` subrequest.
    `name` is `request` or `request/subrequest`, as the scheduler names the result."""

    name: str
    device_class: str
    selection: Selection
    mode: AllocationMode = "ExactCount"
    count: int = 1
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One entry of `spec.devices.requests`: its choices in order (one for `exactly`)."""

    name: str
    choices: tuple[DeviceChoice, ...]
    first_available: bool = False


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """What a ResourceClaim (or every claim made from a template) asks for. `problems` are
    requests that could not be read, each worded for the user."""

    requests: tuple[DeviceRequest, ...] = ()
    problems: tuple[str, ...] = ()


def claim_spec(devices: object) -> ClaimSpec:
    """The requests of a ResourceClaimSpec's `devices`, in the v1 form (`exactly` or
    `firstAvailable`) or the v1beta1 one (the request's own `deviceClassName`)."""
    requests: list[DeviceRequest] = []
    problems: list[str] = []
    for index, entry in enumerate(_list(mapping(devices).get("requests"))):
        entry_map = mapping(entry)
        name = _string(entry_map.get("name")) or f"#{index}"
        exactly = entry_map.get("exactly")
        subrequests = entry_map.get("firstAvailable")
        if isinstance(exactly, Mapping):
            choice = _choice(name, exactly, problems)
            if choice is not None:
                requests.append(DeviceRequest(name, (choice,)))
        elif isinstance(subrequests, list) and subrequests:
            choices = []
            for position, sub in enumerate(subrequests):
                sub_map = mapping(sub)
                sub_name = _string(sub_map.get("name")) or f"#{position}"
                found = _choice(f"{name}/{sub_name}", sub_map, problems)
                if found is not None:
                    choices.append(found)
            requests.append(DeviceRequest(name, tuple(choices), first_available=True))
        elif isinstance(entry_map.get("deviceClassName"), str):
            # resource.k8s.io/v1beta1: the request itself is what v1 calls `exactly`
            choice = _choice(name, entry_map, problems)
            if choice is not None:
                requests.append(DeviceRequest(name, (choice,)))
        else:
            problems.append(f'request "{name}" has neither exactly nor firstAvailable')
    return ClaimSpec(tuple(requests), tuple(problems))


def _choice(name: str, spec: Mapping[str, Any], problems: list[str]) -> DeviceChoice | None:
    device_class = _string(spec.get("deviceClassName"))
    if device_class is None:
        problems.append(f'request "{name}" names no deviceClassName')
        return None
    mode = spec.get("allocationMode", EXACT_COUNT)
    if mode not in (EXACT_COUNT, ALL):
        problems.append(f'request "{name}" has allocationMode {mode!r} (ExactCount or All)')
        return None
    count = spec.get("count", 1) if mode == EXACT_COUNT else 0
    if isinstance(count, bool) or not isinstance(count, int) or (mode == EXACT_COUNT and count < 1):
        problems.append(f'request "{name}" has count {count!r}; a positive whole number is asked')
        return None
    return DeviceChoice(
        name=name,
        device_class=device_class,
        selection=read_selectors(_cel_expressions(spec.get("selectors"))),
        mode=mode,
        count=count,
        admin_access=spec.get("adminAccess") is True,
    )


def _cel_expressions(selectors: object) -> list[str]:
    found = []
    for selector in _list(selectors):
        expression = mapping(mapping(selector).get("cel")).get("expression")
        if isinstance(expression, str):
            found.append(expression)
    return found


# resource.k8s.io/v1alpha2 (removed in Kubernetes 1.31): a class and driver parameters, no
# requests; such a claim asks for something no request tells, so it is a problem, not "no GPU".
_OLD_FORM = ("resourceClassName", "parametersRef")


def _spec_of(spec: Mapping[str, Any]) -> ClaimSpec:
    old = [name for name in _OLD_FORM if name in spec]
    if old and "devices" not in spec:
        return ClaimSpec(
            problems=(
                f"it is written in the resource.k8s.io/v1alpha2 form ({', '.join(old)}), which "
                "Kubernetes no longer serves; write its devices.requests (resource.k8s.io/v1)",
            )
        )
    return claim_spec(mapping(spec.get("devices")))


def template_claim_spec(template: Mapping[str, Any]) -> ClaimSpec:
    """What each claim made from a ResourceClaimTemplate asks for (`spec.spec.devices`)."""
    return _spec_of(mapping(mapping(template.get("spec")).get("spec")))


def resource_claim_spec(claim: Mapping[str, Any]) -> ClaimSpec:
    """What a ResourceClaim asks for (`spec.devices`)."""
    return _spec_of(mapping(claim.get("spec")))


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of a pod spec's `resourceClaims`: a claim of its own made from a template,
    or a ResourceClaim shared by name."""

    name: str
    claim_name: str | None = None
    template_name: str | None = None

    @property
    def source(self) -> str:
        if self.claim_name is not None:
            return f'ResourceClaim "{self.claim_name}"'
        if self.template_name is not None:
            return f'ResourceClaimTemplate "{self.template_name}"'
        return "no claim"


def pod_claims(spec: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """The `resourceClaims` of a pod spec that name a claim or a template."""
    found = []
    for entry in _list(spec.get("resourceClaims")):
        entry_map = mapping(entry)
        name = _string(entry_map.get("name"))
        claim = _string(entry_map.get("resourceClaimName"))
        template = _string(entry_map.get("resourceClaimTemplateName"))
        if name is not None and (claim is not None or template is not None):
            found.append(PodClaim(name, claim, template))
    return tuple(found)


def has_pod_claims(spec: Mapping[str, Any]) -> bool:
    return bool(_list(spec.get("resourceClaims")))


def container_claims(spec: Mapping[str, Any]) -> dict[str, list[str]]:
    """Pod claim name -> the containers (`name`, `init:name`) that use it."""
    found: dict[str, list[str]] = {}
    for section in ("initContainers", "containers"):
        for container in _list(spec.get(section)):
            container_map = mapping(container)
            label = _string(container_map.get("name")) or "?"
            if section == "initContainers":
                label = f"init:{label}"
            for claim in _list(mapping(container_map.get("resources")).get("claims")):
                name = _string(mapping(claim).get("name"))
                if name is not None and label not in found.get(name, []):
                    found.setdefault(name, []).append(label)
    return found


@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    """A DeviceClass: what its selectors pin, and the extended resource it serves (if any)."""

    name: str
    selection: Selection = field(default_factory=Selection)
    extended_resource_name: str | None = None


def device_class_info(obj: Mapping[str, Any]) -> DeviceClassInfo | None:
    name = _string(mapping(obj.get("metadata")).get("name"))
    if name is None:
        return None
    spec = mapping(obj.get("spec"))
    return DeviceClassInfo(
        name=name,
        selection=read_selectors(_cel_expressions(spec.get("selectors"))),
        extended_resource_name=_string(spec.get("extendedResourceName")),
    )


class DraLookup(Protocol):
    """Where admission finds the DRA objects a workload names (a cache of the cluster's, or
    the files given to `quotaguard review`)."""

    def template(self, namespace: str, name: str) -> ClaimSpec | None: ...
    def claim(self, namespace: str, name: str) -> ClaimSpec | None: ...
    def device_class(self, name: str) -> DeviceClassInfo | None: ...
    @property
    def knows_device_classes(self) -> bool:
        """Whether DeviceClasses were read at all (else an unlisted one is not "unknown")."""
        ...


@dataclass(frozen=True, slots=True)
class DraObjects:
    """DRA objects held as data: a snapshot of the cluster's or a review's input files."""

    templates: Mapping[tuple[str, str], ClaimSpec] = field(default_factory=dict)
    claims: Mapping[tuple[str, str], ClaimSpec] = field(default_factory=dict)
    device_classes: Mapping[str, DeviceClassInfo] | None = None

    def template(self, namespace: str, name: str) -> ClaimSpec | None:
        return self.templates.get((namespace, name))

    def claim(self, namespace: str, name: str) -> ClaimSpec | None:
        return self.claims.get((namespace, name))

    def device_class(self, name: str) -> DeviceClassInfo | None:
        return None if self.device_classes is None else self.device_classes.get(name)

    @property
    def knows_device_classes(self) -> bool:
        return self.device_classes is not None


NO_DRA_OBJECTS = DraObjects()


def dra_objects(items: list[Any], *, namespace: str | None = None) -> DraObjects:
    """The ResourceClaimTemplates, ResourceClaims and DeviceClasses among some objects (other
    kinds are skipped); `namespace` for objects that do not say theirs."""
    templates: dict[tuple[str, str], ClaimSpec] = {}
    claims: dict[tuple[str, str], ClaimSpec] = {}
    classes: dict[str, DeviceClassInfo] | None = None
    for item in items:
        obj = mapping(item)
        metadata = mapping(obj.get("metadata"))
        name = _string(metadata.get("name"))
        where = _string(metadata.get("namespace")) or namespace or "default"
        if name is None:
            continue
        if is_resource_kind(obj, TEMPLATE_KIND):
            templates[(where, name)] = template_claim_spec(obj)
        elif is_resource_kind(obj, CLAIM_KIND):
            claims[(where, name)] = resource_claim_spec(obj)
        elif is_resource_kind(obj, DEVICE_CLASS_KIND):
            info = device_class_info(obj)
            if info is not None:
                classes = {} if classes is None else classes
                classes[info.name] = info
    return DraObjects(templates, claims, classes)


@dataclass(frozen=True, slots=True)
class CounterUse:
    """The counters a device consumes from one counter set of its pool."""

    counter_set: str
    counters: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One device a ResourceSlice publishes, with what the capacity count needs."""

    driver: str
    pool: str
    name: str
    node: str | None  # None: not local to one node (nodeSelector or allNodes)
    attributes: Mapping[str, AttributeValue]  # qualified names
    consumes: tuple[CounterUse, ...] = ()
    taints: tuple[tuple[str, str], ...] = ()  # (key, effect)

    @property
    def blocked(self) -> bool:
        """Tainted so that no new claim gets it (NoSchedule or NoExecute)."""
        return any(effect in BLOCKING_TAINT_EFFECTS for _, effect in self.taints)


@dataclass(frozen=True, slots=True)
class Pool:
    """A driver's pool as its newest ResourceSlices publish it: devices and counter sets."""

    driver: str
    name: str
    generation: int
    devices: tuple[SliceDevice, ...]
    counter_sets: Mapping[str, Mapping[str, float]]


def pools(slices: list[Any]) -> list[Pool]:
    """The pools of some ResourceSlices, each from the slices of its highest generation (the
    older ones are being replaced). Counter sets may come in slices of their own."""
    newest: dict[tuple[str, str], tuple[int, list[Mapping[str, Any]]]] = {}
    for item in slices:
        spec = mapping(mapping(item).get("spec"))
        driver, pool = _string(spec.get("driver")), mapping(spec.get("pool"))
        pool_name = _string(pool.get("name"))
        generation = pool.get("generation", 0)
        if driver is None or pool_name is None or not isinstance(generation, int):
            continue
        key = (driver, pool_name)
        held = newest.get(key)
        if held is None or generation > held[0]:
            newest[key] = (generation, [spec])
        elif generation == held[0]:
            held[1].append(spec)
    return [
        _pool(driver, name, generation, specs)
        for (driver, name), (generation, specs) in sorted(newest.items())
    ]


def _pool(driver: str, name: str, generation: int, specs: list[Mapping[str, Any]]) -> Pool:
    devices: list[SliceDevice] = []
    counter_sets: dict[str, Mapping[str, float]] = {}
    for spec in specs:
        for counter_set in _list(spec.get("sharedCounters")):
            set_map = mapping(counter_set)
            set_name = _string(set_map.get("name"))
            if set_name is not None:
                counter_sets[set_name] = _counters(set_map.get("counters"))
        node = _string(spec.get("nodeName"))
        per_device = spec.get("perDeviceNodeSelection") is True
        for device in _list(spec.get("devices")):
            found = _device(driver, name, mapping(device), node, per_device=per_device)
            if found is not None:
                devices.append(found)
    return Pool(driver, name, generation, tuple(devices), counter_sets)


def _device(
    driver: str, pool: str, device: Mapping[str, Any], node: str | None, *, per_device: bool
) -> SliceDevice | None:
    name = _string(device.get("name"))
    if name is None:
        return None
    if per_device:
        node = _string(device.get("nodeName"))
    consumes = tuple(
        CounterUse(str(mapping(use).get("counterSet")), _counters(mapping(use).get("counters")))
        for use in _list(device.get("consumesCounters"))
        if _string(mapping(use).get("counterSet")) is not None
    )
    taints = tuple(
        (str(mapping(taint).get("key", "")), str(mapping(taint).get("effect", "")))
        for taint in _list(device.get("taints"))
    )
    return SliceDevice(
        driver=driver,
        pool=pool,
        name=name,
        node=node,
        attributes=dict(_attributes(driver, device.get("attributes"))),
        consumes=consumes,
        taints=taints,
    )


def _attributes(driver: str, attributes: object) -> Iterator[tuple[str, AttributeValue]]:
    """Attributes by qualified name: an unqualified one belongs to the driver's domain."""
    for key, value in mapping(attributes).items():
        typed = mapping(value)
        for kind in ("string", "version", "int", "bool"):
            if kind in typed and isinstance(typed[kind], str | int | bool):
                qualified = key if "/" in key else f"{driver}/{key}"
                yield qualified, typed[kind]
                break


def _counters(counters: object) -> dict[str, float]:
    found: dict[str, float] = {}
    for name, counter in mapping(counters).items():
        try:
            found[name] = float(parse_quantity(mapping(counter).get("value")))
        except QuantityError:
            continue
    return found
