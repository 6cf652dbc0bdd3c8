"""What people read of a trace verdict or a hang report: terminal text and the JSON (`--json`),
shaped like the synthetic doctor's (suspects first, each naming its kind, rank(s) and host)."""
from __future__ import annotations

from dataclasses import asdict

from reports.traces.hang import HangReport
from reports.traces.judge import Verdict


def budget(v: Verdict) -> str:
    s = v.settings
    return (f"false-alarm budget: alpha {s['alpha']:g} a job, half to each reading of a rank, Bonferroni over "
            f"{v.world} ranks (late in most collectives: sign and last-arriver tests, median lateness over "
            f"{s['min_late_us'] / 1e3:g} ms; or what it costs: the permutation test of its holds, over its chance "
            f"share by {s['min_late_us'] / 1e3:g} ms a step); groups over groups")


def text(v: Verdict) -> str:
    out = [f"# doctor --traces: {v.world} ranks on {len(set(v.hosts.values()))} hosts; {v.matched} collectives matched "
           f"across ranks ({v.unmatched} cut by the profiler's window, {len(v.mismatched)} mismatched)"]
    out += [f"# {n}" for n in v.notes]
    out.append("# per rank: median lateness (its interval; + arrives after its peers), share late by over the margin, "
               "times last to arrive, p of both tests (sign, last-arriver), median wait, what each peer waited for "
               "it alone a step (p of the cost test)")
    for s in v.ranks:
        out.append(f"  rank {s.rank:>3} {s.host[:16]:>16}: {s.late_us / 1e3:+8.2f} ms ({s.ci_us[0] / 1e3:+.2f} .. "
                   f"{s.ci_us[1] / 1e3:+.2f}), late in {s.share:4.0%} of {s.collectives}, last in {s.last}, "
                   f"p {s.p:.2g} ({s.p_sign:.2g}, {s.p_last:.2g}), "
                   f"waits {s.wait_us / 1e3:7.2f} ms, costs {s.cost_step_us / 1e3:.2f} ms a {s.unit} (p {s.p_cost:.2g})")
    if v.floors_us:
        out.append("# per group: median time once the last rank arrived: "
                   + ", ".join(f"group {g} {f / 1e3:.2f} ms" for g, f in sorted(v.floors_us.items())))
    out += [f"# mismatch: {m}" for m in v.mismatched[:5]]
    out.append(f"# {budget(v)}")
    out += suspects_block([f"  {s.name}{' on ' + s.host if s.kind == 'rank' else ''}: {s.evidence}" for s in v.suspects],
                          "healthy: no rank, host or group stands out from its peers")
    return "\n".join(out)


def suspects_block(lines: list[str], otherwise: str) -> list[str]:
    """Every doctor's closing lines: SUSPECTS (n) and one line each, else `otherwise`."""
    return [f"SUSPECTS ({len(lines)}):", *lines] if lines else [otherwise]


def to_json(v: Verdict) -> dict:
    return {"source": "traces", "suspects": [s.to_json() for s in v.suspects], "world": v.world,
            "hosts": {str(r): h for r, h in v.hosts.items()}, "groups": v.groups, "matched": v.matched,
            "unmatched": v.unmatched, "mismatched": v.mismatched, "ranks": [asdict(s) for s in v.ranks],
            "group_floor_us": v.floors_us, "settings": v.settings, "budget": budget(v), "notes": v.notes,
            # rank x matched collective in start order (null: not a member): the page's heatmap
            "lateness_us": [[None if x != x else round(x, 1) for x in row] for row in v.lateness]}


def hang_text(h: HangReport, skipped: list[str] | None = None) -> str:
    out = ["# doctor --flight-recorder: the last collective each rank entered (completed), per group"]
    if skipped:
        out.append(f"# not dumps, skipped ({len(skipped)}): {', '.join(skipped)[:150]}")
    out += [f"# {n}" for n in h.notes]
    for g, last in h.last.items():
        out.append(f"  group {g}: " + ", ".join(f"rank {r} #{seq} {op}" + (f" ({done})" if done is not None else "")
                                               for r, (seq, op, done) in last.items()))
    out += [f"# mismatch: {m}" for m in h.mismatches]
    lines = []
    for r in h.culprits:
        mine = [_why(s) for s in h.stops if r in s.missing]
        more = f"; and in {len(mine) - 3} more groups (--json)" if len(mine) > 3 else ""
        lines.append(f"  hang rank {r} on {h.hosts.get(r, '?')}: " + "; ".join(mine[:3]) + more)
    out += suspects_block(lines, "MISMATCH: ranks entered different collectives at one sequence number (above)"
                          if h.mismatches else
                          "no wavefront: every rank entered the same last collective of each group (a hang inside it, or none)")
    return "\n".join(out)


def _why(s) -> str:
    if s.device:
        mine = min(s.completed[r] for r in s.missing)
        return (f"entered group {s.group}'s collectives with its peers but completed only #{mine} where ranks "
                f"{s.waiting} completed #{max(s.completed.values())} (stuck on its device at #{s.seq}, {s.op})")
    return f"never reached group {s.group}'s collective #{s.seq} ({s.op}), where ranks {s.waiting} wait"


def hang_json(h: HangReport, skipped: list[str] | None = None) -> dict:
    suspects = []
    for r in h.culprits:
        stops = [s for s in h.stops if r in s.missing]
        first = stops[0]
        suspects.append({"kind": "hang", "rank": r, "ranks": [r], "host": h.hosts.get(r, "?"), "group": first.group,
                         "seq": first.seq, "op": first.op, "waiting": first.waiting, "device": first.device,
                         "groups": [{"group": s.group, "seq": s.seq, "op": s.op, "device": s.device} for s in stops],
                         "evidence": "; ".join(_why(s) for s in stops)})
    return {"source": "flight_recorder", "suspects": suspects, "mismatches": h.mismatches, "notes": h.notes,
            "skipped": skipped or [],
            "last": {g: {str(r): {"seq": seq, "op": op, "completed": done} for r, (seq, op, done) in last.items()}
                     for g, last in h.last.items()}, "stops": [asdict(s) for s in h.stops]}
