"""The engine reads each object of a request once.

Its kind is looked up, its skeleton shape-checked and its pod templates resolved once per
object (the request's object, the stored one on UPDATE, the object an UPDATE's restore patch
makes), whatever mutation, validation, restoration and the provenance checks then ask of it.
Counted by profiling every call into `kube/kinds.py` and `admission/shape.py` per request.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest

from quotaguard.admission import engine
from quotaguard.admission.reviews import make_review
from quotaguard.kube.kinds import KINDS
from quotaguard.kube.trainingruntime import runtimes_of
from quotaguard.policy.model import TenantPolicy

from .builders import applied, gpu, of_kind, pod, template

# Functions that read an object whole; each may see one object once per request.
ONCE_AN_OBJECT = {
    ("kinds.py", "kind_of"),
    ("shape.py", "check_kind_object"),
    ("podspec.py", "templates_of_kind"),
}


class Calls:
    def __init__(self) -> None:
        self.per_object: Counter[tuple[str, str, int]] = Counter()
        self.per_file: Counter[str] = Counter()
        self.read: set[int] = set()  # the objects the engine read (an AppWrapper's components
        # are parts of one, checked and walked as such)

    def more_than_once(self) -> list[tuple[str, str, int]]:
        assert self.read, "the engine read no object"
        return [key for key, count in self.per_object.items() if count > 1 and key[2] in self.read]


@contextmanager
def counted() -> Iterator[Calls]:
    calls = Calls()

    def profile(frame: FrameType, event: str, _: Any) -> None:
        if event != "call":
            return
        file = frame.f_code.co_filename.rsplit("/", 1)[-1]
        if file in ("kinds.py", "shape.py") and "/quotaguard/" in frame.f_code.co_filename:
            calls.per_file[file] += 1
        key = (file, frame.f_code.co_name)
        if key == ("reading.py", "__init__"):
            calls.read.add(id(frame.f_locals["obj"]))
        if key in ONCE_AN_OBJECT:
            calls.per_object[(*key, id(frame.f_locals["obj"]))] += 1

    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(None)


def decide(policy: TenantPolicy, body: Any, path: Any) -> Calls:
    """Calls of one review, with a TrainJob runtime snapshot as the live webhook has one."""
    with counted() as calls:
        engine.review(policy, body, operation_path=path, runtimes=runtimes_of([]))
    return calls


def gpu_object(kind_id: str, gpus: int = 1) -> dict[str, Any]:
    return of_kind(kind_id, template(gpu(gpus)), name="w")


@pytest.mark.parametrize("path", ["mutate", "validate"])
@pytest.mark.parametrize("backend", ["kueue", "volcano"])
@pytest.mark.parametrize("kind_id", [kind.id for kind in KINDS])
def test_a_create_reads_its_object_once(make_policy, kind_id, backend, path) -> None:
    policy = make_policy(backend=backend)
    calls = decide(policy, make_review(gpu_object(kind_id), namespace="training"), path)
    assert calls.more_than_once() == []


@pytest.mark.parametrize("path", ["mutate", "validate"])
@pytest.mark.parametrize("kind_id", ["Pod", "Job", "JobSet", "Deployment", "VolcanoJob"])
def test_an_update_reads_each_object_once(policy, kind_id, path) -> None:
    created = make_review(gpu_object(kind_id), namespace="training")
    mutation = engine.decide(policy, created["request"], operation_path="mutate")
    stored = applied(created["request"]["object"], mutation)
    for changed in (stored, gpu_object(kind_id, gpus=2)):
        body = make_review(changed, namespace="training", operation="UPDATE", old_object=stored)
        calls = decide(policy, body, path)
        assert calls.more_than_once() == []


def test_a_gpu_pod_is_read_in_a_handful_of_calls(policy) -> None:
    obj = pod(gpu(), labels={"app": "web"}, annotations={"quotaguard.dev/gpu-memory": "8Gi"})
    body = make_review(obj, namespace="inference")
    for path in ("mutate", "validate"):
        calls = decide(policy, body, path)
        # One kind lookup, the owner check and the queue label places; the skeleton's checks.
        assert calls.per_file["kinds.py"] <= 4, calls.per_file
        assert calls.per_file["shape.py"] <= 3, calls.per_file
