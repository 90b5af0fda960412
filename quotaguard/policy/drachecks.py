"""Checks of GPU classes backed by DRA DeviceClasses (`gpuClasses[].dra`).

quotaguard evaluates no CEL: it reads which attributes a selector pins (`quotaguard.kube.cel`)
to tell which class a claim's request or a ResourceSlice's device belongs to. A class selector
it cannot read entirely would be counted wrongly, so it is an error, located at the selector.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from quotaguard.kube.cel import Condition, Selection, qualified, read_selector
from quotaguard.kube.names import DRA_EXTENDED_RESOURCE_PREFIX
from quotaguard.kube.values import mapping
from quotaguard.policy.model import RESOURCE_NAME
from quotaguard.policy.problems import Problem
from quotaguard.policy.sent_names import HOW_TO_SEND, sent_by_default

_RESOURCE_NAME = re.compile(RESOURCE_NAME)  # the schema reports a name that is none
_READABLE = (
    'a conjunction (&&) of device.attributes["<domain>"].<name> == <value> (or in [...]) '
    'and device.driver == "<driver>" terms'
)


def _items(value: object) -> list[tuple[int, Mapping[str, Any]]]:
    if not isinstance(value, list):
        return []
    return [(index, item) for index, item in enumerate(value) if isinstance(item, Mapping)]


def check_dra(spec: Mapping[str, Any]) -> list[Problem]:
    classes = _items(spec.get("gpuClasses"))
    problems: list[Problem] = []
    selections: dict[str, list[tuple[int, str, Selection]]] = {}
    for index, gpu_class in classes:
        dra = gpu_class.get("dra")
        if not isinstance(dra, Mapping):
            continue
        path = ("spec", "gpuClasses", index, "dra")
        selection, found = _selection(path, dra)
        problems += found
        device_class = dra.get("deviceClassName")
        name = gpu_class.get("name")
        if isinstance(device_class, str) and isinstance(name, str) and selection is not None:
            selections.setdefault(device_class, []).append((index, name, selection))
    problems += _overlapping(selections)
    problems += _served_names(classes)
    problems += _rewrite_targets(spec, classes)
    return problems


def _selection(
    path: tuple[str | int, ...], dra: Mapping[str, Any]
) -> tuple[Selection | None, list[Problem]]:
    """What the class's selector and attributes pin, and what is wrong with them."""
    problems: list[Problem] = []
    selector = dra.get("selector")
    read = Selection()
    if isinstance(selector, str) and selector.strip():
        read = read_selector(selector)
        if read.unread:
            unread = "; ".join(read.unread)
            problems.append(
                Problem(
                    (*path, "selector"),
                    f"quotaguard cannot read {unread!r} of this selector; a class selector is "
                    f"{_READABLE}, so that claims and devices can be told apart by class (put "
                    "other conditions in the DeviceClass)",
                )
            )
    pinned: list[Condition] = []
    for name, value in mapping(dra.get("attributes")).items():
        if not qualified(str(name)):
            problems.append(
                Problem(
                    (*path, "attributes", name),
                    f"attribute {name!r} needs its domain, as ResourceSlices qualify it: "
                    f"e.g. gpu.nvidia.com/{name}",
                )
            )
        elif isinstance(value, str | int | bool):
            pinned.append(Condition(str(name), frozenset({value})))
    if problems:
        return None, problems
    return Selection(read.conditions + tuple(pinned)), problems


def _overlapping(
    selections: Mapping[str, list[tuple[int, str, Selection]]],
) -> Iterator[Problem]:
    """Two classes of one DeviceClass whose selections could both take one device."""
    for device_class, found in selections.items():
        for number, (index, name, selection) in enumerate(found):
            for _, earlier, other in found[:number]:
                if selection.compatible(other):
                    yield Problem(
                        ("spec", "gpuClasses", index, "dra"),
                        f'classes "{earlier}" and "{name}" both take devices of DeviceClass '
                        f"{device_class!r} that no attribute tells apart; a device and a claim "
                        f'count for the first ("{earlier}"): pin an attribute that differs, '
                        "such as gpu.nvidia.com/productName or gpu.nvidia.com/profile",
                        "warning",
                    )
                    break


