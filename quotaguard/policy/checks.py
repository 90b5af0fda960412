"""Cross-field checks of a policy that a schema cannot express.

They read the raw document (plain dicts) defensively, so they run even when the schema has
rejected some field: the user sees every problem in one pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from quotaguard.kube.names import (
    GPU_RESOURCE,
    MIG_PREFIX,
)
from quotaguard.kube.quantity import QuantityError, parse_duration, parse_quantity
from quotaguard.kube.values import mapping as _map
from quotaguard.policy.catalogue import GPU_MODELS, matching_profiles, profile_of_resource
from quotaguard.policy.drachecks import check_dra
from quotaguard.policy.fleetchecks import check_fleet
from quotaguard.policy.geometrychecks import check_geometry
from quotaguard.policy.globs import overlapping_pairs
from quotaguard.policy.kueue_dra import check_kueue_resources
from quotaguard.policy.listchecks import check_lists
from quotaguard.policy.model import BEST_FIT, DEFAULT_EXEMPT
from quotaguard.policy.problems import Problem
from quotaguard.policy.sent_names import HOW_TO_SEND, sent_by_default
from quotaguard.policy.showbackchecks import check_showback

_DEFAULT_SCHEDULERS = ("default-scheduler",)


def _items(value: object) -> list[tuple[int, Mapping[str, Any]]]:
    if not isinstance(value, list):
        return []
    return [(index, item) for index, item in enumerate(value) if isinstance(item, Mapping)]


def _bytes(value: object) -> int | None:
    try:
        return int(parse_quantity(value))
    except QuantityError:
        return None


def check_policy(document: Mapping[str, Any]) -> list[Problem]:
    spec = _map(document.get("spec"))
    classes = _items(spec.get("gpuClasses"))
    tenants = _items(spec.get("tenants"))
    class_names = {c.get("name") for _, c in classes if isinstance(c.get("name"), str)}
    mig_names = {
        c["name"]
        for _, c in classes
        if isinstance(c.get("name"), str) and str(c.get("resource", "")).startswith(MIG_PREFIX)
    }
    resources = {
        c["name"]: c["resource"]
        for _, c in classes
        if isinstance(c.get("name"), str) and isinstance(c.get("resource"), str)
    }
    problems: list[Problem] = []
    problems += _duplicates(classes, "name", ("spec", "gpuClasses"), "GPU class")
    problems += _duplicates(tenants, "name", ("spec", "tenants"), "tenant")
    problems += _duplicate_queues(tenants)
    problems += _gpu_classes(classes)
    problems += _namespace_overlaps(tenants, spec.get("exemptNamespaces", list(DEFAULT_EXEMPT)))
    whole_names = {
        c["name"]
        for _, c in classes
        if isinstance(c.get("name"), str) and c.get("resource") == GPU_RESOURCE
    }
    for index, tenant in tenants:
        problems += _tenant(index, tenant, class_names, mig_names)
        problems += check_lists(index, tenant, resources, mig_names, spec.get("backend"))
        problems += _best_fit_fallthrough(index, tenant, whole_names)
    problems += _rebalance(_map(spec.get("rebalance")))
    problems += check_geometry(spec)
    problems += check_dra(spec)
    problems += check_kueue_resources(spec)
    problems += check_showback(spec)
    problems += _scheduling(spec)
    problems += check_fleet(spec)
    return problems


def _scheduling(spec: Mapping[str, Any]) -> Iterator[Problem]:
    """The packing scheduler is stamped under Kueue only; Volcano's scheduler places its own."""
    name = _map(spec.get("scheduling")).get("schedulerName")
    if name and spec.get("backend") == "volcano":
        yield Problem(
            ("spec", "scheduling", "schedulerName"),
            "the volcano backend sets schedulerName volcano on every GPU pod; a packing "
            "profile belongs in Volcano's own scheduler configuration (binpack plugin): remove "
            "spec.scheduling.schedulerName",
        )
    elif name and name in _DEFAULT_SCHEDULERS:
        yield Problem(
            ("spec", "scheduling", "schedulerName"),
            f"{name!r} is the default profile, which spreads pods; name the profile of "
            "tools/scheduler_profile.py (quotaguard-gpu) or leave schedulerName out",
            "warning",
        )


