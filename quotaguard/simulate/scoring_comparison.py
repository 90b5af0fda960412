"""Spread against pack: quotaguard's arm replayed once more under the other scheduler scoring.

kube-scheduler's default profile spreads pods (NodeResourcesFit LeastAllocated); the profile
quotaguard ships packs GPU pods (MostAllocated, docs/packing.md). Whether packing pays off
depends on the mix: many small pods beside gangs that need whole nodes gain, a cluster of
whole-node jobs sees no difference. One extra replay of one arm answers it for the trace, and
the recommendation follows useful utilisation, then the GPU-hours left fragmented.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from quotaguard.simulate.arm_metrics import ArmMetrics, arm_metrics
from quotaguard.simulate.arm_replay import ArmName, ArmRun, Setup, run_arm
from quotaguard.simulate.placement import Scoring

SPREAD: Scoring = "LeastAllocated"
PACK: Scoring = "MostAllocated"
# Useful utilisation closer than this (a fraction) is a tie, settled by fragmentation.
TIE = 0.005
# Mean waits closer than this (seconds) are a tie.
WAIT_TIE = 60.0
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class ScoringArm:
    scoring: Scoring
    utilization: float
    useful_utilization: float
    fragmented_gpu_hours: float
    mean_wait: float
    unplaceable: int

    @classmethod
    def of(cls, scoring: Scoring, metrics: ArmMetrics) -> ScoringArm:
        overall = metrics.overall
        return cls(
            scoring=scoring,
            utilization=overall.utilization,
            useful_utilization=overall.useful_utilization,
            fragmented_gpu_hours=metrics.fragmented_gpu_seconds / HOUR,
            mean_wait=overall.mean_wait,
            unplaceable=overall.unplaceable,
        )

    def json(self) -> dict[str, Any]:
        return {
            "scoring": self.scoring,
            "utilization": round(self.utilization, 4),
            "usefulUtilization": round(self.useful_utilization, 4),
            "fragmentedGpuHours": round(self.fragmented_gpu_hours, 1),
            "meanWaitSeconds": round(self.mean_wait, 1),
            "unplaceable": self.unplaceable,
        }


@dataclass(frozen=True, slots=True)
class ScoringComparison:
    arm: ArmName
    spread: ScoringArm
    pack: ScoringArm
    recommended: Scoring
    reason: str

    def json(self) -> dict[str, Any]:
        return {
            "arm": self.arm,
            "spread": self.spread.json(),
            "pack": self.pack.json(),
            "recommended": self.recommended,
            "reason": self.reason,
        }

    def sentence(self) -> str:
        spread, pack = self.spread, self.pack
        return (
            f"scheduler scoring, {self.arm} arm: spread (LeastAllocated) "
            f"{spread.useful_utilization:.1%} useful, {spread.fragmented_gpu_hours:,.0f} "
            f"GPU-hours fragmented; pack (MostAllocated) {pack.useful_utilization:.1%} useful, "
            f"{pack.fragmented_gpu_hours:,.0f} fragmented: {self.recommended} recommended "
            f"({self.reason})"
        )


def recommend(spread: ScoringArm, pack: ScoringArm) -> tuple[Scoring, str]:
    """Higher useful utilisation wins; within TIE, packing when it leaves fewer GPU-hours
    fragmented without longer waits; else spread, the default, which needs no second
    scheduler."""
    gain = pack.useful_utilization - spread.useful_utilization
    if gain >= TIE:
        return PACK, f"{gain * 100:.1f} points more useful utilisation"
    if -gain >= TIE:
        return SPREAD, f"{-gain * 100:.1f} points more useful utilisation"
    fewer = spread.fragmented_gpu_hours - pack.fragmented_gpu_hours
    shorter = spread.mean_wait - pack.mean_wait
    if fewer >= 1 and shorter > -WAIT_TIE:
        waits = f", mean wait {shorter / 60:,.0f} min shorter" if shorter >= WAIT_TIE else ""
        return PACK, f"as useful, {fewer:,.0f} GPU-hours less fragmented{waits}"
    return SPREAD, "no difference that matters: the default profile needs no second scheduler"


def compared_arm(runs: Mapping[ArmName, ArmRun], setup: Setup) -> ArmName | None:
    """The arm the comparison replays: geometry when the policy changes layouts, else
    dynamic, else the last arm run."""
    names = list(runs)
    if setup.policy.spec.geometry is not None and "geometry" in names:
        return "geometry"
    if "dynamic" in names:
        return "dynamic"
    return names[-1] if names else None


def compare_scoring(
    setup: Setup, runs: Mapping[ArmName, ArmRun], metrics: Mapping[ArmName, ArmMetrics]
) -> ScoringComparison | None:
    """The compared arm as run, and once more under the other scoring."""
    arm = compared_arm(runs, setup)
    if arm is None:
        return None
    other: Scoring = PACK if setup.scoring == SPREAD else SPREAD
    other_setup = replace(setup, scoring=other)
    other_metrics = arm_metrics(other_setup, run_arm(other_setup, arm))
    by_scoring = {
        setup.scoring: ScoringArm.of(setup.scoring, metrics[arm]),
        other: ScoringArm.of(other, other_metrics),
    }
    spread, pack = by_scoring[SPREAD], by_scoring[PACK]
    recommended, reason = recommend(spread, pack)
    return ScoringComparison(arm, spread, pack, recommended, reason)
