"""Where a hung job's ranks stopped, from their flight-recorder dumps (records.FrDump): per group, the
ranks that never reached (or never completed) the collective the others wait in, and mismatches.
The two wavefronts and the mismatch rules: docs/doctor.md (The trace formats read)."""
from __future__ import annotations

from dataclasses import dataclass, field

from reports.traces.records import FrDump


@dataclass
class Stop:
    group: str
    seq: int               # the collective the others wait in
    op: str
    waiting: list[int]     # ranks that entered it
    missing: list[int]     # ranks that never did: the culprits
    device: bool = False   # they entered it but never completed what their peers did (seq: the first such)
    completed: dict[int, int] = field(default_factory=dict)   # device: each member's last completed


@dataclass
class HangReport:
    hosts: dict[int, str]
    last: dict[str, dict[int, tuple[int, str, int | None]]]   # group -> rank -> (last entered seq, its op, completed)
    stops: list[Stop] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def culprits(self) -> list[int]:
        return sorted({r for s in self.stops for r in s.missing})


def forensics(dumps: list[FrDump], ranks_per_host: int | None = None) -> HangReport:
    hosts = {d.rank: (f"host{d.rank // ranks_per_host}" if ranks_per_host else d.host or "?") for d in dumps}
    names = sorted({e.group for d in dumps for e in d.entries if not e.p2p})
    report = HangReport(hosts, {})
    if empty := [d.rank for d in dumps if not d.entries]:
        report.notes.append(f"rank {', '.join(map(str, empty))}: a dump without entries (the recorder off, or the "
                            "rank stuck before it recorded anything): counted as entering nothing")
    if any(e.op.startswith("gloo:") for d in dumps for e in d.entries):
        report.notes.append("gloo records entries as scheduled only: 'completed' is pg_status's last retired collective")
    for g in names:
        members = next((d.groups[g] for d in dumps if g in d.groups), [d.rank for d in dumps])
        mine = {d.rank: [e for e in d.entries if e.group == g and not e.p2p] for d in dumps if d.rank in members}
        if absent := sorted(set(members) - set(mine)):
            report.notes.append(f"group {g}: no dump from rank {', '.join(map(str, absent))}")
        last = {r: max(es, key=lambda e: e.seq) for r, es in mine.items() if es}
        completed = {d.rank: d.completed.get(g) for d in dumps}
        report.last[g] = {r: (e.seq, e.op, completed.get(r)) for r, e in sorted(last.items())}
        by_seq: dict[int, dict[int, tuple[str, str, str]]] = {}
        for r, es in mine.items():
            for e in es:
                by_seq.setdefault(e.seq, {})[r] = (e.op, e.sizes, e.dtypes)
        for seq, got in sorted(by_seq.items()):
            if _mismatched(list(got.values())):
                report.mismatches.append(f"group {g} #{seq}: " + "; ".join(
                    f"rank {r} {op} sizes {s} dtypes {t}" for r, (op, s, t) in sorted(got.items())))
        if not last:
            continue
        top = max(e.seq for e in last.values())
        behind = sorted(r for r in mine if r not in last or last[r].seq < top)
        if behind:
            waiting = sorted(r for r, e in last.items() if e.seq == top)
            report.stops.append(Stop(g, top, last[waiting[0]].op, waiting, behind))
        done = {r: c for r in mine if (c := completed.get(r)) is not None and r not in behind}
        gloo = any(e.op.startswith("gloo:") for es in mine.values() for e in es)   # no device: a timed-out
        if not gloo and len(done) >= 2 and len(done) + len(behind) == len(mine):   # work is retired too
            best = max(done.values())
            if stuck := sorted(r for r, c in done.items() if c < best):
                seq = min(done[r] for r in stuck) + 1
                op = next((op for op, _, _ in by_seq.get(seq, {}).values()), "?")
                report.stops.append(Stop(g, seq, op, sorted(r for r, c in done.items() if c == best), stuck, True,
                                         dict(sorted(done.items()))))
    return report


def _mismatched(got: list[tuple[str, str, str]]) -> bool:
    """Whether ranks entered different collectives at one sequence number, as torch's analyser judges it (docs/doctor.md)."""
    ops = {op.split(":", 1)[-1].split()[0] if op else op for op, _, _ in got}   # "gloo:all_reduce" -> all_reduce
    if len(ops) > 1:
        return True
    op = ops.pop()
    if not ("all_to_all" in op or op == "scatter" or op.endswith("_v") or "_v_" in op) and len({s for _, s, _ in got}) > 1:
        return True
    if op in ("scatter", "broadcast"):
        return False
    dtypes = {t for _, sizes, t in got if sizes not in ("[]", "[[]]", "None")}
    return len(dtypes) > 1
