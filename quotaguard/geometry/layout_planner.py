"""Target layouts per node: the pure core that moves class capacity toward demand.

The value of a capacity (units per class) is the demand it serves, weighted as the quota
planner weights tenants: for each class, its distributable capacity is shared among the
tenants' demands (usage + pending, capped at `max`) by the same weighted water-filling, and a
served unit counts its whole-GPU equivalent times the tenant's weight (weights normalised to a
mean of 1, so the unit is "one GPU of demand of an average tenant").

1. End state. From the layouts the nodes have now, one node at a time takes the layout that
   adds the most value, while the gain is at least `MIN_GAIN` (hysteresis: smoothed demand,
   this margin and `minDwell` keep layouts from flapping), and never below the guarantees:
   after the move every class still covers its guarantees, or, where it already could not,
   loses nothing more. Ties go to nodes that can change now, then by name.
2. This interval. Of the nodes whose target differs, those that may change start, in order:
   not within `minDwell` of their last change, idle (or `drain: wait`), within `maxChanging`
   of their pool (changes in progress count), and only while the capacity that is left with
   every changing node at zero still covers the guarantees the same way.

Nodes being changed (or failed) count as zero capacity for the quota plan: `out_of_capacity`.
Deterministic: the same inputs give the same plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from quotaguard.geometry.nodes import NodeView
from quotaguard.geometry.pool_layouts import PoolLayouts, class_offers
from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.demand import Demand
from quotaguard.quota.fill import water_fill
from quotaguard.quota.quota_planner import quota_of

MIN_GAIN = 1.0  # whole-GPU equivalents of average-weight demand a change must serve more

Action = Literal["keep", "start", "wait", "changing", "failed", "skip"]


@dataclass(frozen=True, slots=True)
class NodeLayout:
    name: str
    pool: str
    current: str | None
    target: str | None
    action: Action
    reason: str


@dataclass(frozen=True, slots=True)
class LayoutPlan:
    mode: str
    nodes: tuple[NodeLayout, ...] = ()

    @property
    def out_of_capacity(self) -> frozenset[str]:
        """Nodes that serve nothing while this plan holds: changing or failed, and starting a
        change in mode apply (in recommend nothing starts, so the node keeps serving)."""
        gone = ("start", "changing", "failed") if self.mode == "apply" else ("changing", "failed")
        return frozenset(n.name for n in self.nodes if n.action in gone)

    @property
    def changes(self) -> tuple[NodeLayout, ...]:
        return tuple(n for n in self.nodes if n.target is not None and n.target != n.current)

    def node(self, name: str) -> NodeLayout | None:
        return next((n for n in self.nodes if n.name == name), None)


Capacity = dict[str, int]


@dataclass(frozen=True, slots=True)
class _Worth:
    """What one class's capacity is worth: the demand and weights of its tenants."""

    wants: tuple[int, ...]
    weights: tuple[float, ...]
    value_per_unit: tuple[float, ...]  # GPU equivalent x normalised tenant weight
    guaranteed: int


