"""Webhook registrations that send more resource names than the default ones: the names a
policy governs beyond nvidia.com/, DRA's implicit names and accelerator-like names
(`quotaguard.policy.sent_names.names_to_send`).

The CEL name checks of `quotaguard.webhook.registrations` are built from the two fragments
below, each written once there. Widening puts `name in [...]` beside each, in every condition
of every webhook: CREATE and UPDATE of pods and of every workload kind's templates (the
fail-closed resources webhooks too) and the re-applied-plain-GPU checks of pods. The Helm
chart's `quotaguard.webhookConfiguration` helper makes the same replacement on the same
fragments (tests/deploy holds the two outputs equal);
`quotaguard.policy.sent_names.names_not_sent` reads the lists back from a cluster's
configurations.

Each name is written about 80 times per configuration. What bounds them is size, not CEL cost
(measured on kube-apiserver 1.36: 256 names of 25 characters compile and are accepted; near
480 one expression passes the API server's 100,000-code-point limit): `kubectl apply` keeps
the whole object in an annotation of at most 262,144 bytes, which the validating
configuration (170 kB as shipped) passes near 50 such names. `MAX_EXTRA_NAMES` and
`MAX_CONFIGURATION_BYTES` keep every configuration applicable with `kubectl apply`.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from typing import Any

from quotaguard.policy.model import RESOURCE_NAME
from quotaguard.policy.sent_names import NAME_CHECK_HEAD

# a Pod's re-applied plain GPU: another nvidia.com/ resource next to nvidia.com/gpu
ANOTHER_NVIDIA_RESOURCE = "name != 'nvidia.com/gpu' && name.startsWith('nvidia.com/')"
MAX_EXTRA_NAMES = 32
# a configuration's JSON, leaving room in kubectl's 262,144-byte annotation for the chart's
# labels and the caBundle `quotaguard certs` or cert-manager adds
MAX_CONFIGURATION_BYTES = 240_000
_RESOURCE_NAME = re.compile(RESOURCE_NAME)


class ExtraNameError(ValueError):
    """A name that cannot be sent: not an extended resource name (it would also be unsafe in
    a CEL string literal), or too many of them."""


def checked_names(names: Iterable[str]) -> tuple[str, ...]:
    """The names sorted and without repeats, or ExtraNameError naming the first bad one."""
    unique = sorted(set(names))
    for name in unique:
        if not _RESOURCE_NAME.match(name):
            raise ExtraNameError(
                f"{name!r} is not an extended resource name (domain/name, such as "
                "example.com/a100-slice)"
            )
    if len(unique) > MAX_EXTRA_NAMES:
        raise ExtraNameError(
            f"{len(unique)} resource names to send; at most {MAX_EXTRA_NAMES} keep the "
            "webhook configurations small enough for `kubectl apply`"
        )
    return tuple(unique)


def widened_expression(expression: str, names: tuple[str, ...]) -> str:
    """`expression` that also holds for a resource named in `names` (checked names)."""
    if not names:
        return expression
    listed = "[" + ", ".join(f"'{name}'" for name in names) + "]"
    return expression.replace(NAME_CHECK_HEAD, f"name in {listed} || {NAME_CHECK_HEAD}").replace(
        ANOTHER_NVIDIA_RESOURCE,
        f"name != 'nvidia.com/gpu' && (name.startsWith('nvidia.com/') || name in {listed})",
    )


def widened_configuration(config: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """A copy of a webhook configuration whose every matchCondition sends `names` too, or
    ExtraNameError when the copy is too large to apply."""
    if not names:
        return config
    widened = copy.deepcopy(config)
    for hook in widened["webhooks"]:
        for condition in hook.get("matchConditions", []):
            condition["expression"] = widened_expression(condition["expression"], names)
    size = len(json.dumps(widened, separators=(",", ":")))
    if size > MAX_CONFIGURATION_BYTES:
        raise ExtraNameError(
            f"with these {len(names)} resource names {widened['metadata']['name']} is "
            f"{size:,} bytes, over the {MAX_CONFIGURATION_BYTES:,} that `kubectl apply` can "
            "keep: send fewer or shorter names"
        )
    return widened
