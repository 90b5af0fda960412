"""The JSON Patch applies to the object as it arrived: escaping, missing maps, op order."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from quotaguard.admission import mutate
from quotaguard.admission.patch import PatchBuilder, escape, resolve

from .builders import applied, gpu, job, pod


@pytest.mark.parametrize(
    ("key", "escaped"),
    [
        ("quotaguard.dev/tenant", "quotaguard.dev~1tenant"),
        ("a~b", "a~0b"),
        ("a~1b/c", "a~01b~1c"),  # "~" first, or "~1" would turn into "/"
        ("plain", "plain"),
    ],
)
def test_escape_per_rfc6901(key, escaped):
    assert escape(key) == escaped
    document = {"m": {key: 1}}
    assert resolve(document, f"/m/{escaped}") == 1


def test_builder_creates_missing_maps_in_one_add():
    document = {"metadata": {"name": "x"}, "spec": {"template": {"spec": {}}}}
    builder = PatchBuilder(document)
    builder.set("/spec/template/metadata/annotations", "a/b", "1")
    builder.set("/spec/template/metadata/labels", "c", "2")
    builder.set("/metadata/annotations", "d~e", "3")
    ops = builder.ops()
    assert {
        "op": "add",
        "path": "/spec/template/metadata",
        "value": {"annotations": {"a/b": "1"}, "labels": {"c": "2"}},
    } in ops
    assert {"op": "add", "path": "/metadata/annotations", "value": {"d~e": "3"}} in ops
    result = jsonpatch.apply_patch(document, ops)
    assert result["spec"]["template"]["metadata"]["annotations"] == {"a/b": "1"}
    assert result["metadata"]["annotations"] == {"d~e": "3"}


def test_builder_adds_replaces_and_skips_equal_values():
    document = {"metadata": {"annotations": {"same": "v", "other": "old"}}}
    builder = PatchBuilder(document)
    builder.set("/metadata/annotations", "same", "v")
    builder.set("/metadata/annotations", "other", "new")
    builder.set("/metadata/annotations", "k8s.io/new", "x")
    assert builder.ops() == [
        {"op": "replace", "path": "/metadata/annotations/other", "value": "new"},
        {"op": "add", "path": "/metadata/annotations/k8s.io~1new", "value": "x"},
    ]


def test_builder_replaces_a_null_map():
    document = {"metadata": {"annotations": None}}
    builder = PatchBuilder(document)
    builder.set("/metadata/annotations", "k", "v")
    assert jsonpatch.apply_patch(document, builder.ops()) == {
        "metadata": {"annotations": {"k": "v"}}
    }


OBJECTS = {
    "pod without metadata maps": pod(gpu(1), annotations={"quotaguard.dev/gpu-memory": "8Gi"}),
    "pod with labels and annotations": pod(
        gpu(1),
        annotations={"quotaguard.dev/gpu-memory": "8Gi", "x/y": "z"},
        labels={"app": "a"},
        nodeSelector={"disk": "ssd"},
    ),
    "pod with no metadata at all": {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {"containers": [gpu(2)]},
    },
    "job whose template has no metadata": job(),
}


@pytest.mark.parametrize("name", list(OBJECTS))
@pytest.mark.parametrize("namespace", ["inference", "training", "nb-a"])
def test_patch_applies_and_matches_the_intent(policy, name, namespace):
    obj = OBJECTS[name]
    original = copy.deepcopy(obj)
    decision = mutate(policy, obj, namespace)
    assert decision.allowed, decision.message
    result = applied(obj, decision)  # raises if any op does not apply
    assert obj == original
    metadata = result["metadata"]
    assert metadata["annotations"]["quotaguard.dev/tenant"] == policy.tenant_of(namespace).name
    assert (
        metadata["labels"]["kueue.x-k8s.io/queue-name"] == policy.tenant_of(namespace).local_queue
    )
    for key, value in original.get("metadata", {}).get("annotations", {}).items():
        assert metadata["annotations"][key] == value  # nothing of the user's is lost


def test_ops_are_only_add_remove_replace_with_escaped_keys(policy):
    obj = pod(gpu(1), annotations={"quotaguard.dev/gpu-memory": "8Gi"})
    decision = mutate(policy, obj, "inference")
    assert {op["op"] for op in decision.patch} <= {"add", "remove", "replace"}
    paths = [op["path"] for op in decision.patch]
    assert "/spec/containers/0/resources/limits/nvidia.com~1gpu" in paths
    assert "/spec/containers/0/resources/limits/nvidia.com~1mig-1g.10gb" in paths
    assert "/metadata/annotations/quotaguard.dev~1tenant" in paths
