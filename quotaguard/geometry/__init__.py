"""MIG layouts and GPU sharing that follow demand: layouts, the layout planner, node progress."""

from quotaguard.geometry.layout_capacity import LayoutCapacity, plan_capacity
from quotaguard.geometry.layout_planner import LayoutPlan, NodeLayout, plan_layouts
from quotaguard.geometry.layout_report import LayoutRow, format_layouts, layout_rows
from quotaguard.geometry.node_updates import next_updates, patch_body
from quotaguard.geometry.nodes import NodeView, node_views

__all__ = [
    "LayoutCapacity",
    "LayoutPlan",
    "LayoutRow",
    "NodeLayout",
    "NodeView",
    "format_layouts",
    "layout_rows",
    "next_updates",
    "node_views",
    "patch_body",
    "plan_capacity",
    "plan_layouts",
]
