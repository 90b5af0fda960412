"""Whether the webhook registrations in the cluster send every resource name the policy in force
governs. The policy moves in Git and is reloaded in place; the registrations are applied apart
from it (`quotaguard registrations`, the Helm chart) and may lag: a tenant asking only for a
name they do not send is neither queued nor checked. Read each interval (blocking: in a worker
thread), exported as `quotaguard_registrations_unsent_resource_names` and logged once per change.
Never raises: unreadable registrations are logged, and the series left as it was."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from quotaguard.metrics.serve_metrics import REGISTRATIONS_UNSENT
from quotaguard.policy.model import TenantPolicy
from quotaguard.policy.sent_names import REGISTRATIONS, names_not_sent, names_to_send

log = logging.getLogger("quotaguard.controller")
GROUP, VERSION = "admissionregistration.k8s.io", "v1"


def read_registrations(custom: Any, timeout: float) -> list[dict[str, Any]] | str:
    """quotaguard's webhook configurations in the cluster, or why they cannot be read."""
    found = []
    for plural, name in REGISTRATIONS:
        try:
            response = custom.get_cluster_custom_object(
                GROUP, VERSION, plural, name, _request_timeout=timeout, _preload_content=False
            )
        except Exception as exc:
            status = getattr(exc, "status", None)
            if status == 404:
                return f"{plural}/{name} is not in the cluster"
            return f"cannot read {plural}/{name} ({status or type(exc).__name__})"
        found.append(json.loads(response.data))
    return found


@dataclass
class RegistrationsCheck:
    """The names the registrations do not send, checked each interval; what was said last."""

    timeout: float
    said: str | None = None
    unsent: tuple[str, ...] = ()

    def check(self, custom: Any, policy: TenantPolicy) -> tuple[str, ...]:
        """The policy's names the cluster's registrations do not send (unreadable: the last
        ones found)."""
        wanted = names_to_send(policy)
        read = read_registrations(custom, self.timeout) if wanted else []
        if isinstance(read, str):
            self._say(f"{read}: cannot tell whether it sends {', '.join(wanted)}", "warning")
            return self.unsent
        unsent = names_not_sent(read, wanted)
        for name in set(self.unsent) - set(unsent):
            REGISTRATIONS_UNSENT.remove(name)
        for name in unsent:
            REGISTRATIONS_UNSENT.labels(resource=name).set(1)
        self.unsent = unsent
        if unsent:
            self._say(
                f"the webhook registrations do not send pods asking for {', '.join(unsent)}, "
                "which the policy governs: such pods are neither queued nor checked; apply "
                "`quotaguard registrations --policy <policy>` (or upgrade the Helm release)",
                "error",
            )
        else:
            self._say(None, "info")
        return unsent

    def _say(self, problem: str | None, level: str) -> None:
        if problem is not None and problem != self.said:
            getattr(log, level)(problem)
        self.said = problem
