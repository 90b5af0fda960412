"""The controller's hand on node layouts: one guarded node patch per update, an Event and the
metric. Only the leader calls it, and only in geometry mode apply; a conflict (the node changed
since it was read, e.g. by another writer) skips the node until the next interval."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quotaguard.controller.queue_writer import emit_event, event_body
from quotaguard.controller.watch import JsonObject, Watch
from quotaguard.geometry.node_updates import next_updates, patch_body
from quotaguard.geometry.nodes import NodeView
from quotaguard.geometry.progress import Update
from quotaguard.kube.client import status_code
from quotaguard.metrics.controller_metrics import LAYOUT_CHANGES
from quotaguard.planning.cycle import Cycle
from quotaguard.policy.model import TenantPolicy

log = logging.getLogger("quotaguard.controller.node_layout_writes")


@dataclass(frozen=True, slots=True)
class NodeWrite:
    node: str
    result: str  # patched, conflict, error, not_leader
    outcome: str | None = None


def change_layouts(
    core: Any,
    policy: TenantPolicy,
    cycle: Cycle,
    nodes: Watch | None,
    *,
    may_write: Callable[[], bool],
    identity: str,
    request_timeout: float,
) -> tuple[NodeWrite, ...]:
    """Start the changes the cycle's layout plan starts and move those in progress one step
    (only in geometry mode apply; blocking, a worker thread); `nodes`: the nodes' watch."""
    views = cycle.views if cycle.layouts.nodes else ()
    updates = next_updates(policy, cycle.layouts, views, cycle.at)
    if not updates:
        return ()
    cached = {obj["metadata"]["name"]: obj for obj in (nodes.objects() if nodes else [])}
    return tuple(
        apply_updates(
            core,
            updates,
            cached,
            may_write=may_write,
            identity=identity,
            request_timeout=request_timeout,
        )
    )


def apply_updates(
    core: Any,
    updates: Sequence[tuple[NodeView, Update]],
    cached: Mapping[str, JsonObject],
    *,
    may_write: Callable[[], bool],
    identity: str,
    request_timeout: float = 4.0,
) -> list[NodeWrite]:
    """Patch each node (blocking; runs in a worker thread)."""
    results = []
    for view, update in updates:
        if not may_write():
            results.append(NodeWrite(view.name, "not_leader"))
            break
        node = cached.get(view.name) or {}
        version = (node.get("metadata") or {}).get("resourceVersion")
        body = patch_body(update, version)
        try:
            core.patch_node(
                view.name, body, _preload_content=False, _request_timeout=request_timeout
            )
        except Exception as exc:
            code = status_code(exc)
            result = "conflict" if code == 409 else "error"
            log.warning("patching node %s for its layout failed (%s): %s", view.name, code, exc)
            results.append(NodeWrite(view.name, result))
            continue
        if update.outcome is not None:
            LAYOUT_CHANGES.labels(outcome=update.outcome).inc()
        if update.event is not None:
            reason, message, kind = update.event
            event = event_body(
                node or {"kind": "Node", "apiVersion": "v1", "metadata": {"name": view.name}},
                reason=reason,
                message=message,
                instance=identity,
            )
            event["type"] = kind
            emit_event(core, event)
            log.info("node %s: %s", view.name, message, extra={"node": view.name})
        results.append(NodeWrite(view.name, "patched", update.outcome))
    return results
