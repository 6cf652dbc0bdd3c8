"""The nccl-tests table users read every day: one block per (backend, algo, op, dtype)."""
from __future__ import annotations

import statistics
from dataclasses import replace

from collectives.backends import algo_label
from collectives.capabilities import HCCL_FALLBACK_NOTE
from collectives.ops import OPS, bandwidths
from collectives.sizes import comm_buffers, format_size
from schema.results import CollectiveRow, LayerRow, Metric, Run, TuningRow, knob_text, layout, link_class, metrics, side_role
from schema.stats import NAMED_RANKS_OVER, median

HEADER = (f"#{'size':>12} {'count':>12} {'type':>9} {'redop':>6} {'place':>5} "
          f"{'time(us)':>10} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'#wrong':>7}")
EXTRA = metrics(CollectiveRow, "table")   # columns after nccl-tests' own, in the row's field order


def render(rows: list[CollectiveRow]) -> str:
    """GB/s = 1e9 B/s; time = median per-op time, max over ranks. Rows of an --ab-env run get a
    block per side, a launch column, and B/A ratios per size."""
    blocks: dict[tuple, list[CollectiveRow]] = {}
    for r in rows:
        blocks.setdefault((r.backend, r.algo, r.op, r.dtype, r.nranks, r.side, layout(r.hosts), knob_text(r.knobs),
                           r.graph), []).append(r)
    launches = len({r.launch for r in rows}) > 1
    extra_head = "".join(f" {m.heading:>{max(8, len(m.heading))}}" for m in EXTRA)
    out = ["# hccl-bench results. time(us): median over rounds of the slowest rank's per-op time;",
           "# algbw = size/time, busbw = algbw x factor (nccl-tests); GB/s = 1e9 bytes/s"]
    for (backend, algo, op, dtype, nranks, side, hosts, knobs, graph), block in blocks.items():
        out.append("")
        where = f" ({hosts}, {link_class(block[0].hosts)})" if block[0].hosts else ""
        out.append(f"# {op}  backend={backend}  algo={algo_label(backend, algo)}  dtype={dtype}  nranks={nranks}{where}  "
                   f"busbw factor={OPS[op].bus_factor(nranks, algo):.3f}" + ("  graph-captured" if graph else "")
                   + (f"  {side_role(side)}" if side else ""))
        if algo_label(backend, algo) != algo:
            out.append(f"# note: {HCCL_FALLBACK_NOTE}")
        if knobs:
            out.append(f"# knobs: {knobs}" + hbm_text(block[0].knobs, communicators=1))
        out.append(HEADER + extra_head + (f" {'launch':>6}" if launches else ""))
        for r in sorted(block, key=lambda r: (r.bytes, r.redop, r.inplace, r.launch)):
            extra = "".join(f" {m.text(getattr(r, m.name)):>{max(8, len(m.heading))}}" for m in EXTRA)
            out.append(f" {r.bytes:>12} {r.count:>12} {r.dtype:>9} {r.redop:>6} "
                       f"{'ip' if r.inplace else 'oop':>5} {r.time_us or 0:>10.2f} {r.algbw_gbps or 0:>12.3f} "
                       f"{r.busbw_gbps or 0:>12.3f} {_wrong(r.wrong):>7}{extra}" + (f" {r.launch:>6}" if launches else ""))
        peak = max(block, key=lambda r: r.busbw_gbps or 0)
        out.append(f"# peak busbw: {peak.busbw_gbps or 0:.3f} GB/s at {format_size(peak.bytes)}")
    out += _ab_ratios(rows)
    out += host_cost_lines(rows)
    out += slowest_rank_lines(rows)
    return "\n".join(out)


SLOWEST_SHOWN = 2   # ranks named per case in the table, within 120 columns (the report names more)


