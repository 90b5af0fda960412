"""List-then-watch into a cache: pagination, events, bookmarks, 410 Gone, errors, GPU pod filter."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from quotaguard.controller.backoff import Backoff
from quotaguard.controller.trim import pod_line_filter, pod_trimmer, trim_node
from quotaguard.controller.watch import ResourceKind, Watch, WatchSettings, wait_synced

from .fakes import FakeApiServer, FakeCore, api_error

GPU = frozenset({"nvidia.com/gpu", "nvidia.com/mig-1g.10gb"})


def node(name: str, gpus: int = 8) -> dict:
    return {
        "metadata": {"name": name, "labels": {"a": "b"}, "managedFields": [{"big": "x" * 100}]},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"},
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure"}],
        },
    }


def pod(name: str, gpus: int | None, phase: str = "Running", namespace: str = "research") -> dict:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "1"}
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
        },
        "status": {"phase": phase},
    }


@dataclass
class CountingBackoff(Backoff):
    """Records how many failures were counted before each delay."""

    counted: list[int] = field(default_factory=list)

    def next_delay(self) -> float:
        self.counted.append(self.failures)
        return super().next_delay()


def fast_settings(**kw) -> WatchSettings:
    return WatchSettings(backoff=Backoff(base=0.001, cap=0.002), **kw)


def run_in_thread(watch: Watch) -> threading.Thread:
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    return thread


def until(condition, timeout: float = 5.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


def node_watch(server: FakeApiServer, **kw) -> Watch:
    return Watch(ResourceKind("nodes", FakeCore(server).list_node, trim_node), fast_settings(**kw))


def test_initial_list_is_paginated_trimmed_and_synced(server):
    for index in range(5):
        server.put("v1/nodes", node(f"n{index}"))
    watch = node_watch(server, page_size=2)
    assert not watch.synced
    watch.list_once()
    assert watch.synced
    names = sorted(o["metadata"]["name"] for o in watch.objects())
    assert names == ["n0", "n1", "n2", "n3", "n4"]
    lists = [c for c in server.calls if c[0] == "list"]
    assert len(lists) == 3 and lists[1][2]["_continue"] == "2"
    assert all(c[2]["_preload_content"] is False for c in lists)
    cached = watch.objects()[0]
    assert cached["kind"] == "Node" and "managedFields" not in cached["metadata"]
    assert cached["status"]["allocatable"] == {"nvidia.com/gpu": "8"}
    assert watch.resource_version == str(server.version)


def test_watch_applies_events_and_resumes_from_the_last_resource_version(server):
    server.put("v1/nodes", node("n1"))
    watch = node_watch(server)
    thread = run_in_thread(watch)
    until(lambda: watch.synced)
    server.put("v1/nodes", node("n2"))
    server.put("v1/nodes", node("n1", gpus=4))
    server.delete("v1/nodes", "n2")
    server.bookmark("v1/nodes")
    until(lambda: watch.resource_version == str(server.version))
    by_name = {o["metadata"]["name"]: o for o in watch.objects()}
    assert list(by_name) == ["n1"]
    assert by_name["n1"]["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    watches = [c[2] for c in server.calls if c[0] == "watch"]
    assert all(w["allow_watch_bookmarks"] is True for w in watches)
    assert len({w["resource_version"] for w in watches}) > 1  # it moved forward
    assert [c[0] for c in server.calls].count("list") == 1  # never re-listed
    watch.stop()
    thread.join(2)
    assert not thread.is_alive()


def test_410_gone_on_watch_request_relists_and_is_unsynced_meanwhile(server):
    server.put("v1/nodes", node("n1"))
    watch = node_watch(server)
    synced_at_list: list[bool] = []
    original = server.list_or_watch

    def spy(path, **kwargs):
        if not kwargs.get("watch"):
            synced_at_list.append(watch.synced)
        return original(path, **kwargs)

    server.list_or_watch = spy  # type: ignore[method-assign]
    thread = run_in_thread(watch)
    until(lambda: watch.synced)
    server.fail["watch"] = [api_error(410, "Gone")]
    server.put("v1/nodes", node("n2"))
    until(lambda: watch.stats.gone == 1 and watch.synced and len(watch.objects()) == 2)
    assert synced_at_list == [False, False]  # the first list and the re-list
    watch.stop()
    thread.join(2)


def test_watching_from_a_compacted_version_relists(server):
    server.put("v1/nodes", node("n1"))
    watch = node_watch(server)
    watch.list_once()
    server.put("v1/nodes", node("n2"))
    server.compact("v1/nodes")
    server.put("v1/nodes", node("n3"))
    assert watch.resource_version is not None
    with pytest.raises(Exception) as raised:
        watch.watch_once()
    assert type(raised.value).__name__ == "Gone"


def test_410_error_event_in_the_stream_relists(server):
    server.put("v1/nodes", node("n1"))
    watch = node_watch(server)
    watch.list_once()
    server.log["v1/nodes"].append(
        (server.version + 1, "ERROR", {"kind": "Status", "code": 410, "message": "too old"})
    )
    thread = run_in_thread(watch)
    until(lambda: watch.stats.gone >= 1 and watch.stats.lists >= 2)
    watch.stop()
    thread.join(2)


def test_errors_unsync_back_off_and_relist(server):
    server.put("v1/nodes", node("n1"))
    watch = node_watch(server)
    server.fail["watch"] = [ConnectionResetError("reset"), api_error(500)]
    backoff = watch.settings.backoff = CountingBackoff(base=0.001, cap=0.002)
    thread = run_in_thread(watch)
    until(lambda: watch.stats.errors == 2 and watch.synced)
    assert watch.stats.lists == 3  # the first list, then one per error
    assert backoff.counted == [0, 1]  # the second retry waited one doubling longer than the first
    # A watch opened after the errors and ended cleanly: the next failure starts from `base`.
    until(lambda: watch.stats.watches >= 2)
    assert backoff.failures == 0
    watch.stop()
    thread.join(2)


def test_a_failing_api_server_keeps_the_watch_unsynced(server):
    server.down = True
    watch = node_watch(server)
    thread = run_in_thread(watch)
    until(lambda: watch.stats.errors >= 3)
    assert not watch.synced and not wait_synced([watch], 0.05)
    server.down = False
    until(lambda: watch.synced)
    watch.stop()
    thread.join(2)


def test_gpu_pods_only_and_lines_without_gpus_are_not_decoded(server):
    server.put("v1/pods", pod("gpu", 2))
    server.put("v1/pods", pod("cpu", None))
    server.put("v1/pods", pod("done", 1, phase="Succeeded"))
    core = FakeCore(server)
    kind = ResourceKind(
        "pods", core.list_pod_for_all_namespaces, pod_trimmer(GPU), keep_line=pod_line_filter(GPU)
    )
    watch = Watch(kind, fast_settings())
    thread = run_in_thread(watch)
    until(lambda: watch.synced)
    assert [o["metadata"]["name"] for o in watch.objects()] == ["gpu"]
    cached = watch.objects()[0]
    assert "annotations" not in cached["metadata"] and cached["kind"] == "Pod"
    server.put("v1/pods", pod("cpu2", None))
    server.put("v1/pods", pod("gpu2", 1))
    server.put("v1/pods", pod("gpu", 2, phase="Succeeded"))  # finished: leaves the cache
    until(lambda: watch.resource_version == str(server.version))
    assert [o["metadata"]["name"] for o in watch.objects()] == ["gpu2"]
    assert watch.stats.skipped_lines == 1
    watch.stop()
    thread.join(2)


def test_upsert_keeps_the_newer_object(server):
    watch = node_watch(server)
    newer = server.put("v1/nodes", node("n1", gpus=2))
    watch.upsert(newer)
    older = {**node("n1", gpus=9), "metadata": {"name": "n1", "resourceVersion": "1"}}
    watch.upsert(older)
    assert watch.objects()[0]["status"]["allocatable"]["nvidia.com/gpu"] == "2"
