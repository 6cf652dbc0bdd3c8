"""The nccl-tests table users read every day: one block per (backend, algo, op, dtype)."""
from __future__ import annotations

from collectives.ops import OPS
from collectives.sizes import format_size

HEADER = (f"#{'size':>12} {'count':>12} {'type':>9} {'redop':>6} {'place':>5} "
          f"{'time(us)':>10} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'#wrong':>7}")


def render(rows: list[dict]) -> str:
    """rows: result extra_info dicts. GB/s = 1e9 B/s; time = median per-op time, max over ranks."""
    blocks: dict[tuple, list[dict]] = {}
    for r in rows:
        blocks.setdefault((r["backend"], r["algo"], r["op"], r["dtype"], r["nranks"]), []).append(r)
    out = ["# hccl-bench results. time(us): median over rounds of the slowest rank's per-op time;",
           "# algbw = size/time, busbw = algbw x factor (nccl-tests); GB/s = 1e9 bytes/s"]
    for (backend, algo, op, dtype, nranks), block in blocks.items():
        out.append("")
        out.append(f"# {op}  backend={backend}  algo={algo}  dtype={dtype}  nranks={nranks}  "
                   f"busbw factor={OPS[op].bus_factor(nranks):.3f}")
        out.append(HEADER)
        for r in sorted(block, key=lambda r: (r["bytes"], r["redop"], r["inplace"])):
            out.append(f" {r['bytes']:>12} {r['count']:>12} {r['dtype']:>9} {r['redop']:>6} "
                       f"{'ip' if r['inplace'] else 'oop':>5} {r['time_us']:>10.2f} {r['algbw_gbps']:>12.3f} "
                       f"{r['busbw_gbps']:>12.3f} {_wrong(r.get('wrong')):>7}")
        peak = max(block, key=lambda r: r["busbw_gbps"])
        out.append(f"# peak busbw: {peak['busbw_gbps']:.3f} GB/s at {format_size(peak['bytes'])}")
    return "\n".join(out)


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


def render_layers(rows: list[dict]) -> str:
    """TP blocks: times, throughput and efficiency vs a plain matmul; pipelines: step time and bubble."""
    if not rows:
        return ""
    out = []
    tp_rows = [r for r in rows if r["bench"] == "linear"]
    pp_rows = [r for r in rows if r["bench"] == "pipeline"]
    if tp_rows:
        out += ["# tensor-parallel blocks (times: median of the slowest rank; efficiency = plain-matmul time of the "
                "same GEMMs / fwd+bwd time; comm = share of fwd+bwd inside the block's collectives)",
                f"#{'backend':>8} {'tp':>3} {'dp':>3} {'block':>7} {'impl':>8} {'fwd(us)':>10} {'bwd(us)':>10} "
                f"{'step(us)':>10} {'tokens/s':>10} {'GFLOP/s':>8} {'eff':>6} {'comm':>6}"]
        for r in tp_rows:
            block = r["layer"] + ("+sp" if r["sequence_parallel"] else "")
            comm = f"{r['comm_share']:.2f}" if r["comm_share"] is not None else "n/a"
            out.append(f" {r['backend']:>8} {r['tp']:>3} {r['dp']:>3} {block:>7} {r['impl']:>8} {r['fwd_us']:>10.1f} "
                       f"{r['bwd_us']:>10.1f} {r['step_us']:>10.1f} {r['tokens_per_s']:>10.0f} "
                       f"{r['achieved_flops'] / 1e9:>8.2f} {r['efficiency']:>6.2f} {comm:>6}")
    if pp_rows:
        out += ["", "# pipeline steps (bubble measured = 1 - microbatches x stage compute alone / step time; "
                "theory (p-1)/(m+p-1), interleaved (p-1)/(v*m+p-1), zero-bubble n/a)",
                f"#{'backend':>8} {'tp':>3} {'pp':>3} {'dp':>3} {'schedule':>16} {'m':>3} {'step(us)':>10} "
                f"{'tokens/s':>10} {'bubble':>7} {'theory':>7}"]
        for r in pp_rows:
            out.append(f" {r['backend']:>8} {r['tp']:>3} {r['pp']:>3} {r['dp']:>3} {r['schedule']:>16} {r['microbatches']:>3} "
                       f"{r['step_us']:>10.1f} {r['tokens_per_s']:>10.0f} {r['bubble_measured']:>7.3f} "
                       + (f"{r['bubble_theory']:>7.3f}" if r["bubble_theory"] is not None else f"{'n/a':>7}"))
    return "\n".join(out)
