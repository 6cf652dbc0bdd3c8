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
                       f"{r['busbw_gbps']:>12.3f} {r['wrong']:>7}")
        peak = max(block, key=lambda r: r["busbw_gbps"])
        out.append(f"# peak busbw: {peak['busbw_gbps']:.3f} GB/s at {format_size(peak['bytes'])}")
    return "\n".join(out)


def render_overhead(rows: list[dict]) -> str:
    out = ["# harness overhead: harness loop vs a bare loop of the same call, same buffers, same worker",
           f"#{'backend':>8} {'size':>10} {'harness(us)':>12} {'plain(us)':>10} {'ratio':>7} {'added(us)':>10}"]
    for r in rows:
        out.append(f" {r['backend']:>8} {format_size(r['bytes']):>10} {r['time_us']:>12.3f} {r['plain_us']:>10.3f} "
                   f"{r['ratio']:>7.3f} {r['added_us']:>10.3f}")
    return "\n".join(out)