def slowest_rank_lines(rows: list[CollectiveRow]) -> list[str]:
    """Groups of more than stats.NAMED_RANKS_OVER ranks: per case, its slowest ranks by median round
    time, where they ran (host/local rank), their median and how much slower than the group's median rank."""
    out: list[str] = []
    for r in sorted(rows, key=lambda r: (r.backend, r.algo, r.op, r.dtype, r.side, r.bytes, r.launch)):
        if r.nranks <= NAMED_RANKS_OVER or not r.round_ns_per_rank:
            continue
        try:
            view = r.ranks()
        except ValueError:
            continue
        if not out:
            out = ["", f"# slowest ranks (groups of more than {NAMED_RANKS_OVER} ranks): rank host/local-rank, median "
                       "per-op time (us), x the group's median",
                   f"#{'op':>14} {'back':>5} {'size':>7} {'place':>5} {'L':>3} {'group(us)':>9}  slowest"]
        group = view.group_median_us
        named = "; ".join(f"{rank} {view.where(rank)} {view.median_us(rank):.2f}"
                          + (f" {view.median_us(rank) / group:.2f}x" if group > 0 else "")
                          for rank in view.slowest(SLOWEST_SHOWN))
        out.append(f" {r.op:>14} {r.backend[:5]:>5} {format_size(r.bytes):>7} {'ip' if r.inplace else 'oop':>5} "
                   f"{r.launch:>3} {group:>9.2f}  {named}" + (f"  {r.side}" if r.side else ""))
    return out


HOST_COST_MAX_BYTES = 1 << 20   # "small sizes": where a call's host launch cost can be most of an eager round


def host_cost_lines(rows: list[CollectiveRow]) -> list[str]:
    """--graph both: per small size, the eager and the graph-captured per-call time (medians over
    launches) and their difference, the host's cost of launching one call."""
    times: dict[tuple, dict[bool, list[float]]] = {}
    for r in rows:
        if r.time_us is not None and r.bytes <= HOST_COST_MAX_BYTES:
            key = (r.backend, r.algo, r.op, r.dtype, r.redop, r.inplace, r.nranks, r.side, knob_text(r.knobs), r.bytes)
            times.setdefault(key, {}).setdefault(r.graph, []).append(r.time_us)
    out: list[str] = []
    for key, by_mode in sorted(times.items(), key=lambda kv: (str(kv[0][:-1]), kv[0][-1])):
        if not (by_mode.get(False) and by_mode.get(True)):
            continue
        if not out:
            out = ["", "# host cost per call: eager time - graph-captured time (the same call replayed from a device graph)",
                   f"#{'op':>14} {'backend':>8} {'dtype':>9} {'size':>10} {'place':>5} {'eager(us)':>10} "
                   f"{'graph(us)':>10} {'host(us)':>9}"]
        backend, _, op, dtype, _, inplace, _, side, _, size = key
        eager, graph = statistics.median(by_mode[False]), statistics.median(by_mode[True])
        out.append(f" {op:>14} {backend:>8} {dtype:>9} {format_size(size):>10} {'ip' if inplace else 'oop':>5} "
                   f"{eager:>10.2f} {graph:>10.2f} {eager - graph:>9.2f}" + (f"  {side_role(side)}" if side else ""))
    return out


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
            algbw, busbw = bandwidths(row.op, cell.size, t, row.nranks, row.algo)
            rows.append(replace(row, launch=launch, side=run.side, time_us=t * 1e6, algbw_gbps=algbw, busbw_gbps=busbw))
    return rows


def tuning_rows_of(run: Run) -> list[TuningRow]:
    """A loaded run's tuning cells, one row per launch, for render_tuning."""
    return [replace(row, side=run.side) for cell in run.cells.values() for _, row in sorted(cell.rows.items())
            if isinstance(row, TuningRow)]


def _ab_ratios(rows: list[CollectiveRow]) -> list[str]:
    """Per size, time B / time A of each interleaved pair (same launch), and their median."""
    pairs: dict[tuple, dict] = {}
    for r in rows:
        if r.side in ("A", "B"):
            key = (r.backend, r.algo, r.op, r.dtype, r.redop, r.inplace, r.graph, r.bytes)
            pairs.setdefault(key, {}).setdefault(r.launch, {})[r.side] = r.time_us
    out: list[str] = []
    for key, by_launch in sorted(pairs.items(), key=lambda kv: (str(kv[0][:-1]), kv[0][-1])):
        ratios = [p["B"] / p["A"] for p in by_launch.values() if p.get("A") and p.get("B")]
        if ratios:
            if not out:
                out = ["", "# A/B: time B (candidate) / time A (baseline) per interleaved pair (launch), median; > 1: B slower",
                       f"#{'op':>14} {'backend':>8} {'algo':>8} {'size':>10} {'place':>5} {'median':>7}  per pair"]
            backend, algo, op, _, _, inplace, graph, size = key
            algo = f"{algo[:6]}+g" if graph else algo
            each = " ".join(f"{x:.2f}" for x in ratios[:8]) + (" ..." if len(ratios) > 8 else "")
            out.append(f" {op:>14} {backend:>8} {algo[:8]:>8} {format_size(size):>10} {'ip' if inplace else 'oop':>5} "
                       f"{median(ratios):>7.3f}  {each}")
    return out


