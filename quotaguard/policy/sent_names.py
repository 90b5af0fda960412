"""Which of a policy's GPU resource names the shipped webhook registrations send to quotaguard,
and which they must be widened to send.

The registrations (`quotaguard.webhook.registrations`) send a pod when a container names an
nvidia.com/ resource, an implicit DRA extended resource or a name that looks like an
accelerator. A policy may govern other names (`gpuClasses[].resource`,
`gpuClasses[].dra.extendedResourceName`: `example.com/a100-slice`); a pod asking for one of them
alone is never sent unless the registrations list it, which would let a tenant past its quota.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from quotaguard.kube.names import ACCELERATOR_PATTERN, DRA_EXTENDED_RESOURCE_PREFIX
from quotaguard.policy.model import TenantPolicy

_ACCELERATOR = re.compile(ACCELERATOR_PATTERN)
# The head of the CEL name check of every registration condition that looks for GPU requests
# (`quotaguard.webhook.registrations`); registrations rendered for a policy list its names
# beside it (`name in ['example.com/a100-slice'] || name.startsWith('nvidia.com/') || ...`).
NAME_CHECK_HEAD = (
    f"name.startsWith('nvidia.com/') || name.startsWith('{DRA_EXTENDED_RESOURCE_PREFIX}')"
)
# quotaguard's webhook configurations as (plural, name), in the order they are written
# (`quotaguard.webhook.registrations` builds them; tests/deploy holds the names equal)
REGISTRATIONS = (
    ("mutatingwebhookconfigurations", "00-quotaguard-mutating"),
    ("validatingwebhookconfigurations", "quotaguard-validating"),
    ("validatingwebhookconfigurations", "quotaguard-validating-resources"),
)
# What `validate` says where a name is not sent by default.
HOW_TO_SEND = (
    "render the registrations for this policy: `quotaguard registrations --policy FILE "
    "--out-dir DIR` (kustomize: use the files instead of webhook/), or with the Helm chart "
    "keep the policy in policy.content (its names are sent) or list the name in "
    "webhook.extraResourceNames"
)


def sent_by_default(resource: str) -> bool:
    """Whether the default registrations send a pod asking for `resource` (the CEL name check
    read as CEL reads it: matches() is an RE2 search)."""
    return resource.startswith(("nvidia.com/", DRA_EXTENDED_RESOURCE_PREFIX)) or (
        "/" in resource and _ACCELERATOR.search(resource) is not None
    )


def governed_names(policy: TenantPolicy) -> tuple[str, ...]:
    """Every resource name a pod may ask for that the policy counts as a GPU class, sorted."""
    names: set[str] = set()
    for gpu_class in policy.spec.gpu_classes:
        if gpu_class.resource_name is not None:
            names.add(gpu_class.resource_name)
        if gpu_class.dra is not None and gpu_class.dra.extended_resource_name is not None:
            names.add(gpu_class.dra.extended_resource_name)
    return tuple(sorted(names))


def names_to_send(policy: TenantPolicy) -> tuple[str, ...]:
    """The policy's names the default registrations do not send: the ones to add."""
    return tuple(name for name in governed_names(policy) if not sent_by_default(name))


_LISTED_BESIDE_HEAD = re.compile(r"name in \[([^\]]*)\] \|\| " + re.escape(NAME_CHECK_HEAD))
_QUOTED = re.compile(r"'([^']*)'")


def names_not_sent(configs: Iterable[Mapping[str, Any]], names: Iterable[str]) -> tuple[str, ...]:
    """Those of `names` that some name check of the webhook configurations `configs` (as read
    from a cluster) does not list: a pod asking only for one of them is not sent to every
    webhook that must see it. Configurations without any name check send none of them."""
    wanted = set(names)
    listed_everywhere: set[str] | None = None
    for config in configs:
        for hook in _maps(config.get("webhooks")):
            for condition in _maps(hook.get("matchConditions")):
                expression = condition.get("expression")
                if not isinstance(expression, str) or NAME_CHECK_HEAD not in expression:
                    continue
                lists = _LISTED_BESIDE_HEAD.findall(expression)
                here = set(wanted)
                if len(lists) < expression.count(NAME_CHECK_HEAD):
                    here = set()  # a name check with no list beside it
                for listed in lists:
                    here &= set(_QUOTED.findall(listed))
                listed_everywhere = here if listed_everywhere is None else listed_everywhere & here
    return tuple(sorted(wanted - (listed_everywhere or set())))


def _maps(value: object) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []
