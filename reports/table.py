"""The nccl-tests table users read every day: one block per (backend, algo, op, dtype)."""
from __future__ import annotations

import statistics
from dataclasses import replace

from collectives.ops import OPS, bandwidths
from collectives.sizes import format_size
from reports.results import CollectiveRow, LayerRow, Run, layout, link_class, metrics

HEADER = (f"#{'size':>12} {'count':>12} {'type':>9} {'redop':>6} {'place':>5} "
          f"{'time(us)':>10} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'#wrong':>7}")
EXTRA = metrics(CollectiveRow, "table")   # columns after nccl-tests' own, in the row's field order


def render(rows: list[CollectiveRow]) -> str:
    """GB/s = 1e9 B/s; time = median per-op time, max over ranks. Rows of an --ab-env run get a
    block per side, a launch column, and B/A ratios per size."""
    blocks: dict[tuple, list[CollectiveRow]] = {}
    for r in rows:
        blocks.setdefault((r.backend, r.algo, r.op, r.dtype, r.nranks, r.side, layout(r.hosts)), []).append(r)
    launches = len({r.launch for r in rows}) > 1
    extra_head = "".join(f" {m.heading:>{max(8, len(m.heading))}}" for m in EXTRA)
    out = ["# hccl-bench results. time(us): median over rounds of the slowest rank's per-op time;",
           "# algbw = size/time, busbw = algbw x factor (nccl-tests); GB/s = 1e9 bytes/s"]
    for (backend, algo, op, dtype, nranks, side, hosts), block in blocks.items():
        out.append("")
        where = f" ({hosts}, {link_class(block[0].hosts)})" if block[0].hosts else ""
        out.append(f"# {op}  backend={backend}  algo={algo}  dtype={dtype}  nranks={nranks}{where}  "
                   f"busbw factor={OPS[op].bus_factor(nranks):.3f}" + (f"  side {side}" if side else ""))
        out.append(HEADER + extra_head + (f" {'launch':>6}" if launches else ""))
        for r in sorted(block, key=lambda r: (r.bytes, r.redop, r.inplace, r.launch)):
            extra = "".join(f" {m.text(getattr(r, m.name)):>{max(8, len(m.heading))}}" for m in EXTRA)
            out.append(f" {r.bytes:>12} {r.count:>12} {r.dtype:>9} {r.redop:>6} "
                       f"{'ip' if r.inplace else 'oop':>5} {r.time_us or 0:>10.2f} {r.algbw_gbps or 0:>12.3f} "
                       f"{r.busbw_gbps or 0:>12.3f} {_wrong(r.wrong):>7}{extra}" + (f" {r.launch:>6}" if launches else ""))
        peak = max(block, key=lambda r: r.busbw_gbps or 0)
        out.append(f"# peak busbw: {peak.busbw_gbps or 0:.3f} GB/s at {format_size(peak.bytes)}")
    out += _ab_ratios(rows)
    return "\n".join(out)


def rows_of(run: Run) -> list[CollectiveRow]:
    """A loaded run's collective cells as table rows, one per launch (its median round), so a
    --repeat or --ab-env run shows every launch and not only the first."""
    rows = []
    for cell in run.cells.values():
        for launch, times in sorted(cell.launches.items()):
            row = cell.rows.get(launch, cell.row)
            if not isinstance(row, CollectiveRow):
                continue
            t = float(statistics.median(times))
            algbw, busbw = bandwidths(row.op, cell.size, t, row.nranks)
            rows.append(replace(row, launch=launch, side=run.side, time_us=t * 1e6, algbw_gbps=algbw, busbw_gbps=busbw))
    return rows


def _ab_ratios(rows: list[CollectiveRow]) -> list[str]:
    """Per size, time B / time A of each interleaved pair (same launch), and their median."""
    pairs: dict[tuple, dict] = {}
    for r in rows:
        if r.side in ("A", "B"):
            key = (r.backend, r.algo, r.op, r.dtype, r.redop, r.inplace, r.bytes)
            pairs.setdefault(key, {}).setdefault(r.launch, {})[r.side] = r.time_us
    out: list[str] = []
    for key, by_launch in sorted(pairs.items(), key=lambda kv: (str(kv[0][:-1]), kv[0][-1])):
        ratios = [p["B"] / p["A"] for p in by_launch.values() if p.get("A") and p.get("B")]
        if ratios:
            if not out:
                out = ["", "# A/B: time B / time A per interleaved pair (launch), median; > 1 means B is slower",
                       f"#{'op':>14} {'backend':>8} {'algo':>8} {'size':>10} {'place':>5} {'median':>7}  per pair"]
            backend, algo, op, _, _, inplace, size = key
            each = " ".join(f"{x:.2f}" for x in ratios[:8]) + (" ..." if len(ratios) > 8 else "")
            out.append(f" {op:>14} {backend:>8} {algo[:8]:>8} {format_size(size):>10} {'ip' if inplace else 'oop':>5} "
                       f"{sorted(ratios)[len(ratios) // 2]:>7.3f}  {each}")
    return out