def _duplicates(
    items: list[tuple[int, Mapping[str, Any]]], key: str, base: tuple[str, ...], what: str
) -> Iterator[Problem]:
    first: dict[object, int] = {}
    for index, item in items:
        value = item.get(key)
        if not isinstance(value, str):
            continue
        if value in first:
            message = f"duplicate {what} name {value!r} (first defined at index {first[value]})"
            yield Problem((*base, index, key), message)
        else:
            first[value] = index


def _duplicate_queues(tenants: list[tuple[int, Mapping[str, Any]]]) -> Iterator[Problem]:
    owners: dict[str, str] = {}
    for index, tenant in tenants:
        name = tenant.get("name")
        queue = tenant.get("queue") or name
        if not isinstance(queue, str) or not isinstance(name, str):
            continue
        if queue in owners and owners[queue] != name:
            message = (
                f"queue {queue!r} is already owned by tenant {owners[queue]!r}; "
                "each tenant needs its own queue"
            )
            field = "queue" if "queue" in tenant else "name"
            yield Problem(("spec", "tenants", index, field), message)
        owners.setdefault(queue, name)


def _gpu_classes(classes: list[tuple[int, Mapping[str, Any]]]) -> Iterator[Problem]:
    by_resource: dict[str, list[int]] = {}
    for index, gpu_class in classes:
        resource = gpu_class.get("resource")
        if isinstance(resource, str):
            by_resource.setdefault(resource, []).append(index)
        yield from _gpu_class(("spec", "gpuClasses", index), gpu_class, resource)
    yield from _shared_resources(dict(classes), by_resource)


def _gpu_class(
    path: tuple[str | int, ...], gpu_class: Mapping[str, Any], resource: Any
) -> Iterator[Problem]:
    sharing = gpu_class.get("sharing", "none")
    replicas = gpu_class.get("replicas")
    if sharing == "none" and isinstance(replicas, int) and replicas > 1:
        yield Problem(
            (*path, "replicas"),
            "replicas only applies to shared classes; set sharing: time-slicing or mps",
        )
    if sharing in ("time-slicing", "mps") and "replicas" not in gpu_class:
        yield Problem(
            path,
            "a shared class should state replicas (shared units per physical GPU); 1 is assumed",
            "warning",
        )
    if isinstance(resource, str) and resource.startswith(MIG_PREFIX):
        yield from _mig_profile(path, gpu_class)
    if isinstance(resource, str) and not sent_by_default(resource):
        yield Problem(
            (*path, "resource"),
            "the default webhook registrations send a pod to quotaguard only when it names "
            "an nvidia.com/ resource or one whose name looks like an accelerator (gpu, tpu, "
            f"neuron, gaudi, ...); pods asking for {resource!r} alone are neither rewritten "
            f"nor checked unless the registrations send it: {HOW_TO_SEND}",
            "warning",
        )


def _shared_resources(
    class_at: Mapping[int, Mapping[str, Any]], by_resource: Mapping[str, list[int]]
) -> Iterator[Problem]:
    """Classes sharing one resource name are told apart only by their nodeSelectors."""
    for resource, indexes in by_resource.items():
        if len(indexes) < 2:
            continue
        for index in indexes:
            if not _map(class_at[index].get("nodeSelector")):
                yield Problem(
                    ("spec", "gpuClasses", index, "resource"),
                    f"{len(indexes)} classes share resource {resource!r}; each needs a "
                    "nodeSelector so capacity can be told apart",
                )


