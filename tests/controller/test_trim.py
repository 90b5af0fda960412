"""What the caches keep is enough: the planner reads the same from a trimmed object as from the
whole one, even from list items that carry no kind or apiVersion."""

from __future__ import annotations

import copy

import pytest

from quotaguard.controller.trim import (
    pod_group_trimmer,
    pod_line_filter,
    pod_trimmer,
    trim_node,
    whole_spec_trimmer,
    workload_trimmer,
)
from quotaguard.quota.cluster import parse_objects

GPU = frozenset({"nvidia.com/gpu", "nvidia.com/mig-1g.10gb"})
NOISE = {"managedFields": [{"manager": "x"}], "annotations": {"big": "x" * 1000}}

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1", "labels": {"product": "h100"}, **NOISE},
    "spec": {
        "unschedulable": True,
        "taints": [{"key": "nvidia.com/gpu.unhealthy", "effect": "NoSchedule"}],
    },
    "status": {
        "allocatable": {"nvidia.com/gpu": "8", "cpu": "64"},
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "MemoryPressure", "status": "False"},
        ],
        "images": [{"names": ["a"] * 50}],
    },
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "p1",
        "namespace": "research",
        "labels": {"kueue.x-k8s.io/queue-name": "research", "app": "x"},
        "annotations": {"scheduling.k8s.io/group-name": "pg1", "big": "x" * 1000},
        "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
        ],
        "managedFields": [{"manager": "x"}],
    },
    "spec": {
        "nodeName": "n1",
        "nodeSelector": {"product": "h100"},
        "initContainers": [
            {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
            {
                "name": "side",
                "restartPolicy": "Always",
                "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}},
            },
        ],
        "containers": [
            {
                "name": "main",
                "image": "x",
                "env": [{"name": "A", "value": "b"}],
                "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1"}},
            }
        ],
    },
    "status": {"phase": "Running", "podIP": "10.0.0.1"},
}
WORKLOAD = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Workload",
    "metadata": {"name": "w1", "namespace": "research", **NOISE},
    "spec": {
        "queueName": "research",
        "podSets": [
            {
                "name": "main",
                "count": 3,
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {
                        "nodeSelector": {"product": "h100"},
                        "containers": [
                            {
                                "name": "c",
                                "image": "x",
                                "resources": {"requests": {"nvidia.com/gpu": "2"}},
                            }
                        ],
                    },
                },
            }
        ],
    },
    "status": {
        "admission": {
            "clusterQueue": "research",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"nvidia.com/gpu": "h100"},
                    "resourceUsage": {"nvidia.com/gpu": "6"},
                    "count": 3,
                }
            ],
        },
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "message": "m"},
            {"type": "Admitted", "status": "True"},
        ],
    },
}
CLUSTER_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ClusterQueue",
    "metadata": {"name": "research", **NOISE},
    "spec": {
        "cohortName": "pool",
        "fairSharing": {"weight": "1500m"},
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "h100",
                        "resources": [
                            {"name": "nvidia.com/gpu", "nominalQuota": "8", "borrowingLimit": "4"}
                        ],
                    }
                ],
            }
        ],
    },
    "status": {"flavorsUsage": []},
}
POD_GROUP = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "PodGroup",
    "metadata": {"name": "pg1", "namespace": "research", **NOISE},
    "spec": {"queue": "research", "minMember": 2, "minResources": {"nvidia.com/gpu": "4"}},
    "status": {"phase": "Running", "running": 2},
}
VOLCANO_QUEUE = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "Queue",
    "metadata": {"name": "research", **NOISE},
    "spec": {
        "weight": 2,
        "deserved": {"nvidia.com/gpu": "6"},
        "capability": {"nvidia.com/gpu": "10"},
        "guarantee": {"resource": {"nvidia.com/gpu": "2"}},
    },
}

CASES = [
    (NODE, trim_node),
    (POD, pod_trimmer(GPU)),
    (WORKLOAD, workload_trimmer("kueue.x-k8s.io/v1beta2")),
    (CLUSTER_QUEUE, whole_spec_trimmer("kueue.x-k8s.io/v1beta2", "ClusterQueue")),
    (POD_GROUP, pod_group_trimmer("scheduling.volcano.sh/v1beta1")),
    (VOLCANO_QUEUE, whole_spec_trimmer("scheduling.volcano.sh/v1beta1", "Queue")),
]


def as_list_item(obj: dict) -> dict:
    item = copy.deepcopy(obj)
    item.pop("kind")
    item.pop("apiVersion")
    return item


@pytest.mark.parametrize(("obj", "trim"), CASES, ids=[c[0]["kind"] for c in CASES])
def test_the_planner_reads_the_same_from_the_trimmed_list_item(obj, trim):
    whole = parse_objects([obj], gpu_resources=GPU)
    trimmed = trim(as_list_item(obj))
    assert trimmed is not None
    assert parse_objects([trimmed], gpu_resources=GPU) == whole
    assert whole.problems == ()
    assert len(repr(trimmed)) < len(repr(obj))
    assert "managedFields" not in trimmed["metadata"]


def test_pods_that_hold_no_gpus_are_not_kept():
    trim = pod_trimmer(GPU)
    finished = copy.deepcopy(POD)
    finished["status"]["phase"] = "Succeeded"
    cpu_only = copy.deepcopy(POD)
    cpu_only["spec"] = {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}
    assert trim(finished) is None and trim(cpu_only) is None


def test_the_line_filter_only_rejects_lines_without_gpu_names():
    keep = pod_line_filter(frozenset({"example.com/gpu"}))
    assert keep(b'{"limits":{"nvidia.com/gpu":"1"}}')
    assert keep(b'{"limits":{"nvidia.com/mig-2g.20gb":"1"}}')
    assert keep(b'{"limits":{"example.com/gpu":"1"}}')
    assert not keep(b'{"limits":{"cpu":"1"}}')
