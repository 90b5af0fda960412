"""What to write to each node this interval, from the layout plan and the nodes' progress (pure).

Nodes the plan starts get `progress.start`; nodes already changing get `progress.step`. The
controller turns each Update into one node patch (`patch_body`), guarded by the node's
resourceVersion, so two writers never both move one node.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from quotaguard.geometry.layout_planner import LayoutPlan
from quotaguard.geometry.nodes import NodeView
from quotaguard.geometry.progress import (
    CHANGED_AT_ANNOTATION,
    PROGRESS_ANNOTATION,
    Limits,
    Observed,
    Update,
    start,
    step,
)
from quotaguard.policy.model import TenantPolicy


def _observed(view: NodeView) -> Observed:
    return Observed(view.unschedulable, view.gpu_pods, view.labels, view.allocatable)


def next_updates(
    policy: TenantPolicy, plan: LayoutPlan, views: Sequence[NodeView], now: float
) -> list[tuple[NodeView, Update]]:
    """Every node update the plan and the changes in progress call for (empty unless the
    geometry mode is apply)."""
    geometry = policy.spec.geometry
    if geometry is None or geometry.mode != "apply" or plan.mode != "apply":
        return []
    found: list[tuple[NodeView, Update]] = []
    for view in views:
        pool = view.pool
        if pool is None or view.gpu is None:
            continue
        if view.progress is not None:
            labels_of = {
                name: layout.labels(pool_shares=pool.shares)
                for name, layout in pool.layouts.items()
            }
            expected = {
                name: layout.offers(view.gpu, view.gpus) for name, layout in pool.layouts.items()
            }
            limits = Limits(pool.pool.drain, pool.pool.drain_timeout, geometry.change_timeout)
            update = step(
                view.progress,
                _observed(view),
                limits=limits,
                labels_of=labels_of,
                expected=expected,
                now=now,
            )
        else:
            row = plan.node(view.name)
            if row is None or row.action != "start" or row.target is None:
                continue
            update = start(view.current, row.target, _observed(view), now)
        if not update.empty:
            found.append((view, update))
    return found


def patch_body(update: Update, resource_version: str | None) -> dict[str, Any]:
    """The node patch of an update (labels and annotations set to None are removed)."""
    metadata: dict[str, Any] = {}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    if update.labels:
        metadata["labels"] = dict(update.labels)
    annotations: dict[str, str | None] = {}
    if update.progress is not None:
        annotations[PROGRESS_ANNOTATION] = update.progress.to_annotation()
    elif update.clear:
        annotations[PROGRESS_ANNOTATION] = None
    if update.changed_at is not None:
        annotations[CHANGED_AT_ANNOTATION] = f"{update.changed_at:.0f}"
    if annotations:
        metadata["annotations"] = annotations
    body: dict[str, Any] = {"metadata": metadata}
    if update.unschedulable is not None:
        body["spec"] = {"unschedulable": update.unschedulable}
    return body


def describe(body: Mapping[str, Any]) -> str:
    return json.dumps(body, sort_keys=True)