def peak_lines(rows: list[CollectiveRow]) -> list[str]:
    """One line per op: the peak busbw of each backend (and side), for the closing summary."""
    best: dict[str, dict[str, CollectiveRow]] = {}
    for r in rows:
        who = r.backend + (f"/{r.algo}" if r.algo != "default" else "") + (f" {r.side}" if r.side else "")
        held = best.setdefault(r.op, {}).get(who)
        if held is None or (r.busbw_gbps or 0) > (held.busbw_gbps or 0):
            best[r.op][who] = r
    return [f"# peak busbw {op}: " + ", ".join(f"{who} {r.busbw_gbps or 0:.3f} GB/s at {format_size(r.bytes)}"
                                               for who, r in sorted(by.items()))
            for op, by in best.items()]


def _wrong(value) -> str:
    """#wrong as nccl-tests prints it: a count, N/A when the tool did not check."""
    if value is None:
        return "N/A"
    return f"{value:g}" if isinstance(value, float) else str(value)


def render_overhead(rows: list[dict]) -> str:
    out = ["# harness overhead: harness loop vs a bare loop of the same call, same buffers, same worker",
           f"#{'backend':>8} {'size':>10} {'harness(us)':>12} {'plain(us)':>10} {'ratio':>7} {'added(us)':>10}"]
    for r in rows:
        out.append(f" {r['backend']:>8} {format_size(r['bytes']):>10} {r['time_us']:>12.3f} {r['plain_us']:>10.3f} "
                   f"{r['ratio']:>7.3f} {r['added_us']:>10.3f}")
    return "\n".join(out)


def render_layers(rows: list[LayerRow]) -> str:
    """TP blocks: times, throughput and efficiency vs a plain matmul; pipelines: step time and bubble."""
    if not rows:
        return ""
    out = []
    tp_rows = [r for r in rows if r.bench == "linear"]
    pp_rows = [r for r in rows if r.bench == "pipeline"]
    if tp_rows:
        out += ["# tensor-parallel blocks (times: median of the slowest rank; efficiency = plain-matmul time",
                "# of the same GEMMs / fwd+bwd time; comm = share of fwd+bwd inside the block's collectives)",
                f"#{'backend':>8} {'tp':>3} {'dp':>3} {'block':>7} {'impl':>8} {'fwd(us)':>10} {'bwd(us)':>10} "
                f"{'step(us)':>10} {'tokens/s':>10} {'GFLOP/s':>8} {'eff':>6} {'comm':>6}"]
        for r in tp_rows:
            block = f"{r.layer}{'+sp' if r.sequence_parallel else ''}"
            comm = f"{r.comm_share:.2f}" if r.comm_share is not None else "n/a"
            out.append(f" {r.backend:>8} {r.tp:>3} {r.dp:>3} {block:>7} {r.impl:>8} {r.fwd_us or 0:>10.1f} "
                       f"{r.bwd_us or 0:>10.1f} {r.step_us or 0:>10.1f} {r.tokens_per_s or 0:>10.0f} "
                       f"{(r.achieved_flops or 0) / 1e9:>8.2f} {r.efficiency or 0:>6.2f} {comm:>6}")
        warned = dict.fromkeys(w for r in tp_rows for w in r.placement_warnings)
        out += [f"# WARNING: {w}" for w in warned]
    if pp_rows:
        out += ["", "# pipeline steps (bubble measured = 1 - microbatches x stage compute alone / step time;",
                "# theory (p-1)/(m+p-1), interleaved (p-1)/(v*m+p-1), zero-bubble n/a)",
                f"#{'backend':>8} {'tp':>3} {'pp':>3} {'dp':>3} {'schedule':>16} {'m':>3} {'step(us)':>10} "
                f"{'tokens/s':>10} {'bubble':>7} {'theory':>7}"]
        for r in pp_rows:
            out.append(f" {r.backend:>8} {r.tp:>3} {r.pp:>3} {r.dp:>3} {r.schedule:>16} {r.microbatches:>3} "
                       f"{r.step_us or 0:>10.1f} {r.tokens_per_s or 0:>10.0f} {r.bubble_measured or 0:>7.3f} "
                       + (f"{r.bubble_theory:>7.3f}" if r.bubble_theory is not None else f"{'n/a':>7}"))
    return "\n".join(out)
