"""Which GPU classes of the policy a DRA request or a published device belongs to.

A request (a DeviceClass and what its selectors pin, or a container's request for an extended
resource the DeviceClass serves) may get the devices of every class of
that DeviceClass whose pinned attributes it does not contradict. A device of a ResourceSlice
is the first class (in policy order) whose DeviceClass selects it and whose attributes it has.
"""

from __future__ import annotations

from collections.abc import Mapping

from quotaguard.kube.cel import Selection
from quotaguard.kube.dra import DeviceClassInfo, SliceDevice
from quotaguard.policy.model import GpuClass, TenantPolicy


def classes_of_device_class(policy: TenantPolicy, device_class: str) -> tuple[GpuClass, ...]:
    return tuple(
        c
        for c in policy.dra_classes
        if c.dra is not None and c.dra.device_class_name == device_class
    )


def served_classes(policy: TenantPolicy, resource: str) -> tuple[GpuClass, ...]:
    """The classes a container's request for an extended resource a DeviceClass serves
    through DRA may get (any device of the DeviceClass: the claim the API server builds has
    no selectors); empty for other resources."""
    device_class = policy.served_resources.get(resource)
    return () if device_class is None else classes_of_device_class(policy, device_class)


def classes_for_request(
    policy: TenantPolicy, device_class: str, selection: Selection
) -> tuple[GpuClass, ...]:
    """The classes whose devices a request for `device_class` narrowed by `selection` may
    get (empty when the policy names the DeviceClass but no class fits the selection)."""
    return tuple(
        c
        for c in classes_of_device_class(policy, device_class)
        if c.dra is not None and c.dra.selection.compatible(selection)
    )


def class_of_device(
    policy: TenantPolicy, device: SliceDevice, device_classes: Mapping[str, DeviceClassInfo]
) -> GpuClass | None:
    """The first class whose DeviceClass (as the cluster defines it) selects the device and
    whose own selector and attributes it meets; None when the DeviceClass is not known."""
    for gpu_class in policy.dra_classes:
        assert gpu_class.dra is not None  # dra_classes
        info = device_classes.get(gpu_class.dra.device_class_name)
        if info is None:
            continue
        if info.selection.matches(device.driver, device.attributes) and (
            gpu_class.dra.selection.matches(device.driver, device.attributes)
        ):
            return gpu_class
    return None
