"""What the controller remembers of the quotas it moved: each quota's last change, for the
report's `lastChange` (in `apply` the writes that landed, in `recommend` the targets that
moved), and the report of an interval with them and the queues' conflicts, built in one go."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from quotaguard.controller.queue_writer import WriteOutcome
from quotaguard.kube.values import utc_timestamp
from quotaguard.planning.cycle import CycleReport
from quotaguard.policy.model import Mode
from quotaguard.quota.queues import QueueState
from quotaguard.quota.quota_planner import Plan
from quotaguard.quota.quota_report import ConflictRow, LastChange, QuotaRow, TenantRow

QuotaKey = tuple[str, str]  # tenant, class


class QuotaMoves:
    """Each quota's last move (touched by the event loop only)."""

    def __init__(self) -> None:
        self._changes: dict[QuotaKey, LastChange] = {}
        # the last target of each quota planned in recommend mode, or moved in apply
        self._targets: dict[QuotaKey, int] = {}

    def note(
        self,
        the_plan: Plan,
        current: Mapping[str, QueueState],
        outcomes: Sequence[WriteOutcome],
        mode: Mode,
        now: float,
    ) -> None:
        """The quotas this interval moved: written (apply), or planned elsewhere (recommend)."""
        written = {o.queue for o in outcomes if o.result.wrote}
        for tenant in the_plan.tenants:
            state = current.get(tenant.name)
            for row in tenant.classes:
                key = (tenant.name, row.class_name)
                if mode == "apply":
                    before_quota = state.quotas.get(row.class_name) if state else None
                    before = before_quota.nominal if before_quota else None
                    moved = tenant.queue in written and before != row.nominal
                else:
                    before = self._targets.get(key)
                    moved = before is not None and before != row.nominal
                if moved or mode != "apply":
                    self._targets[key] = row.nominal
                if moved:
                    self._changes[key] = {
                        "at": utc_timestamp(now),
                        "from": before,
                        "to": row.nominal,
                        "reason": row.reason,
                        "applied": mode == "apply",
                    }

    def report(self, planned: CycleReport, outcomes: Sequence[WriteOutcome]) -> CycleReport:
        """The interval's report: the cycle's, each quota's `lastChange` and each tenant's
        `conflicts` (the queue fields another manager applied, not written)."""
        conflicts = {o.queue: o.conflicts for o in outcomes if o.conflicts}

        def tenant_row(tenant: TenantRow) -> TenantRow:
            rows: list[QuotaRow] = [
                {**row, "lastChange": self._changes.get((tenant["name"], row["class"]))}
                for row in tenant["classes"]
            ]
            said: list[ConflictRow] = [
                {"field": c.field, "manager": c.manager} for c in conflicts.get(tenant["queue"], ())
            ]
            return {**tenant, "classes": rows, "conflicts": said}

        return {**planned, "tenants": [tenant_row(tenant) for tenant in planned["tenants"]]}
