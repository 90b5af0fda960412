"""The planning cycle: the one composition of capacity, layouts, demand, quota plan and report
that the controller, `quotaguard plan` and the simulator share (`plan_cycle`)."""

from quotaguard.planning.cycle import (
    WEIGHT_HOLD_FRACTION,
    ClusterSeen,
    Cycle,
    CycleReport,
    CycleSettings,
    CycleState,
    plan_cycle,
    seen_in_snapshot,
)

__all__ = [
    "WEIGHT_HOLD_FRACTION",
    "ClusterSeen",
    "Cycle",
    "CycleReport",
    "CycleSettings",
    "CycleState",
    "plan_cycle",
    "seen_in_snapshot",
]