def peak_lines(rows: list[CollectiveRow]) -> list[str]:
    """One line per op: the peak busbw of each backend (and side), for the closing summary."""
    best: dict[str, dict[str, CollectiveRow]] = {}
    for r in rows:
        who = (r.backend + (f"/{r.algo}" if r.algo != "default" else "") + (" graph" if r.graph else "")
               + (f" {r.side}" if r.side else ""))
        held = best.setdefault(r.op, {}).get(who)
        if held is None or (r.busbw_gbps or 0) > (held.busbw_gbps or 0):
            best[r.op][who] = r
    return [f"# peak busbw {op}: " + ", ".join(f"{who} {r.busbw_gbps or 0:.3f} GB/s at {format_size(r.bytes)}"
                                               for who, r in sorted(by.items()))
            for op, by in best.items()]


def hbm_text(knobs: dict, communicators: int) -> str:
    """HCCL_BUFFSIZE is not free: HCCL allocates it twice (in and out) per communicator, in HBM."""
    value = knobs.get("HCCL_BUFFSIZE")
    try:
        mb = float(value) if value is not None else None
    except ValueError:
        return f"  (HCCL_BUFFSIZE={value!r} is not a number of MB)"
    if mb is None:
        return ""
    total = comm_buffers(communicators, mb) / 1e6
    return (f"  HBM for HCCL buffers: 2 x {mb:g} MB x {communicators} communicator{'s' if communicators > 1 else ''}"
            f" = {total:g} MB per rank")


def _heads(shown: list[Metric]) -> str:
    return "".join(f" {m.heading:>{m.width}}" for m in shown)


def _values(row, shown: list[Metric]) -> str:
    return "".join(f" {m.text(getattr(row, m.name)):>{m.width}}" for m in shown)


def render_tuning(rows: list[TuningRow]) -> str:
    """Overlap per message size; bucketing per bucket size with the best and its gain over one
    all_reduce per tensor; compression per dtype with its speed-up over float32 and its error.
    The measured columns are the row's table metrics for its bench (schema.results.TuningRow)."""
    if not rows:
        return ""
    out: list[str] = []
    groups: dict[tuple, list[TuningRow]] = {}
    for r in rows:
        groups.setdefault((r.bench, r.backend, r.op, r.dtype, r.nranks, r.side, knob_text(r.knobs)), []).append(r)
    for (bench, backend, op, dtype, nranks, side, knobs), block in groups.items():
        where = (f"backend={backend}  nranks={nranks}" + (f"  {side_role(side)}" if side else "")
                 + (f"  [{knobs}]" if knobs else ""))
        shown = metrics(TuningRow, "table", bench)
        tail = f" {'#wrong':>7} {'launch':>6}"
        out.append("")
        if bench == "overlap":
            out += [f"# overlap: {op} {dtype} started async, a matmul sized to match, then wait  {where}",
                    "#   efficiency = (comm + comp - both) / min(comm, comp), clipped to [0, 1] (raw in brackets)",
                    f"#{'size':>12} {'matmul n':>9}" + _heads(shown) + tail]
            for r in sorted(block, key=lambda r: (r.bytes, r.launch)):
                out.append(f" {r.bytes:>12} {r.matmul_n or 0:>9}" + _values(r, shown) + f" {_wrong(r.wrong):>7} {r.launch:>6}")
        elif bench == "bucket":
            model = block[0].model_bytes or 0
            out += [f"# gradient bucketing: {block[0].tensors} gradient tensors, {format_size(model)} float32, "
                    f"DDP-style flatten, all_reduce, x 1/world, unflatten  {where}",
                    f"#{'bucket':>12}" + _heads(shown) + tail]
            for r in sorted(block, key=lambda r: (r.bytes, r.launch)):
                out.append(f" {format_size(r.bytes) if r.bytes else 'per-tensor':>12}" + _values(r, shown)
                           + f" {_wrong(r.wrong):>7} {r.launch:>6}")
            out.append(_best_bucket(block))
        else:
            base = _pooled_step(block, "float32")
            out += [f"# compressed gradients: {format_size(block[0].model_bytes or 0)} float32 in "
                    f"{format_size(block[0].bucket_bytes or 0)} buckets  {where}",
                    "#   against the exact mean: max |err| / max |exact|, mean |err| / mean |exact|; bound: what the",
                    "#   type's rounding allows, relative to max |exact| (layers/tuning_tasks.error_bound)",
                    f"#{'comm dtype':>12} {'speed-up':>9}" + _heads(shown) + tail]
            for r in sorted(block, key=lambda r: (str(r.comm_dtype), r.launch)):
                speedup = f"{base / r.step_us:.2f}x" if base and r.step_us else "-"
                out.append(f" {r.comm_dtype:>12} {speedup:>9}" + _values(r, shown) + f" {_wrong(r.wrong):>7} {r.launch:>6}")
    return "\n".join(out)


