"""The quota planner: capacity and demand in, quota targets and fair-share weights out.

Pure functions on plain data; reading the cluster and writing queues happen elsewhere:

    snapshot | watches -> class_capacity + demand_of -> plan -> diff -> write
"""

from quotaguard.quota.class_capacity import ClassCapacity, capacities_from_totals, class_capacity
from quotaguard.quota.cluster import (
    ClusterSnapshot,
    ResourceQuota,
    SnapshotError,
    load_snapshot,
    parse_objects,
    parse_snapshot,
)
from quotaguard.quota.demand import ClassDemand, Demand, DemandSmoother, demand_of
from quotaguard.quota.diff import (
    QueueChange,
    QuotaChange,
    diff,
    target_quotas,
)
from quotaguard.quota.queues import QueueState, current_state
from quotaguard.quota.quota_planner import ClassPlan, Plan, TenantPlan, plan
from quotaguard.quota.quota_report import build_report, csv_rows, format_table, to_csv
from quotaguard.quota.weights import UsageHistory, fair_share_weights, usage_in_gpus

__all__ = [
    "ClassCapacity",
    "ClassDemand",
    "ClassPlan",
    "ClusterSnapshot",
    "Demand",
    "DemandSmoother",
    "Plan",
    "QueueChange",
    "QueueState",
    "QuotaChange",
    "ResourceQuota",
    "SnapshotError",
    "TenantPlan",
    "UsageHistory",
    "build_report",
    "capacities_from_totals",
    "class_capacity",
    "csv_rows",
    "current_state",
    "demand_of",
    "diff",
    "fair_share_weights",
    "format_table",
    "load_snapshot",
    "parse_objects",
    "parse_snapshot",
    "plan",
    "target_quotas",
    "to_csv",
    "usage_in_gpus",
]
