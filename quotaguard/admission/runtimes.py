"""A TrainJob whose GPUs come from its runtime: judged with the runtime's trainer resources.

A TrainJob that sets no `spec.trainer.resourcesPerNode` runs each node with the resources of
its runtime's trainer container (a built-in torchtune runtime: `nvidia.com/gpu: 2`). Admission
decides it as if the TrainJob had written them: mutation adds them as `resourcesPerNode`,
rewritten to the tenant's class (they override the runtime's on the trainer's pods), and
validation judges them. A runtime admission cannot read is a denial on CREATE in a tenant's
namespace (the GPUs it would give are unknown), never a silent pass; UPDATEs, which never
deny, are decided as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonpatch

from quotaguard.admission.decision import Decision, Denial, PatchOp, deny
from quotaguard.kube.trainingruntime import (
    TrainingRuntimes,
    runtime_ref,
    with_runtime_resources,
)
from quotaguard.policy.model import TenantPolicy


def unreadable_runtime(
    policy: TenantPolicy,
    obj: Mapping[str, Any],
    namespace: str,
    operation: str,
    runtimes: TrainingRuntimes,
) -> Decision | None:
    """A denial for a TrainJob (`obj`, as the engine's reading found it) created in a tenant's
    namespace whose runtime cannot be read."""
    if operation != "CREATE":
        return None
    tenant = policy.tenant_of(namespace)
    if tenant is None or policy.exempt(namespace):
        return None
    key = runtime_ref(obj, namespace)
    if key is None or runtimes.lookup(key) is not None:
        return None
    kind, _, name = key
    why = f" ({runtimes.error})" if runtimes.error else ""
    return deny(
        [
            Denial(
                "runtime-unreadable",
                f'tenant "{tenant.name}": the TrainJob\'s runtime {kind} "{name}" cannot be '
                f"read by quotaguard{why}, so the GPUs it gives each node cannot be judged: "
                "check spec.runtimeRef (a TrainingRuntime lives in the TrainJob's namespace), "
                "or set spec.trainer.resourcesPerNode and ask the platform team to let "
                "quotaguard read trainingruntimes and clustertrainingruntimes",
            )
        ],
        audit={"tenant": tenant.name},
    )


def with_runtime(obj: dict[str, Any], namespace: str, runtimes: TrainingRuntimes) -> dict[str, Any]:
    """A TrainJob (`obj`) as its pods will ask: with its runtime's trainer resources when
    they can be read, else as it is."""
    key = runtime_ref(obj, namespace)
    runtime = runtimes.lookup(key) if key is not None else None
    if runtime is None:
        return obj
    return with_runtime_resources(obj, runtime) or obj


def patch_from(original: dict[str, Any], effective: dict[str, Any], decision: Decision) -> Decision:
    """`decision`, whose patch applies to `effective`, with a patch that applies to `original`
    instead: the runtime's resources become part of what mutation writes."""
    if effective is original or not decision.allowed or not decision.patch:
        return decision
    mutated = jsonpatch.apply_patch(effective, list(decision.patch))
    ops: tuple[PatchOp, ...] = tuple(jsonpatch.make_patch(original, mutated).patch)
    return Decision(allowed=True, patch=ops, warnings=decision.warnings, audit=decision.audit)