def _mig_profile(path: tuple[str | int, ...], gpu_class: Mapping[str, Any]) -> Iterator[Problem]:
    resource = str(gpu_class.get("resource"))
    if "+" in resource:
        yield Problem(
            (*path, "resource"),
            f"the device plugin offers MIG profile {resource.removeprefix(MIG_PREFIX)!r} as "
            f"{MIG_PREFIX}{resource.removeprefix(MIG_PREFIX).replace('+', '.')} (a resource "
            "name cannot hold a +)",
        )
        return
    memory = _bytes(gpu_class.get("memory"))
    slices = gpu_class.get("slices", 7)
    if memory is None or not isinstance(slices, int):
        return
    named = profile_of_resource(resource)
    if not matching_profiles(memory, slices):
        hint = (
            f" ({resource} is MIG profile {named.name}: {named.slices} slice(s), "
            f"{named.memory_gb} GB)"
            if named is not None
            else ""
        )
        yield Problem(
            path,
            f"no known MIG profile has {slices} slice(s) and {memory / 2**30:g}Gi of memory "
            f"(catalogue: {', '.join(GPU_MODELS)}); check memory and slices{hint}",
            "warning",
        )


def _namespace_overlaps(
    tenants: list[tuple[int, Mapping[str, Any]]], exempt: object
) -> Iterator[Problem]:
    patterns: list[tuple[int, int, str, str]] = []
    for index, tenant in tenants:
        name = str(tenant.get("name", f"#{index}"))
        namespaces = tenant.get("namespaces")
        if isinstance(namespaces, list):
            for position, pattern in enumerate(namespaces):
                if isinstance(pattern, str):
                    patterns.append((index, position, name, pattern))
    exempt_patterns = [e for e in exempt if isinstance(e, str)] if isinstance(exempt, list) else []
    tenant_count = len(patterns)
    for later, earlier, example in overlapping_pairs([p[3] for p in patterns] + exempt_patterns):
        if earlier >= tenant_count:
            continue  # two exempt patterns
        index, position, name, pattern = patterns[earlier]
        where = ("spec", "tenants", index, "namespaces", position)
        if later >= tenant_count:
            yield Problem(
                where,
                f"namespace pattern {pattern!r} of tenant {name!r} overlaps exempt namespace "
                f"{exempt_patterns[later - tenant_count]!r}; workloads there are never mutated "
                "or checked",
                "warning",
            )
            continue
        other_index, other_position, other_name, other = patterns[later]
        if other_index != index:
            yield Problem(
                ("spec", "tenants", other_index, "namespaces", other_position),
                f"namespace pattern {other!r} of tenant {other_name!r} overlaps {pattern!r} of "
                f"tenant {name!r} (both match {example!r}); a namespace must have one owner",
            )


def _allowed_classes(
    path: tuple[str | int, ...], name: Any, allowed_raw: list[Any], class_names: set[Any]
) -> Iterator[Problem]:
    for position, class_name in enumerate(allowed_raw):
        if class_name not in class_names:
            yield Problem(
                (*path, "allowedClasses", position),
                f"tenant {name!r} allows unknown GPU class {class_name!r}; known: "
                f"{', '.join(sorted(map(str, class_names)))}",
            )


def _quotas(
    path: tuple[str | int, ...],
    name: Any,
    quotas: Mapping[str, Any],
    class_names: set[Any],
    allowed: set[Any] | None,
) -> Iterator[Problem]:
    for class_name, quota in quotas.items():
        quota_path = (*path, "quota", class_name)
        if class_name not in class_names:
            yield Problem(quota_path, f"quota for unknown GPU class {class_name!r}")
        elif allowed is not None and class_name not in allowed:
            yield Problem(
                quota_path,
                f"tenant {name!r} has quota for {class_name!r} but does not allow that class "
                "(add it to allowedClasses or drop the quota)",
            )
        quota_map = _map(quota)
        guaranteed, ceiling = quota_map.get("guaranteed", 0), quota_map.get("max")
        if isinstance(guaranteed, int) and isinstance(ceiling, int) and guaranteed > ceiling:
            yield Problem(
                (*quota_path, "guaranteed"),
                f"guaranteed {guaranteed} is more than max {ceiling}",
            )


def _tenant(
    index: int, tenant: Mapping[str, Any], class_names: set[Any], mig_names: set[Any]
) -> Iterator[Problem]:
    path: tuple[str | int, ...] = ("spec", "tenants", index)
    name = tenant.get("name", f"#{index}")
    allowed_raw = tenant.get("allowedClasses")
    allowed = set(allowed_raw) if isinstance(allowed_raw, list) else None
    if isinstance(allowed_raw, list):
        yield from _allowed_classes(path, name, allowed_raw, class_names)
    yield from _quotas(path, name, _map(tenant.get("quota")), class_names, allowed)
    yield from _rewrites(path, name, tenant.get("rewrite"), class_names, mig_names, allowed)


