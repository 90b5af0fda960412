"""The webhook's DRA lookup: objects read once and kept, a missing one looked for again soon,
reads bounded per second, DeviceClasses listed."""

from __future__ import annotations

from typing import Any

from quotaguard.webhook.dracache import DraCache

TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "t", "namespace": "ns"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        }
    },
}
CLASS = {"metadata": {"name": "gpu.nvidia.com"}, "spec": {"extendedResourceName": "nvidia.com/gpu"}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def cache(
    store: dict[tuple[str, str], Any], clock: Clock, reads: list[str], **options: Any
) -> DraCache:
    fail = options.pop("fail", False)

    def read(namespace: str, name: str) -> Any:
        reads.append(f"{namespace}/{name}")
        return store.get((namespace, name))

    def classes() -> list[Any]:
        reads.append("deviceclasses")
        if fail:
            raise OSError("unreachable")
        return [CLASS]

    return DraCache(read, read, classes, clock=clock, **options)


def test_a_template_is_read_once_and_kept() -> None:
    clock, reads = Clock(), []
    lookup = cache({("ns", "t"): TEMPLATE}, clock, reads, ttl=60)
    first = lookup.template("ns", "t")
    assert first is not None and first.requests[0].choices[0].device_class == "gpu.nvidia.com"
    clock.now = 59
    assert lookup.template("ns", "t") == first
    assert reads == ["ns/t"]
    clock.now = 61
    lookup.template("ns", "t")
    assert reads == ["ns/t", "ns/t"]


def test_a_missing_template_is_looked_for_again_soon() -> None:
    clock, reads = Clock(), []
    store: dict[tuple[str, str], Any] = {}
    lookup = cache(store, clock, reads, missing_ttl=2)
    assert lookup.template("ns", "t") is None
    store[("ns", "t")] = TEMPLATE  # created just after the workload's first try
    clock.now = 1
    assert lookup.template("ns", "t") is None
    clock.now = 3
    assert lookup.template("ns", "t") is not None


def test_reads_are_bounded_per_second() -> None:
    clock, reads = Clock(), []
    lookup = cache({}, clock, reads, reads_per_second=5)
    for number in range(20):
        lookup.template("ns", f"random-{number}")
    assert len(reads) == 5
    clock.now = 1
    lookup.template("ns", "another")
    assert len(reads) == 6


def test_device_classes_are_listed_and_a_failed_list_leaves_them_unknown() -> None:
    clock, reads = Clock(), []
    lookup = cache({}, clock, reads)
    info = lookup.device_class("gpu.nvidia.com")
    assert info is not None and info.extended_resource_name == "nvidia.com/gpu"
    assert lookup.knows_device_classes and lookup.device_class("nope") is None
    failing = cache({}, Clock(), [], fail=True)
    assert not failing.knows_device_classes and failing.device_class("gpu.nvidia.com") is None
