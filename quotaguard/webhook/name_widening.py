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
configurations. A name list costs the API server's CEL
estimate one comparison per name per resource key; `MAX_EXTRA_NAMES` bounds it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any

from quotaguard.policy.model import RESOURCE_NAME
from quotaguard.policy.sent_names import NAME_CHECK_HEAD

# a Pod's re-applied plain GPU: another nvidia.com/ resource next to nvidia.com/gpu
ANOTHER_NVIDIA_RESOURCE = "name != 'nvidia.com/gpu' && name.startsWith('nvidia.com/')"
MAX_EXTRA_NAMES = 64
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
            "matchConditions within the API server's CEL cost limit"
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
    """A copy of a webhook configuration whose every matchCondition sends `names` too."""
    widened = copy.deepcopy(config)
    for hook in widened["webhooks"]:
        for condition in hook.get("matchConditions", []):
            condition["expression"] = widened_expression(condition["expression"], names)
    return widened
