"""Where a hung job's ranks stopped, from their flight-recorder dumps (records.FrDump): per group, the
last collective each rank entered; the ranks that never reached the collective the others wait in
(the wavefront, as nvidia-resiliency-ext's fr_attribution calls it) named; and collectives whose op,
sizes or dtypes differ across ranks at one sequence number reported as mismatches."""
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
    if any(e.op.startswith("gloo:") for d in dumps for e in d.entries):
        report.notes.append("gloo records entries as scheduled only: 'completed' is pg_status's last retired collective")
    for g in names:
        members = next((d.groups[g] for d in dumps if g in d.groups), [d.rank for d in dumps])
        mine = {d.rank: [e for e in d.entries if e.group == g and not e.p2p] for d in dumps if d.rank in members}
        absent = sorted(set(members) - set(mine))
        if absent:
            report.notes.append(f"group {g}: no dump from rank {', '.join(map(str, absent))}")
        last = {r: max(es, key=lambda e: e.seq) for r, es in mine.items() if es}
        completed = {d.rank: d.completed.get(g) for d in dumps}
        report.last[g] = {r: (e.seq, e.op, completed.get(r)) for r, e in sorted(last.items())}
        by_seq: dict[int, dict[int, tuple[str, str, str]]] = {}
        for r, es in mine.items():
            for e in es:
                by_seq.setdefault(e.seq, {})[r] = (e.op, e.sizes, e.dtypes)
        for seq, got in sorted(by_seq.items()):
            if len(set(got.values())) > 1:
                report.mismatches.append(f"group {g} #{seq}: " + "; ".join(
                    f"rank {r} {op} sizes {s} dtypes {t}" for r, (op, s, t) in sorted(got.items())))
        if not last:
            continue
        top = max(e.seq for e in last.values())
        behind = sorted(r for r in mine if r not in last or last[r].seq < top)
        if behind:
            waiting = sorted(r for r, e in last.items() if e.seq == top)
            report.stops.append(Stop(g, top, last[waiting[0]].op, waiting, behind))
    return report
