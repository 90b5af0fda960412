"""Every resource admission judges as a GPU is one the webhook registrations send: the CEL
name check (`name.startsWith('nvidia.com/')
|| name.startsWith('deviceclass.resource.kubernetes.io/')
|| name.contains('/') && name.matches(P)`) and the walker (`podspec.is_gpu_resource`,
`ungoverned_gpu_resource`) read one pattern. The CEL itself is compiled and run by the API
server's compiler in e2e/test_match_conditions.py."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from quotaguard.kube.names import ACCELERATOR_PATTERN, DRA_EXTENDED_RESOURCE_PREFIX
from quotaguard.kube.podspec import is_gpu_resource, ungoverned_gpu_resource
from quotaguard.webhook.registrations import configuration

NO_CLASSES: frozenset[str] = frozenset()


def sent_by_cel(name: str) -> bool:
    """The registrations' name check, read as CEL reads it (matches() is an RE2 search)."""
    return name.startswith(("nvidia.com/", DRA_EXTENDED_RESOURCE_PREFIX)) or (
        "/" in name and re.search(ACCELERATOR_PATTERN, name) is not None
    )


def judged(name: str) -> bool:
    return is_gpu_resource(name, NO_CLASSES) or ungoverned_gpu_resource(name, NO_CLASSES)


def test_the_registrations_carry_the_pattern() -> None:
    for path in ("mutate", "validate"):
        for hook in configuration(path)["webhooks"]:  # type: ignore[arg-type]
            expression = hook["matchConditions"][0]["expression"]
            if not hook["name"].startswith(("appwrappers", "pods-update", "resourceclaim")):
                assert f"name.matches('{ACCELERATOR_PATTERN}')" in expression, hook["name"]
                assert f"name.startsWith('{DRA_EXTENDED_RESOURCE_PREFIX}')" in expression


NAMES = [
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb.me",
    "nvidia.com/mig-2g.20gb-me",
    "nvidia.com/mig-1g.10gb.gfx",
    "nvidia.com/mig-1g.10gb.me.all",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "nvidia.com/gpumem-percentage",
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "gpu.intel.com/xe",
    "habana.ai/gaudi",
    "aws.amazon.com/neuroncore",
    "google.com/tpu",
    "huawei.com/Ascend910",
    # DRA extended resources a GPU DeviceClass serves implicitly
    "deviceclass.resource.kubernetes.io/gpu.nvidia.com",
    "deviceclass.resource.kubernetes.io/mig.nvidia.com",
]


def test_every_gpu_name_is_judged_and_sent() -> None:
    for name in NAMES:
        assert judged(name), name
        assert sent_by_cel(name), name


_segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyzGPU0123456789.-_+", min_size=1, max_size=12)
_names = st.one_of(
    st.builds(lambda d, n: f"{d}/{n}", _segment, _segment),
    st.builds(lambda n: f"nvidia.com/{n}", _segment),
    st.builds(lambda n: f"nvidia.com/mig-{n}", _segment),
    st.builds(lambda n: f"{DRA_EXTENDED_RESOURCE_PREFIX}{n}", _segment),
    st.just(f"{DRA_EXTENDED_RESOURCE_PREFIX}mig.nvidia.com"),
    _segment,
)


@given(_names)
def test_what_admission_judges_the_registrations_send(name: str) -> None:
    if judged(name):
        assert sent_by_cel(name)
