"""The quota report: one JSON shape for `quotaguard plan --output json` and `GET /reports/quota`,
and the CSV rows and terminal table derived from that same dict."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict

from quotaguard.kube.values import utc_timestamp
from quotaguard.quota.class_capacity import Outage
from quotaguard.quota.cluster import ResourceQuota
from quotaguard.quota.demand import ClassActivity
from quotaguard.quota.queues import QueueState
from quotaguard.quota.quota_planner import ClassPlan, Plan, TenantPlan


class CurrentQuota(TypedDict):
    nominal: int
    borrowingLimit: int | None
    lendingLimit: int | None


class FaultyGpuRow(TypedDict):
    node: str
    gpu: str
    reason: str


class ClassRow(TypedDict):
    name: str
    resource: str
    capacity: int
    distributable: int
    heldOutside: int
    faultyGpus: list[FaultyGpuRow]


# The controller's last move of a quota (`from` is a keyword: the functional form).
LastChange = TypedDict(
    "LastChange", {"at": str, "from": int | None, "to": int, "reason": str, "applied": bool}
)


class ConflictRow(TypedDict):
    """A queue field another field manager applied, left as it is."""

    field: str
    manager: str


# One tenant's quota of one class (`class` is a keyword: the functional form). `idlePods` and
# `idleGpuHours` only with GPU telemetry; `lastChange` only in the controller's report.
QuotaRow = TypedDict(
    "QuotaRow",
    {
        "class": str,
        "resource": str,
        "flavor": str,
        "guaranteed": int,
        "configuredGuarantee": int,
        "max": int | None,
        "nominal": int,
        "target": int,
        "borrowingLimit": int | None,
        "lendingLimit": int,
        "usage": int,
        "pending": int,
        "overQuota": bool,
        "current": CurrentQuota | None,
        "reason": str,
        "allocated": int,
        "used": float | None,
        "idle": int | None,
        "idlePods": NotRequired[list[str]],
        "idleGpuHours": NotRequired[float],
        "lastChange": NotRequired[LastChange | None],
    },
)


class TenantRow(TypedDict):
    """One tenant's queue; `conflicts` only in the controller's report."""

    name: str
    queue: str
    baseWeight: float
    weight: float
    currentWeight: float | None
    flavorOrder: list[str]
    flavorFungibility: dict[str, Any] | None
    classes: list[QuotaRow]
    conflicts: NotRequired[list[ConflictRow]]


class QuotaReport(TypedDict):
    """The report of a quota plan (the planning cycle adds the layouts' `nodes`)."""

    policy: str
    mode: str
    generatedAt: str
    backend: str
    cohort: str
    problems: list[str]
    classes: list[ClassRow]
    tenants: list[TenantRow]
    telemetry: dict[str, Any] | None


def _current(quota: ResourceQuota | None) -> CurrentQuota | None:
    if quota is None:
        return None
    return {
        "nominal": quota.nominal,
        "borrowingLimit": quota.borrowing_limit,
        "lendingLimit": quota.lending_limit,
    }


def _faulty(outage: Outage) -> FaultyGpuRow:
    return {"node": outage.node, "gpu": outage.gpu, "reason": outage.reason}


def _quota_row(
    row: ClassPlan, current: ResourceQuota | None, activity: ClassActivity | None, observed: bool
) -> QuotaRow:
    """The plan's row next to the queue's quota now; allocated against used (`idle` and `used`
    are null without telemetry)."""
    built: QuotaRow = {
        "class": row.class_name,
        "resource": row.resource,
        "flavor": row.flavor,
        "guaranteed": row.guaranteed,
        "configuredGuarantee": row.configured_guarantee,
        "max": row.max,
        "nominal": row.nominal,
        "target": row.target,
        "borrowingLimit": row.borrowing_limit,
        "lendingLimit": row.lending_limit,
        "usage": row.usage,
        "pending": row.pending,
        "overQuota": row.over_quota,
        "current": _current(current),
        "reason": row.reason,
        "allocated": row.usage,
        "used": None,
        "idle": None,
    }
    if observed:
        found = activity or ClassActivity()
        # rounded once here: summed per pod, a small share rounded each time would vanish
        built["used"] = round(found.used, 3)
        built["idle"] = found.idle
        built["idlePods"] = list(found.idle_pods)
        built["idleGpuHours"] = round(found.idle_gpu_hours, 3)
    return built


def _tenant_row(
    tenant: TenantPlan,
    state: QueueState | None,
    activity: Mapping[str, ClassActivity],
    observed: bool,
) -> TenantRow:
    quotas = state.quotas if state is not None else {}
    return {
        "name": tenant.name,
        "queue": tenant.queue,
        "baseWeight": tenant.base_weight,
        "weight": tenant.weight,
        "currentWeight": state.weight if state is not None else None,
        "flavorOrder": list(tenant.flavor_order),
        "flavorFungibility": (
            tenant.fungibility.model_dump(by_alias=True) if tenant.fungibility else None
        ),
        "classes": [
            _quota_row(row, quotas.get(row.class_name), activity.get(row.class_name), observed)
            for row in tenant.classes
        ],
    }


def build_report(
    plan: Plan,
    *,
    current: Mapping[str, QueueState] | None = None,
    generated_at: datetime | None = None,
    activity: Mapping[str, Mapping[str, ClassActivity]] | None = None,
    telemetry: Mapping[str, Any] | None = None,
) -> QuotaReport:
    """The report of a plan; `current` fills each row's `current` (null without it).

    `telemetry` (the GPU telemetry's summary) and `activity` (allocated, used and idle units
    per tenant and class) fill `telemetry` and each row's `idle`/`used`; null without them."""
    current = current or {}
    observed = telemetry is not None and bool(telemetry.get("available"))
    activity = activity or {}
    moment = generated_at or datetime.now(UTC)
    classes: list[ClassRow] = [
        {
            "name": row.name,
            "resource": row.resource,
            "capacity": row.capacity,
            "distributable": row.distributable,
            "heldOutside": row.held_outside,
            "faultyGpus": [_faulty(outage) for outage in row.faulty],
        }
        for row in plan.classes
    ]
    return {
        "policy": plan.policy,
        "mode": plan.mode,
        "generatedAt": utc_timestamp(moment),
        "backend": plan.backend,
        "cohort": plan.cohort,
        "problems": list(plan.problems),
        "classes": classes,
        "tenants": [
            _tenant_row(tenant, current.get(tenant.name), activity.get(tenant.name, {}), observed)
            for tenant in plan.tenants
        ],
        "telemetry": dict(telemetry) if telemetry is not None else None,
    }


CSV_COLUMNS = (
    "tenant",
    "queue",
    "weight",
    "baseWeight",
    "class",
    "resource",
    "capacity",
    "distributable",
    "guaranteed",
    "max",
    "nominal",
    "borrowingLimit",
    "lendingLimit",
    "usage",
    "pending",
    "currentNominal",
    "currentBorrowingLimit",
    "currentLendingLimit",
    "reason",
    # The controller's last move of this quota (absent from `plan`, which sees one moment).
    "lastChangeAt",
    "lastChangeFrom",
    "lastChangeTo",
    "lastChangeReason",
    "lastChangeApplied",
    # GPU telemetry: allocated against used, idle units, faulty GPUs of the class (empty: none)
    "allocated",
    "used",
    "idle",
    "faultyGpus",
    "idleGpuHours",
    "idlePods",  # namespace/pod, separated by spaces
    # the class's units free on counted nodes, and the most of them free on one node
    "free",
    "largestFit",
)


def _cell(value: object) -> str:
    return "" if value is None else str(value)


def _cell_bool(value: object) -> str | None:
    return None if value is None else ("true" if value else "false")


def csv_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """The report as a table: a header, then one row per tenant and class."""
    classes = {row["name"]: row for row in report["classes"]}
    fragmentation = {row["name"]: row for row in report.get("fragmentation") or ()}
    rows = [list(CSV_COLUMNS)]
    for tenant in report["tenants"]:
        for row in tenant["classes"]:
            capacity = classes.get(row["class"], {})
            current = row["current"] or {}
            change = row.get("lastChange") or {}
            values = (
                tenant["name"],
                tenant["queue"],
                tenant["weight"],
                tenant["baseWeight"],
                row["class"],
                row["resource"],
                capacity.get("capacity"),
                capacity.get("distributable"),
                row["guaranteed"],
                row["max"],
                row["nominal"],
                row["borrowingLimit"],
                row["lendingLimit"],
                row["usage"],
                row["pending"],
                current.get("nominal"),
                current.get("borrowingLimit"),
                current.get("lendingLimit"),
                row["reason"],
                change.get("at"),
                change.get("from"),
                change.get("to"),
                change.get("reason"),
                _cell_bool(change.get("applied")),
                row.get("allocated"),
                row.get("used"),
                row.get("idle"),
                len(capacity.get("faultyGpus") or ()) if report.get("telemetry") else None,
                row.get("idleGpuHours"),
                " ".join(row["idlePods"]) if row.get("idlePods") is not None else None,
                fragmentation.get(row["class"], {}).get("free"),
                fragmentation.get(row["class"], {}).get("largestFit"),
            )
            rows.append([_cell(value) for value in values])
    return rows


def to_csv(report: Mapping[str, Any]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(csv_rows(report))
    return buffer.getvalue()


def _grid(header: list[str], rows: list[list[str]], *, right: set[int]) -> list[str]:
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    lines = []
    for line in [header, *rows]:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(line)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def _number(value: object) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _telemetry_lines(report: Mapping[str, Any]) -> list[str]:
    """Each faulty GPU with its reason, then where telemetry came from and what it skipped."""
    lines = [
        f"  {row['name']}: {gpu['node']} GPU {gpu['gpu']} out: {gpu['reason']}"
        for row in report["classes"]
        for gpu in row.get("faultyGpus") or ()
    ]
    telemetry = report.get("telemetry") or {}
    if telemetry:
        warnings = ", ".join(f"{n} {kind}" for kind, n in (telemetry.get("warnings") or {}).items())
        lines.append(
            f"telemetry: {telemetry.get('source') or 'none'}"
            + (f"; {telemetry['note']}" if telemetry.get("note") else "")
            + (f"; skipped: {warnings}" if warnings else "")
        )
    return lines


def _fragmentation_lines(report: Mapping[str, Any]) -> list[str]:
    """A class whose free units would hold a whole node but no node holds one: fragmented."""
    lines = []
    for row in report.get("fragmentation") or ():
        size, free, fits = row["nodeSize"], row["free"], row["largestFit"]
        if size and free >= size > fits:
            lines.append(
                f"  {row['name']}: {free} free but at most {fits} on one node, no whole node "
                f"({size}) free: {row['fragmented']} fragmented (docs/packing.md)"
            )
    return lines


def _flavor_order_lines(report: Mapping[str, Any]) -> list[str]:
    """Which flavor Kueue tries first for the tenants whose lists leave it the choice."""
    lines = []
    for tenant in report["tenants"]:
        order = tenant.get("flavorOrder") or []
        if not order:
            continue
        fungibility = tenant.get("flavorFungibility") or {}
        how = ", ".join(f"{key} {value}" for key, value in fungibility.items())
        lines.append(
            f"{tenant['name']}: Kueue tries {' then '.join(order)}, each on its own quota"
            f" ({how or 'flavorFungibility: Kueue defaults'})"
        )
    return ["", *lines] if lines else []


def format_table(report: Mapping[str, Any]) -> str:
    """A terminal table: capacity per class, then targets per tenant next to the current ones.

    A target that differs from the current quota shows as `current->target`; `-` is
    unbounded (max, borrowing limit) or unknown (no current queue).
    """
    lines = [
        f"policy {report['policy']}  mode {report['mode']}  backend {report['backend']}  "
        f"cohort {report['cohort']}  at {report['generatedAt']}",
        "",
    ]
    fragmentation = {row["name"]: row for row in report.get("fragmentation") or ()}
    class_rows = [
        [
            row["name"],
            row["resource"],
            str(row["capacity"]),
            str(row["heldOutside"]),
            str(row["distributable"]),
            str(len(row.get("faultyGpus") or ())),
            _number(fragmentation.get(row["name"], {}).get("free")),
            _number(fragmentation.get(row["name"], {}).get("largestFit")),
        ]
        for row in report["classes"]
    ]
    lines += _grid(
        ["CLASS", "RESOURCE", "CAPACITY", "OUTSIDE", "DISTRIBUTABLE", "FAULTY", "FREE", "FITS"],
        class_rows,
        right={2, 3, 4, 5, 6, 7},
    )
    lines += _fragmentation_lines(report)
    lines += _telemetry_lines(report)
    lines.append("")
    rows = []
    for tenant in report["tenants"]:
        weight = _number(tenant["weight"])
        if tenant["weight"] != tenant["baseWeight"]:
            weight = f"{weight} (base {_number(tenant['baseWeight'])})"
        for row in tenant["classes"]:
            current = row["current"]

            def moved(key: str, row: Mapping[str, Any] = row, current: Any = current) -> str:
                target = _number(row[key])
                if current is None or current.get(key) == row[key]:
                    return target
                return f"{_number(current.get(key))}->{target}"

            rows.append(
                [
                    tenant["name"],
                    weight,
                    row["class"],
                    str(row["guaranteed"]),
                    _number(row["max"]),
                    moved("nominal"),
                    moved("borrowingLimit"),
                    moved("lendingLimit"),
                    str(row["usage"]),
                    _number(row.get("idle")),
                    str(row["pending"]),
                    row["reason"],
                ]
            )
    header = [
        "TENANT",
        "WEIGHT",
        "CLASS",
        "GUAR",
        "MAX",
        "NOMINAL",
        "BORROW",
        "LEND",
        "USAGE",
        "IDLE",
        "PENDING",
        "REASON",
    ]
    lines += _grid(header, rows, right={3, 4, 5, 6, 7, 8, 9, 10})
    lines += _flavor_order_lines(report)
    lines += [f"warning: {problem}" for problem in report.get("problems", [])]
    return "\n".join(lines)
