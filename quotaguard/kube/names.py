"""Names other projects fix, each in one place: API groups, queue labels, GPU resources."""

from __future__ import annotations

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")  # preferred first
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# The scheduling gate Kueue's pod webhook puts on a Pod it queues, removed at admission.
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
# Who removes that gate: Kueue's controller as its release manifests install it.
KUEUE_CONTROLLER = "system:serviceaccount:kueue-system:kueue-controller-manager"

VOLCANO_GROUP = "scheduling.volcano.sh"
VOLCANO_VERSION = "v1beta1"

# The NVIDIA device plugin's resources: whole GPUs, MIG slices by profile, shared GPUs.
GPU_RESOURCE = "nvidia.com/gpu"
# the GPU operator's ConfigMap of mig-parted configs (mig-manager applies them) and its key
MIG_PARTED_CONFIGMAP = "default-mig-parted-config"
MIG_PARTED_CONFIG_KEY = "config.yaml"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
# The extended resource every DRA DeviceClass serves implicitly (KEP-5004, beta in 1.36):
# `deviceclass.resource.kubernetes.io/<DeviceClass>`; the API server turns a container's request
# for it into a ResourceClaim of the pod.
DRA_EXTENDED_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
# DeviceClasses of GPU DRA drivers (NVIDIA's, AMD's, Intel's), judged GPUs by name when no
# DeviceClass could be read.
KNOWN_GPU_DEVICE_CLASSES = frozenset(
    {"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com"}
)
MIG_PREFIX = "nvidia.com/mig-"
# The prefixes of every GPU resource name, for byte-level pre-filters; which names count as
# GPUs (by exact name: not HAMi's nvidia.com/gpumem) is kube.podspec.is_gpu_resource.
GPU_PREFIXES = (GPU_RESOURCE, MIG_PREFIX)

# GPUs that are not counted in whole units, so no quota can hold them (see
# kube.podspec.ungoverned_gpu_resource): HAMi's shares of an NVIDIA GPU (next to its
# nvidia.com/gpu, the number of virtual GPUs) ...
HAMI_RESOURCES = frozenset(
    {"nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"}
)
# ... and any extended resource whose name looks like a GPU or another accelerator (amd.com/gpu,
# gpu.intel.com/i915, gpu.intel.com/xe, habana.ai/gaudi, aws.amazon.com/neuron, google.com/tpu,
# huawei.com/Ascend910, cambricon.com/mlu, ...). One pattern for Python's re and for the CEL
# matches() (RE2) of the webhook registrations alike: a search, not anchored, no backslashes.
ACCELERATOR_PATTERN = (
    "(?i)(gpu|cuda|neuron|gaudi|habana|ascend|accel|fpga|qaic"
    "|(^|[^a-z])(tpu|npu|xpu|ipu|mlu|dcu|gcu|vpu))"
)
# KAI scheduler's share of a GPU, asked for by pod annotations (no resource at all) with
# `schedulerName: kai-scheduler`.
KAI_SCHEDULER = "kai-scheduler"
KAI_SHARE_ANNOTATIONS = ("gpu-fraction", "gpu-memory", "gpu-fraction-num-devices")

# Kueue's Configuration as its release keeps it (its deviceClassMappings name the resources
# Kueue counts DRA devices under)
KUEUE_CONFIGMAP = "kueue-manager-config"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
DEFAULT_KUEUE_NAMESPACE = "kueue-system"