def _pooled_step(rows: list[TuningRow], comm_dtype: str | None = None, size: int | None = None) -> float | None:
    """The median step time over launches of the rows with this dtype or size."""
    steps = [r.step_us for r in rows if r.step_us and (comm_dtype is None or r.comm_dtype == comm_dtype)
             and (size is None or r.bytes == size)]
    return float(statistics.median(steps)) if steps else None


def _best_bucket(rows: list[TuningRow]) -> str:
    sizes = sorted({r.bytes for r in rows})
    steps = {s: _pooled_step(rows, size=s) for s in sizes}
    best = min((s for s in sizes if steps[s]), key=lambda s: steps[s] or 0.0)
    best_step, per_tensor = steps[best] or 0.0, steps.get(0)
    gain = f", {per_tensor / best_step:.2f}x faster than one all_reduce per tensor" if per_tensor and best else ""
    what = f"{format_size(best)} buckets" if best else "one all_reduce per tensor"
    return f"# best: {what} ({best_step:.1f} us per step){gain}"


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
    """TP blocks: times, throughput and efficiency vs a plain matmul; pipelines: step time and bubble.
    The measured columns are the row's table metrics for its bench (schema.results.LayerRow)."""
    if not rows:
        return ""
    out = []
    tp_rows = [r for r in rows if r.bench == "linear"]
    pp_rows = [r for r in rows if r.bench == "pipeline"]
    if tp_rows:
        shown = metrics(LayerRow, "table", "linear")
        out += ["# tensor-parallel blocks (times: median of the slowest rank; eff = plain-matmul time of the same",
                "# GEMMs / fwd+bwd time; comm = share of fwd+bwd inside the block's collectives, exposed: that time)",
                f"#{'backend':>8} {'tp':>3} {'dp':>3} {'block':>7} {'impl':>8}" + _heads(shown)]
        for r in tp_rows:
            block = f"{r.layer}{'+sp' if r.sequence_parallel else ''}"
            out.append(f" {r.backend:>8} {r.tp:>3} {r.dp:>3} {block:>7} {r.impl:>8}" + _values(r, shown))
        warned = dict.fromkeys(w for r in tp_rows for w in r.placement_warnings)
        out += [f"# WARNING: {w}" for w in warned]
    if pp_rows:
        shown = metrics(LayerRow, "table", "pipeline")
        out += ["", "# pipeline steps (bubble measured = 1 - microbatches x stage compute alone / step time;",
                "# theory (p-1)/(m+p-1), interleaved (p-1)/(v*m+p-1), zero-bubble -)",
                f"#{'backend':>8} {'tp':>3} {'pp':>3} {'dp':>3} {'schedule':>16} {'m':>3}" + _heads(shown)]
        for r in pp_rows:
            out.append(f" {r.backend:>8} {r.tp:>3} {r.pp:>3} {r.dp:>3} {r.schedule:>16} {r.microbatches:>3}" + _values(r, shown))
    return "\n".join(out)
