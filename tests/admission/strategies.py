"""Hypothesis strategies for the workloads admission sees: well-formed Pods, Jobs, Volcano Jobs
and JobSets (and objects of every kind of the table) with GPU requests, hints and queue labels
in the mix."""

from __future__ import annotations

from hypothesis import strategies as st

from quotaguard.admission.names import KUEUE_QUEUE_LABEL
from quotaguard.kube.kinds import KINDS

from .builders import of_kind

NAMESPACES = ["inference", "serving-a", "training", "research-x", "nb-a", "notebooks", "default"]
GPU_RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpu",
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-3g.40gb",
    "nvidia.com/gpu.shared",
]
counts = st.one_of(st.integers(0, 9), st.sampled_from(["1", "2", "8", "0.5", "x"]))


@st.composite
def containers(draw, name):
    resources = {}
    shape = draw(st.integers(0, 9))
    if shape < 6:  # the common case: a few whole GPUs, as users write them
        limits = {"nvidia.com/gpu": draw(st.sampled_from([1, 1, "1", 2, 4]))}
        if draw(st.booleans()):
            limits["cpu"] = "1"
        resources["limits"] = limits
    elif shape < 9:
        limits = draw(st.dictionaries(st.sampled_from(GPU_RESOURCES), counts, max_size=2))
        if draw(st.booleans()):
            limits["cpu"] = "1"
        resources["limits"] = limits
        if draw(st.integers(0, 3)) == 0:
            resources["requests"] = dict(limits)
    found = {"name": name, "image": "app"}
    if resources or draw(st.booleans()):
        found["resources"] = resources
    return found


annotations = st.dictionaries(
    st.sampled_from(
        [
            "quotaguard.dev/gpu-memory",
            "quotaguard.dev/gpu-class",
            "quotaguard.dev/rewrite",
            "a.example/b~c",
        ]
    ),
    st.sampled_from(["8Gi", "24Gi", "40Gi", "100Gi", "h100", "h100-1g.10gb", "shared", "false"]),
    max_size=3,
)


@st.composite
def pod_specs(draw):
    names = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))
    spec = {"containers": [draw(containers(n)) for n in names]}
    if draw(st.booleans()):
        spec["initContainers"] = [draw(containers("init"))]
    if draw(st.integers(0, 3)) == 0:
        spec["nodeSelector"] = draw(
            st.sampled_from([{"zone": "a"}, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}])
        )
    if draw(st.integers(0, 3)) == 0:
        spec["priorityClassName"] = "interactive"
    return spec


@st.composite
def metadatas(draw):
    metadata = {"name": "w"}
    if draw(st.booleans()):
        metadata["annotations"] = draw(annotations)
    if draw(st.integers(0, 3)) == 0:
        metadata["labels"] = {KUEUE_QUEUE_LABEL: draw(st.sampled_from(["training", "x"]))}
    return metadata


@st.composite
def workloads(draw):
    kind = draw(st.sampled_from(["Pod", "Pod", "Job", "VolcanoJob", "JobSet"]))
    metadata = draw(metadatas())
    template = {"spec": draw(pod_specs())}
    if draw(st.booleans()):
        template["metadata"] = draw(metadatas())
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}
    if kind == "Job":
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata,
            "spec": {"template": template},
        }
    if kind == "VolcanoJob":
        other = {"spec": draw(pod_specs())}
        return {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": metadata,
            "spec": {
                "tasks": [{"name": "a", "template": template}, {"name": "b", "template": other}]
            },
        }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {"replicatedJobs": [{"name": "r", "template": {"spec": {"template": template}}}]},
    }


@st.composite
def table_workloads(draw):
    """An object of any kind of the kind table, with one to three pod templates (a TrainJob
    takes the first one's first container's resources)."""
    kind = draw(st.sampled_from([k.id for k in KINDS]))
    templates = []
    for _ in range(draw(st.integers(1, 3))):
        found = {"spec": draw(pod_specs())}
        if draw(st.booleans()):
            found["metadata"] = draw(metadatas())
        templates.append(found)
    obj = of_kind(kind, *templates)
    obj["metadata"] = draw(metadatas())
    return obj
