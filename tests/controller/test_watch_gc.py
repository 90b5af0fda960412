"""The initial list pauses the cyclic garbage collector per page and always gives it back."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from quotaguard.controller.trim import trim_node
from quotaguard.controller.watch import ResourceKind, Watch, WatchSettings

from .fakes import FakeApiServer, FakeCore
from .test_watch import node


@pytest.fixture
def server() -> FakeApiServer:
    server = FakeApiServer()
    for index in range(5):
        server.put("v1/nodes", node(f"n{index}"))
    return server


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_paused_while_a_page_is_trimmed_and_back_on_afterwards(server):
    seen = []

    def trim(obj):
        seen.append(gc.isenabled())
        return trim_node(obj)

    gc.enable()
    kind = ResourceKind("nodes", FakeCore(server).list_node, trim)
    Watch(kind, WatchSettings(page_size=2)).list_once()
    assert seen == [False] * 5
    assert gc.isenabled()


def test_a_failing_trim_leaves_the_collector_on(server):
    def trim(obj):
        raise ValueError("broken object")

    gc.enable()
    watch = Watch(ResourceKind("nodes", FakeCore(server).list_node, trim))
    with pytest.raises(ValueError):
        watch.list_once()
    assert gc.isenabled()


def test_a_collector_the_process_turned_off_stays_off(server):
    gc.disable()
    Watch(ResourceKind("nodes", FakeCore(server).list_node, trim_node)).list_once()
    assert not gc.isenabled()