class _Valuer:
    def __init__(
        self,
        policy: TenantPolicy,
        demand: Demand,
        weights: Mapping[str, float],
        held_outside: Mapping[str, int],
    ) -> None:
        tenants = sorted(policy.spec.tenants, key=lambda t: t.name)
        raw = [weights.get(t.name, t.weight) for t in tenants]
        mean = sum(raw) / len(raw) if raw else 1.0
        self.percent = Fraction(str(policy.spec.rebalance.usable_capacity_percent))
        self.held = held_outside
        self.classes: dict[str, _Worth] = {}
        for gpu_class in policy.spec.gpu_classes:
            wants, shares, values, guaranteed = [], [], [], 0
            for tenant, weight in zip(tenants, raw, strict=True):
                quota = quota_of(tenant, gpu_class.name)
                if quota is None:
                    continue
                row = (demand.get(tenant.name) or {}).get(gpu_class.name)
                total = row.total if row is not None else 0
                wants.append(total if quota.max is None else min(total, quota.max))
                shares.append(weight)
                values.append(float(gpu_class.gpu_equivalent) * weight / mean)
                guaranteed += (
                    quota.guaranteed if quota.max is None else min(quota.guaranteed, quota.max)
                )
            self.classes[gpu_class.name] = _Worth(
                tuple(wants), tuple(shares), tuple(values), guaranteed
            )

    def distributable(self, name: str, units: int) -> int:
        # int(units x percent / 100) in integers (Fractions are slow and this runs often)
        usable = units * self.percent.numerator // (self.percent.denominator * 100)
        return max(0, usable - self.held.get(name, 0))

    def class_value(self, name: str, units: int) -> float:
        worth = self.classes.get(name)
        if worth is None or not worth.wants:
            return 0.0
        budget = self.distributable(name, units)
        served = water_fill([0] * len(worth.wants), worth.wants, worth.weights, budget)
        return sum(s * v for s, v in zip(served, worth.value_per_unit, strict=True))

    def value(self, capacity: Mapping[str, int]) -> float:
        return sum(self.class_value(name, capacity.get(name, 0)) for name in self.classes)

    def covers(self, capacity: Mapping[str, int], baseline: Mapping[str, int]) -> str | None:
        """None when every class covers its guarantees in `capacity` (or, where the baseline
        already could not, has no less than the baseline); else the first class that fails."""
        for name, worth in self.classes.items():
            if not worth.guaranteed:
                continue
            have = self.distributable(name, capacity.get(name, 0))
            floor = min(worth.guaranteed, self.distributable(name, baseline.get(name, 0)))
            if have < floor:
                return name
        return None


def _add(capacity: Capacity, offers: Mapping[str, int], sign: int) -> Capacity:
    found = dict(capacity)
    for name, amount in offers.items():
        found[name] = found.get(name, 0) + sign * amount
    return found


def _offers(policy: TenantPolicy, view: NodeView, layout: str) -> dict[str, int]:
    pool = view.pool
    if pool is None or view.gpu is None or layout not in pool.layouts:
        return {}
    chosen = pool.layouts[layout]
    labels = chosen.applied_labels(view.labels, pool_shares=pool.shares)
    return class_offers(policy, chosen.offers(view.gpu, view.gpus), labels)


def _describe(before: Mapping[str, int], after: Mapping[str, int]) -> str:
    moves = []
    for name in sorted(before.keys() | after.keys()):
        delta = after.get(name, 0) - before.get(name, 0)
        if delta:
            moves.append(f"{name} {delta:+d}")
    return ", ".join(moves)


@dataclass
class _Candidate:
    view: NodeView
    pool: PoolLayouts
    now_offers: dict[str, int]  # what it counts for in the end state before any move
    startable: bool
    target: str | None = None
    gain: float = 0.0
    moves: str = ""


def plan_layouts(
    policy: TenantPolicy,
    views: Sequence[NodeView],
    demand: Demand,
    *,
    now: float,
    weights: Mapping[str, float] | None = None,
    held_outside: Mapping[str, int] | None = None,
) -> LayoutPlan:
    """Target layouts for the nodes of the policy's geometry pools (see the module docstring).

    `views`: every GPU node (`node_views`); `demand`: smoothed tenant -> class demand;
    `weights`: fair-share weights (default the base weights); `held_outside`: class units held
    by pods of no tenant (as the quota capacity counts them)."""
    geometry = policy.spec.geometry
    if geometry is None or geometry.mode == "off":
        return LayoutPlan(mode="off")
    valuer = _Valuer(policy, demand, weights or {}, held_outside or {})
    state = _sort(policy, views, now)
    rows, present, final, candidates = state.rows, state.present, state.final, state.candidates
    baseline_final = dict(final)
    final = _choose_targets(policy, valuer, candidates, final, baseline_final)
    sizes: dict[str, int] = {}
    for view in views:
        if view.pool is not None:
            sizes[view.pool.pool.name] = sizes.get(view.pool.pool.name, 0) + 1
    _start(valuer, candidates, present, state.changing, sizes, rows)
    for candidate in candidates:
        view = candidate.view
        if view.name in rows:
            continue
        rows[view.name] = NodeLayout(
            view.name,
            candidate.pool.pool.name,
            view.current,
            view.current,
            "keep",
            f"no other layout serves at least {MIN_GAIN:g} GPU more of the demand"
            if len(candidate.pool.layouts) > 1
            else "the pool has one layout",
        )
    ordered = tuple(rows[v.name] for v in views if v.name in rows)
    return LayoutPlan(mode=geometry.mode, nodes=ordered)


