"""Pipeline schedules by name, their constraints and their theoretical bubble (Narayanan et al. 2021;
no torch needed)."""
from __future__ import annotations

# name -> (schedule class name, stages per rank)
SCHEDULES = {
    "gpipe": ("ScheduleGPipe", 1),
    "1f1b": ("Schedule1F1B", 1),
    "interleaved1f1b": ("ScheduleInterleaved1F1B", 2),
    "interleavedzb": ("ScheduleInterleavedZeroBubble", 2),
    "zbv": ("ScheduleZBVZeroBubble", 2),
}


def chunks(schedule: str, v: int | None = None) -> int:
    """Stages per rank: the schedule's own, or `v` (Megatron's virtual pipeline size) for the interleaved ones."""
    return v if v and schedule.startswith("interleaved") else SCHEDULES[schedule][1]


def validate(schedule: str, pp: int, microbatches: int, layers: int, v: int | None = None) -> str | None:
    """One line naming the constraint and the values, or None when the combination can run."""
    if schedule not in SCHEDULES:
        return f"unknown schedule {schedule!r}: allowed {', '.join(SCHEDULES)}"
    v = chunks(schedule, v)
    if layers % (pp * v):
        return f"{layers} layers do not split into pp x stages-per-rank = {pp} x {v} = {pp * v} equal stages ({schedule})"
    if schedule != "gpipe" and microbatches < pp:
        return f"{schedule} needs at least pp = {pp} microbatches, got {microbatches}"
    if v > 1:
        rounds = max(1, microbatches // pp)
        if microbatches % rounds:
            return f"{schedule} needs microbatches ({microbatches}) to be a multiple of {rounds} (= microbatches // pp)"
    return None


def bubble_theory(schedule: str, pp: int, microbatches: int, v: int | None = None) -> float | None:
    """GPipe and 1F1B: (p-1)/(m+p-1); interleaved with v chunks per rank: (p-1)/(v*m+p-1); zero-bubble
    schedules: None (their bubble depends on how backward splits, not on p and m alone)."""
    if "ZeroBubble" in SCHEDULES[schedule][0]:
        return None
    return (pp - 1) / (chunks(schedule, v) * microbatches + pp - 1)


def stage_indices(schedule: str, pp_rank: int, pp: int, v: int | None = None) -> list[int]:
    """Looped placement for multi-stage schedules (rank r holds r, r+p, ...); ZBV folds into a V."""
    v = chunks(schedule, v)
    if schedule == "zbv":
        return [pp_rank, 2 * pp - 1 - pp_rank]
    return [pp_rank + i * pp for i in range(v)]