def _served_names(classes: list[tuple[int, Mapping[str, Any]]]) -> Iterator[Problem]:
    """`dra.extendedResourceName`: the implicit name of the class's own DeviceClass, or the one
    name its DeviceClass declares (one per DeviceClass, one DeviceClass per name)."""
    by_class: dict[str, str] = {}
    by_name: dict[str, str] = {}
    sharing: dict[str, list[str]] = {}
    for _, gpu_class in classes:
        device_class, name = (
            mapping(gpu_class.get("dra")).get("deviceClassName"),
            gpu_class.get("name"),
        )
        if isinstance(device_class, str) and isinstance(name, str):
            sharing.setdefault(device_class, []).append(name)
    for index, gpu_class in classes:
        dra = mapping(gpu_class.get("dra"))
        served, device_class = dra.get("extendedResourceName"), dra.get("deviceClassName")
        if not isinstance(served, str) or not isinstance(device_class, str):
            continue
        where = ("spec", "gpuClasses", index, "dra", "extendedResourceName")
        implicit = DRA_EXTENDED_RESOURCE_PREFIX + device_class
        if len(sharing.get(device_class, [])) > 1:
            yield Problem(
                where,
                f"a pod asking for {served!r} may get a device of any class of DeviceClass "
                f"{device_class!r} ({', '.join(sharing[device_class])}): the claim the API "
                "server builds has no selector; for a rewrite to get this class only, give it "
                "a DeviceClass of its own (its selector pinning the model or MIG profile)",
                "warning",
            )
        if served.startswith(DRA_EXTENDED_RESOURCE_PREFIX):
            if served != implicit:
                yield Problem(
                    where,
                    f"{served!r} is the implicit extended resource of DeviceClass "
                    f"{served.removeprefix(DRA_EXTENDED_RESOURCE_PREFIX)!r}, not of this "
                    f"class's {device_class!r}: write {implicit!r}",
                )
            continue
        if _RESOURCE_NAME.match(served) and not sent_by_default(served):
            yield Problem(
                where,
                "the default webhook registrations send a pod to quotaguard only when it "
                "names an nvidia.com/, deviceclass.resource.kubernetes.io/ or accelerator-like "
                f"resource; pods asking for {served!r} alone are neither rewritten nor checked "
                f"unless the registrations send it (or use {implicit!r}): {HOW_TO_SEND}",
                "warning",
            )
        earlier_name = by_class.setdefault(device_class, served)
        earlier_class = by_name.setdefault(served, device_class)
        if earlier_name != served:
            yield Problem(
                where,
                f"DeviceClass {device_class!r} declares one extendedResourceName, and another "
                f"class names it {earlier_name!r}: give every class of the DeviceClass the same",
            )
        elif earlier_class != device_class:
            yield Problem(
                where,
                f"{served!r} is already the extendedResourceName of DeviceClass "
                f"{earlier_class!r}; the API server serves a name from one DeviceClass only",
            )


def _rewrite_targets(
    spec: Mapping[str, Any], classes: list[tuple[int, Mapping[str, Any]]]
) -> Iterator[Problem]:
    """A rewrite puts `nvidia.com/gpu: N` on the target's extended resource: a class that
    only DRA claims reach has none."""
    claim_only = {
        c["name"]
        for _, c in classes
        if isinstance(c.get("name"), str)
        and "resource" not in c
        and isinstance(c.get("dra"), Mapping)
        and "extendedResourceName" not in c["dra"]
    }
    for index, tenant in _items(spec.get("tenants")):
        for position, rule in _items(tenant.get("rewrite")):
            target = rule.get("to")
            targets = target if isinstance(target, list) else [target]
            for at, name in enumerate(targets):
                if name in claim_only:
                    where: tuple[str | int, ...] = (
                        "spec",
                        "tenants",
                        index,
                        "rewrite",
                        position,
                        "to",
                    )
                    yield Problem(
                        (*where, at) if isinstance(target, list) else where,
                        f"class {name!r} has no resource, so nvidia.com/gpu cannot be "
                        "rewritten to it; give it the extended resource its DeviceClass serves "
                        "(dra.extendedResourceName: the DeviceClass's extendedResourceName or "
                        f"{DRA_EXTENDED_RESOURCE_PREFIX}<DeviceClass>), or let pods ask by "
                        "ResourceClaim",
                    )
