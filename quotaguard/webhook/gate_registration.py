"""The validating webhook that sends a GPU Pod's UPDATE lifting Kueue's admission gate.

Pods' updates are otherwise not sent to validation (they are frequent, and a Pod's GPU requests
cannot change). This webhook sends only the one update that matters: Kueue's gate
(`kueue.x-k8s.io/admission`) present before and gone after, on a Pod that asks for GPUs, by
anyone but Kueue's controller under its default service account (whose ungating of every
admitted Pod must not wait for quotaguard). Admission then refuses it unless the user is one of
the policy's `spec.kueueControllers` (`quotaguard.admission.holds`). failurePolicy Fail: while
quotaguard is unreachable a tenant cannot lift the gate, and Kueue's own ungating is never sent.
"""

from __future__ import annotations

from typing import Any

from quotaguard.kube.names import KUEUE_ADMISSION_GATE, KUEUE_CONTROLLER

GATE_WEBHOOK = "pods-gate.validate.quotaguard.dev"
GATE_LIFTED = "kueue-gate-lifted-not-by-kueue"


def _gated(pod: str) -> str:
    spec, gates = f"{pod}.spec", f"{pod}.spec.schedulingGates"
    return (
        f"has({spec}) && type({spec}) == map\n"
        f"&& has({gates}) && type({gates}) == list\n"
        f"&& {gates}.exists(g, type(g) == map && 'name' in g && type(g.name) == string\n"
        f"  && g.name == '{KUEUE_ADMISSION_GATE}')"
    )


def gate_lifted_expression() -> str:
    """The update removes Kueue's admission gate, and does not come from Kueue's controller."""
    return (
        f"oldObject != null\n&& ({_gated('oldObject')})\n&& !({_gated('object')})\n"
        "&& !(has(request.userInfo) && has(request.userInfo.username)\n"
        f"  && request.userInfo.username == '{KUEUE_CONTROLLER}')"
    )


def gate_webhook(pod_update: dict[str, Any], requests_gpus: dict[str, Any]) -> dict[str, Any]:
    """`pod_update` (the registration of a Pod's validating UPDATE) as the gate webhook: sent
    the updates of GPU Pods (`requests_gpus`, the CREATE condition) that lift Kueue's gate."""
    return {
        **pod_update,
        "name": GATE_WEBHOOK,
        "timeoutSeconds": 5,
        "failurePolicy": "Fail",
        "matchConditions": [
            requests_gpus,
            {"name": GATE_LIFTED, "expression": gate_lifted_expression()},
        ],
    }