def _rewrites(
    path: tuple[str | int, ...],
    name: Any,
    rules: Any,
    class_names: set[Any],
    mig_names: set[Any],
    allowed: set[Any] | None,
) -> Iterator[Problem]:
    catch_all_at: int | None = None
    for position, rule in _items(rules):
        rule_path = (*path, "rewrite", position)
        target = rule.get("to")
        when = _map(rule.get("when"))
        if catch_all_at is not None:
            yield Problem(
                rule_path,
                f"rule is never reached: rule {catch_all_at} matches every request",
                "warning",
            )
        if not when:
            catch_all_at = position
        target_path: tuple[str | int, ...] = (*rule_path, "to")
        if isinstance(target, list) and len(target) == 1:  # a list of one is that class
            target, target_path = target[0], (*target_path, 0)
        if target == BEST_FIT:
            usable = mig_names if allowed is None else mig_names & allowed
            if not usable:
                yield Problem(
                    target_path,
                    f"best-fit needs a MIG class that tenant {name!r} allows; there is none",
                    "warning",
                )
        elif isinstance(target, str):
            yield from _target(target_path, target, class_names, allowed, name)
        at_most, at_least = _bytes(when.get("memoryAtMost")), _bytes(when.get("memoryAtLeast"))
        if at_most is not None and at_least is not None and at_least > at_most:
            yield Problem(
                (*rule_path, "when"),
                "memoryAtLeast is above memoryAtMost: the rule can never match",
            )


def _target(
    path: tuple[str | int, ...],
    target: str,
    class_names: set[Any],
    allowed: set[Any] | None,
    tenant: object,
) -> Iterator[Problem]:
    if target not in class_names:
        yield Problem(path, f"rewrite target {target!r} is not a GPU class")
    elif allowed is not None and target not in allowed:
        yield Problem(
            path, f"rewrite target {target!r} is not in the allowedClasses of tenant {tenant!r}"
        )


def _best_fit_fallthrough(
    index: int, tenant: Mapping[str, Any], whole_names: set[Any]
) -> Iterator[Problem]:
    """A pod without a memory hint passes a `best-fit` rule on to the next rule; warn where
    no later rule can take it (every later one needs a memory hint)."""
    rules = _items(tenant.get("rewrite"))
    name = tenant.get("name", f"#{index}")
    allowed = tenant.get("allowedClasses")
    for number, (position, rule) in enumerate(rules):
        if rule.get("to") != BEST_FIT or _needs_memory(rule):
            continue
        if any(not _needs_memory(later) for _, later in rules[number + 1 :]):
            continue
        denied = isinstance(allowed, list) and not whole_names & set(allowed)
        outcome = (
            f"a whole GPU, which tenant {name!r} does not allow: such pods are denied"
            if denied
            else "a whole GPU"
        )
        yield Problem(
            ("spec", "tenants", index, "rewrite", position, "to"),
            f"a pod without quotaguard.dev/gpu-memory passes best-fit on to the next rule, and "
            f"no rule after this one takes it: its {GPU_RESOURCE} stays {outcome} (add a rule "
            "without a memory condition after it)",
            "warning",
        )
        return


def _needs_memory(rule: Mapping[str, Any]) -> bool:
    when = _map(rule.get("when"))
    return when.get("memoryAtMost") is not None or when.get("memoryAtLeast") is not None


def _rebalance(rebalance: Mapping[str, Any]) -> Iterator[Problem]:
    try:
        interval = parse_duration(rebalance.get("interval", "60s"))
        window = parse_duration(rebalance.get("demandWindow", "15m"))
    except QuantityError:
        return
    if 0 < window < interval:
        yield Problem(
            ("spec", "rebalance", "demandWindow"),
            f"demandWindow ({window:g}s) is shorter than interval ({interval:g}s); "
            "demand will not be smoothed",
            "warning",
        )
