"""Label and annotation names admission reads and writes (fixed by the admission contract)."""

from __future__ import annotations

from quotaguard.kube.names import KUEUE_QUEUE_LABEL

__all__ = ["KUEUE_QUEUE_LABEL"]

# Hints a workload gives (annotations on the Pod or on the pod template of a Job).
GPU_CLASS_HINT = "quotaguard.dev/gpu-class"
GPU_MEMORY_HINT = "quotaguard.dev/gpu-memory"
REWRITE_HINT = "quotaguard.dev/rewrite"

# Provenance written by mutation.
TENANT_ANNOTATION = "quotaguard.dev/tenant"
REWRITTEN_ANNOTATION = "quotaguard.dev/rewritten"
# What mutation decided for a pod template: its containers' GPU requests (see
# quotaguard.admission.workload.gpu_ask). An object made from the template is believed decided
# only while it asks for exactly these.
DECIDED_ANNOTATION = "quotaguard.dev/decided-gpus"

# Queue references of the two backends.
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
VOLCANO_SCHEDULER = "volcano"
DEFAULT_SCHEDULER = "default-scheduler"