@dataclass
class _Sorted:
    rows: dict[str, NodeLayout] = field(default_factory=dict)
    present: Capacity = field(default_factory=dict)  # now, nodes changing at zero
    final: Capacity = field(default_factory=dict)  # the end state, changing nodes at target
    candidates: list[_Candidate] = field(default_factory=list)
    changing: dict[str, int] = field(default_factory=dict)  # pool -> nodes changing


def _sort(policy: TenantPolicy, views: Sequence[NodeView], now: float) -> _Sorted:
    """Nodes outside pools, nodes changing, nodes left alone and the candidates for a move."""
    found = _Sorted()
    for view in views:
        pool = view.pool
        if pool is None or view.progress is None:
            found.present = _add(found.present, view.capacity, 1)
            found.final = _add(found.final, view.capacity, 1)
        if pool is None:
            continue
        name = pool.pool.name
        progress = view.progress
        if progress is not None:
            found.changing[name] = found.changing.get(name, 0) + 1
            failed = progress.phase == "failed"
            detail = f"failed: {progress.detail}" if failed else progress.phase
            found.rows[view.name] = NodeLayout(
                view.name,
                name,
                progress.source,
                progress.target,
                "failed" if failed else "changing",
                f"{detail}; out of capacity until the layout is in place",
            )
            if not failed:
                found.final = _add(found.final, _offers(policy, view, progress.target), 1)
            continue
        why = _not_movable(view, pool)
        if why is not None:
            found.rows[view.name] = NodeLayout(
                view.name, name, view.current, view.current, "skip", why
            )
            continue
        dwell_until = (view.changed_at or -float("inf")) + pool.pool.min_dwell
        if now < dwell_until:
            # Hysteresis: a node changed less than minDwell ago keeps its layout and is not even
            # retargeted, so a plan carried out is never shown as about to be undone.
            found.rows[view.name] = NodeLayout(
                view.name,
                name,
                view.current,
                view.current,
                "keep",
                f"minDwell: changed {now - (view.changed_at or now):.0f}s ago, "
                f"not moved before {dwell_until - now:.0f}s from now",
            )
            continue
        idle_enough = view.gpu_pods == 0 or pool.pool.drain == "wait"
        found.candidates.append(_Candidate(view, pool, dict(view.capacity), idle_enough))
    return found


def _not_movable(view: NodeView, pool: PoolLayouts) -> str | None:
    if not view.healthy:
        return "not Ready or marked faulty"
    if view.gpu is None:
        return "GPU model unknown (no nvidia.com/gpu.product the catalogue knows; set pool gpu)"
    if view.gpus <= 0:
        return "no GPUs counted on the node"
    if view.unschedulable:
        return "cordoned by someone else: left alone"
    if view.current is not None and view.current not in pool.layouts:
        return f"layout {view.current} is not one of the pool's configs: left alone"
    return None


