"""The fluid bound with compatibility: GPU-equivalents flow only to the classes a workload may
run on, at every instant.

A workload is a job with an arrival, a rate (GPU-equivalents it can hold at once) and work
(GPU-equivalent seconds). Where the fluid bound lets any GPU-equivalent of the cluster serve any
job, here each job draws only from the classes some arm placed it on (its admitted options, its
pods as written), each class holds at most its capacity, and all classes together at most the
cluster's total. Every step is a maximum flow jobs -> classes -> total; among maximum flows,
jobs with more time left at full rate go first (as in the fluid bound, which gets the most work
done by a common end), by augmenting paths one group of interchangeable jobs at a time: a later
group may reroute an earlier one but never take its flow.

Jobs with the same set of classes are interchangeable for the flow, so the graph has a node per
such set, not per job; a trace of thousands of workloads has a few dozen sets.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class FlowJob:
    at: float  # seconds from the start
    rate: float  # GPU-equivalents it can hold at once
    work: float  # GPU-equivalent seconds it asks for
    classes: frozenset[str]  # the classes it may run on


def flow_bound(
    jobs: Iterable[FlowJob],
    capacity: Mapping[str, float],
    total: float,
    horizon: float,
    step: float,
) -> float:
    """GPU-equivalent seconds served by `horizon` when each class holds `capacity[class]`
    GPU-equivalents and all of them together at most `total`."""
    if total <= 0 or horizon <= 0:
        return 0.0
    step = max(step, horizon / 20_000)
    steps = math.ceil(horizon / step)
    arrivals: dict[int, list[tuple[frozenset[str], float, float]]] = {}
    for job in jobs:
        usable = frozenset(name for name in job.classes if capacity.get(name, 0.0) > 0)
        if not usable or job.rate <= 0 or job.work <= 0:
            continue
        arrivals.setdefault(int(job.at // step), []).append((usable, job.rate, job.work))
    # the active jobs by set of classes, each [rate, work left, place in arrival order]; the
    # groups are kept from step to step, as are their jobs' places
    groups: dict[frozenset[str], list[list[float]]] = {}
    arrived = 0
    served = 0.0
    for index in range(steps):
        tiny: set[frozenset[str]] = set()  # a group with a job done on arrival: it leaves too
        for usable, rate, work in arrivals.get(index, ()):
            groups.setdefault(usable, []).append([rate, work, float(arrived)])
            arrived += 1
            if work <= EPSILON:
                tiny.add(usable)
        if not groups:
            continue
        length = min(step, horizon - index * step)
        served += _serve(groups, capacity, total, length, tiny)
    return served


def _serve(
    groups: dict[frozenset[str], list[list[float]]],
    capacity: Mapping[str, float],
    total: float,
    length: float,
    tiny: set[frozenset[str]],
) -> float:
    """Serve one step of `length` seconds; update each job's remaining work (a group whose
    jobs are all done leaves); return served. Groups go in the order of their first job's
    arrival, as one list of every active job in arrival order would group them."""
    ordered = sorted(groups.items(), key=lambda item: item[1][0][2])
    asked = {key: sum(min(job[0] * length, job[1]) for job in members) for key, members in ordered}
    room = {name: capacity[name] * length for key, _ in ordered for name in key}
    if sum(asked.values()) <= total * length and _fits_greedily(asked, room):
        granted = asked
    else:
        # more time left at full rate first, as the fluid bound orders its jobs
        order = sorted(asked, key=lambda key: -max(job[1] / job[0] for job in groups[key]))
        granted = _max_flow(order, asked, room, total * length)
    served = 0.0
    for key, members in ordered:
        left = granted.get(key, 0.0)
        if left <= EPSILON:
            if key in tiny:
                _drop_done(groups, key, members)
            continue
        turn = members
        if left < asked[key] - EPSILON:
            turn = sorted(members, key=lambda job: -job[1] / job[0])
        for job in turn:
            take = min(job[0] * length, job[1], left)
            job[1] -= take
            left -= take
            served += take
            if left <= EPSILON:
                break
        _drop_done(groups, key, members)
    return served


def _drop_done(
    groups: dict[frozenset[str], list[list[float]]],
    key: frozenset[str],
    members: list[list[float]],
) -> None:
    kept = [job for job in members if job[1] > EPSILON]
    if kept:
        groups[key] = kept
    else:
        del groups[key]


def _fits_greedily(asked: Mapping[frozenset[str], float], room: Mapping[str, float]) -> bool:
    """Whether every group's ask fits with each group filling its classes in turn (a quick
    check that spares the flow on steps with room to spare; False proves nothing)."""
    left = dict(room)
    for key in sorted(asked, key=len):
        need = asked[key]
        for name in sorted(key, key=lambda name: -left[name]):
            take = min(need, left[name])
            left[name] -= take
            need -= take
            if need <= EPSILON:
                break
        if need > EPSILON:
            return False
    return True


def _max_flow(
    order: list[frozenset[str]],
    asked: Mapping[frozenset[str], float],
    room: Mapping[str, float],
    total: float,
) -> dict[frozenset[str], float]:
    """Flow granted to each group: groups augment in `order`, each as far as it can."""
    # residual graph: group -> class (unbounded), class -> total (room), total -> sink; the
    # flow on group -> class is kept per class
    from_class: dict[str, dict[frozenset[str], float]] = {name: {} for name in room}
    class_left = dict(room)
    total_left = total
    granted: dict[frozenset[str], float] = {}
    for key in order:
        need = asked[key]
        got = 0.0
        while need - got > EPSILON and total_left > EPSILON:
            path = _augmenting_path(key, from_class, class_left)
            if path is None:
                break
            groups_on_path, classes_on_path = path
            amount = min(need - got, total_left, class_left[classes_on_path[-1]])
            for name, owner in zip(classes_on_path[:-1], groups_on_path[1:], strict=True):
                amount = min(amount, from_class[name].get(owner, 0.0))
            if amount <= EPSILON:
                break
            for index, name in enumerate(classes_on_path):
                owner = groups_on_path[index]
                from_class[name][owner] = from_class[name].get(owner, 0.0) + amount
                if index + 1 < len(groups_on_path):
                    moved = groups_on_path[index + 1]
                    # the next group on the path gives up `amount` on this class
                    from_class[name][moved] -= amount
            class_left[classes_on_path[-1]] -= amount
            total_left -= amount
            got += amount
        granted[key] = got
    return granted


def _augmenting_path(
    start: frozenset[str],
    from_class: Mapping[str, Mapping[frozenset[str], float]],
    class_left: Mapping[str, float],
) -> tuple[list[frozenset[str]], list[str]] | None:
    """A path start -> class -> group -> class ... -> a class with room, by breadth first: the
    groups met give up their flow on the class before them to take the next one."""
    parent: dict[str, tuple[str | None, frozenset[str]]] = {}
    queue: deque[tuple[frozenset[str], str | None]] = deque([(start, None)])
    seen_groups = {start}
    while queue:
        group, via = queue.popleft()
        for name in sorted(group):
            if name in parent:
                continue
            parent[name] = (via, group)
            if class_left[name] > EPSILON:
                return _unwind(name, parent)
            for owner, amount in from_class[name].items():
                if amount > EPSILON and owner not in seen_groups:
                    seen_groups.add(owner)
                    queue.append((owner, name))
    return None


def _unwind(
    last: str, parent: Mapping[str, tuple[str | None, frozenset[str]]]
) -> tuple[list[frozenset[str]], list[str]]:
    """(groups, classes) along the path: groups[i] takes classes[i]; groups[i + 1] is the
    group that held classes[i] and moves on to classes[i + 1]."""
    classes: list[str] = []
    groups: list[frozenset[str]] = []
    name: str | None = last
    while name is not None:
        via, group = parent[name]
        classes.append(name)
        groups.append(group)
        name = via
    classes.reverse()
    groups.reverse()
    return groups, classes
