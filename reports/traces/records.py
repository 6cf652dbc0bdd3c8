"""What the readers give the judgements: one rank's collectives, typed, in one direction
(readers -> records -> judge/hang). Times are microseconds."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Collective:
    group: str          # the process group's name (pg_name), "" when the trace cannot tell
    seq: int            # order within its group on this rank, from 0
    op: str             # e.g. "all_reduce"
    shape: str          # input dims and dtype as the trace writes them: same collective, same shape
    start_us: float
    dur_us: float
    wait_us: float | None = None   # the backend's own measure of the wait inside it, where it records one (HCCL)


@dataclass
class RankTrace:
    rank: int
    world: int
    host: str
    path: str
    groups: dict[str, list[int]]                 # pg_name -> its global ranks
    collectives: list[Collective] = field(default_factory=list)
    note: str = ""                               # how the reader assigned groups, for the text
    backend: str = ""                            # what wrote the collectives: gloo, nccl, hccl
    steps: list[float] = field(default_factory=list)   # training steps' starts (ProfilerStep#N), its own clock


@dataclass(frozen=True)
class FrEntry:
    group: str          # pg name
    seq: int            # collective_seq_id (p2p_seq_id for p2p entries)
    op: str             # profiling_name, e.g. "gloo:all_reduce"
    sizes: str          # input sizes
    dtypes: str         # input dtypes
    state: str          # scheduled, started, completed
    p2p: bool


@dataclass
class FrDump:
    rank: int
    host: str
    path: str
    version: str
    groups: dict[str, list[int]]                 # pg name -> ranks, where the dump says
    entries: list[FrEntry] = field(default_factory=list)
    completed: dict[str, int] = field(default_factory=dict)   # pg name -> last completed seq (pg_status)
    enqueued: dict[str, int] = field(default_factory=dict)    # pg name -> last enqueued seq (pg_status)