def _choose_targets(
    policy: TenantPolicy,
    valuer: _Valuer,
    candidates: list[_Candidate],
    final: Capacity,
    baseline: Capacity,
) -> Capacity:
    """Step 1: greedy single-node moves while one gains at least MIN_GAIN. Nodes that offer the
    same in every layout are interchangeable: each such group is tried once per round, through
    its first node not yet moved (startable ones first, then the least busy, then by name)."""
    options = [
        {layout: _offers(policy, c.view, layout) for layout in c.pool.layouts} for c in candidates
    ]
    groups: dict[tuple[object, ...], list[int]] = {}
    order = sorted(
        range(len(candidates)),
        key=lambda i: (
            not candidates[i].startable,
            candidates[i].view.gpu_pods,
            candidates[i].view.name,
        ),
    )
    for index in order:
        candidate = candidates[index]
        key = (
            candidate.pool.pool.name,
            candidate.view.current,
            candidate.startable,
            tuple(sorted(candidate.now_offers.items())),
            tuple((k, tuple(sorted(v.items()))) for k, v in options[index].items()),
        )
        groups.setdefault(key, []).append(index)
    queues = [list(reversed(members)) for members in groups.values()]  # pop() takes the first
    value = valuer.value(final)
    while True:
        best = _best_move(valuer, candidates, options, queues, final, baseline, value)
        if best is None:
            return final
        gain, group, layout, moved = best
        index = queues[group].pop()
        candidate = candidates[index]
        candidate.target = layout
        candidate.gain = gain
        candidate.moves = _describe(final, moved)
        final, value = moved, value + gain


def _best_move(
    valuer: _Valuer,
    candidates: list[_Candidate],
    options: list[dict[str, dict[str, int]]],
    queues: list[list[int]],
    final: Capacity,
    baseline: Capacity,
    value: float,
) -> tuple[float, int, str, Capacity] | None:
    """The one move that gains most, as (gain, group, layout, capacity after)."""
    best: tuple[float, int, str, Capacity] | None = None
    for group, members in enumerate(queues):
        if not members:
            continue
        index = members[-1]
        candidate = candidates[index]
        for layout, offers in options[index].items():
            if layout == candidate.view.current:
                continue
            moved = _add(_add(final, candidate.now_offers, -1), offers, 1)
            if valuer.covers(moved, baseline) is not None:
                continue
            gain = valuer.value(moved) - value
            if gain >= MIN_GAIN - 1e-9 and (best is None or gain > best[0] + 1e-9):
                best = (gain, group, layout, moved)
    return best


def _start(
    valuer: _Valuer,
    candidates: list[_Candidate],
    present: Capacity,
    changing: dict[str, int],
    sizes: Mapping[str, int],
    rows: dict[str, NodeLayout],
) -> None:
    """Step 2: which of the retargeted nodes begin their change now (none of them changed
    less than minDwell ago: `_sort` keeps those as they are)."""
    baseline = dict(present)
    moving = sorted(
        (c for c in candidates if c.target is not None),
        key=lambda c: (-c.gain, c.view.gpu_pods, c.view.name),
    )
    for candidate in moving:
        view, pool = candidate.view, candidate.pool.pool
        what = (
            f"{candidate.target} serves {candidate.gain:.1f} GPU more of the demand "
            f"({candidate.moves})"
        )
        allowed = pool.changing_allowed(sizes.get(pool.name, 0))
        wait: str | None = None
        if view.gpu_pods and pool.drain == "idle-only":
            wait = f"{view.gpu_pods} GPU pod(s) running and drain is idle-only"
        elif changing.get(pool.name, 0) >= allowed:
            wait = f"maxChanging {pool.max_changing} of pool {pool.name} reached"
        else:
            without = _add(present, view.capacity, -1)
            short = valuer.covers(without, baseline)
            if short is not None:
                wait = f"the guarantees of {short} need this node while another changes"
            else:
                present = without
        if wait is not None:
            rows[view.name] = NodeLayout(
                view.name, pool.name, view.current, candidate.target, "wait", f"{what}; {wait}"
            )
            continue
        changing[pool.name] = changing.get(pool.name, 0) + 1
        drain = " (cordon, wait for its GPU pods)" if view.gpu_pods else ""
        rows[view.name] = NodeLayout(
            view.name, pool.name, view.current, candidate.target, "start", f"{what}; starts{drain}"
        )
