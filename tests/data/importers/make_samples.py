"""Writes the machine-format samples of this folder (SOURCES.md, second table): `python make_samples.py`.

Each writer below emits what the tool's own writer code emits, read from its source: nccl-tests
`src/util.cu` (jsonDouble's "%lf", jsonBool's "true"/"false" strings, "nan", the "%6i" root, the
key order of writeBenchmarkLine*/writePerIterReport/writeDeviceReport/writeResultFooter, v1's
"bandwidith" footer up to 2.17.8), rccl-tests' `-J` (rccl_version, hip_event_time) and its Reporter
(`-Z json|csv`, std::to_string values, quoted strings), the NCCL Inspector plugin's
inspector_json.cc (one object per line) and nccl-tests' printf table formats. The headline times
are the published rows of nccl_tests_2x8_two_cases.txt (its first run, 16 ranks); per-iteration
samples, per-process rows, Inspector times and the 128-rank log's times are made up around them
(a fixed pattern, no randomness): they exercise the readers, they are no measurement.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

HERE = Path(__file__).parent
TWO_CASES = HERE / "nccl_tests_2x8_two_cases.txt"
HOSTS = ("R6KD-CX8aaS-GPU-14", "R6KD-CX8aaS-GPU-15")
ENV = ["HOME=/root", "NCCL_IB_HCA=mlx5_2,mlx5_3", "NCCL_DEBUG=WARN", "UCX_TLS=ib", "OMPI_COMM_WORLD_SIZE=2",
       "SLURM_JOB_ID=4242", "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", "AWS_SECRET_ACCESS_KEY=not-a-real-secret",
       "PATH=/usr/local/bin:/usr/bin"]


def published_rows(limit: int = 8) -> list[tuple[int, int, float, float]]:
    """(size, count, out-of-place us, in-place us) of the first run's first rows."""
    rows = []
    for line in TWO_CASES.read_text().splitlines():
        tokens = line.split()
        if len(tokens) == 13 and tokens[0].isdigit() and tokens[2] == "float":
            rows.append((int(tokens[0]), int(tokens[1]), float(tokens[5]), float(tokens[9])))
        if len(rows) == limit:
            break
    return rows


# ---- the -J writer's value formats ----

class Raw(str):
    """Text written as is (an already formatted value)."""


class Obj(list):
    """A JSON object: its (key, value) pairs in the writer's order."""


def sanitized(text: str) -> str:
    out = []
    for ch in text:
        out.append({'"': '\\"', "\\": "\\\\", "/": "\\/", "\t": "\\t", "\n": "\\n"}.get(ch, ch))
    return "".join(out)


def value(v) -> str:
    if isinstance(v, Raw):
        return str(v)
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f'"{"true" if v else "false"}"'
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return '"nan"' if v != v else f"{v:f}"
    if isinstance(v, str):
        return f'"{sanitized(v)}"'
    if isinstance(v, Obj):
        return "{" + ",".join(f'"{k}":{value(x)}' for k, x in v) + "}"
    return "[" + ",".join(value(x) for x in v) + "]"


def bus_factor(op: str, n: int) -> float:
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def per_iter(base_us: float, iters: int, procs: int, warm: int) -> tuple[list[float], list[list[float]]]:
    """Made-up per-iteration times around `base_us`: the first `warm` slow, a fixed wiggle."""
    rows = []
    for p in range(procs):
        row = []
        for i in range(iters):
            t = base_us * (1 + 0.03 * math.sin(1.7 * i + 0.9 * p) - 0.01 * p)
            row.append(t * (1.6 if i < warm else 1.0))
        rows.append(row)
    return [max(col) for col in zip(*rows)], rows


def iter_stats(times: list[float]) -> list:
    s = sorted(times)
    n = len(s)
    avg = sum(s) / n
    stdev = math.sqrt(sum((x - avg) ** 2 for x in s) / n)
    pct = lambda p: s[min(n - 1, (n * p + 99) // 100 - 1)]  # noqa: E731
    return Obj([("min_us", s[0]), ("max_us", s[-1]), ("avg_us", avg), ("p50_us", s[n // 2]), ("p95_us", pct(95)),
            ("p99_us", pct(99)), ("stdev_us", stdev), ("cv_pct", stdev / avg * 100.0 if avg > 0 else 0.0)])


def nccl_json(tool_version: str, *, per_iteration=False, skip=0, iters=20, procs=2, ngpus=8, cycles=1,
              redops=("sum",), wrong_at=None, rccl=False, hip_event=False, env=ENV, extra_args=()) -> str:
    """A whole -J file as the writer of `tool_version` leaves it after a run that finished."""
    version = 1 if rccl or tool_version < "2.19.2" else 2 if tool_version < "2.19.6" else 3
    n = procs * ngpus
    args = ["/workspace/nccl-tests/build/all_reduce_perf", "-b", "1k", "-e", "128K", "-f", "2", "-g", str(ngpus),
            "-n", str(iters), *extra_args]
    head = Obj([("version", version), ("start_time", "2026-04-19 11:20:18"), ("args", args), ("env", list(env)),
            ("rccl_version" if rccl else "nccl_version", 23003)])
    config = Obj([("nthreads", 1), ("ngpus", ngpus), ("minimum_bytes", 1024), ("maximum_bytes", 131072),
              ("step_factor", 2), ("warmup_iters", 1), ("iterations", iters), ("aggregated_iterations", 1),
              ("validation", 1), ("graph", 0), ("blocking_collectives", False)])
    if version >= 2:
        config.append(("per_iter_timing", per_iteration))
    if version >= 3:
        config.append(("per_iter_skip", skip))
    config.append(("parallel_init", False))
    devices = [Obj([("rank", p * ngpus), ("group", 0), ("pid", 14010 + p), ("hostname", HOSTS[p % 2]), ("device", 0),
                ("device_hex", "0000:06:00"), ("device_info", "NVIDIA Graphics Device")]) for p in range(procs)]
    config.append(("devices", devices))
    results, bw_sum, bw_n, errors = [], 0.0, 0, 0
    for cycle in range(cycles):
        for redop in redops:
            for size, count, t_oop, t_ip in published_rows():
                entry = Obj([("size", size), ("count", count), ("type", "float"), ("redop", redop), ("root", Raw('"    -1"'))])
                for key, t in (("out_of_place", t_oop), ("in_place", t_ip)):
                    t = t * (1 + 0.02 * cycle) * (1 + 0.01 * redops.index(redop))
                    alg = size / 1.0e9 / (t * 1e-6)
                    bus = alg * bus_factor("all_reduce", n)
                    wrong = 1024.0 if wrong_at == (size, key) else 0.0
                    errors += wrong > 0
                    body = Obj([("cpu_time" if "-C" in extra_args else "time", t)])
                    if hip_event:
                        body.append(("hip_event_time", t * 0.97))
                    body += [("alg_bw", alg), ("bus_bw", bus), ("nwrong", wrong)]
                    entry.append((key, body))
                    bw_sum, bw_n = bw_sum + bus, bw_n + 1
                    if per_iteration:
                        times, rows = per_iter(t, iters, procs, skip)
                        obj = Obj(([("skipped_iterations", skip)] if version >= 3 else []) + iter_stats(times[skip:]))
                        obj.append(("times_us", times))
                        if procs > 1:
                            obj.append(("per_process_max_times_us", rows))
                        entry.append((key + "_per_iter", obj))
                entry += [("actual_iterations", iters), ("experiment_name", "")]
                results.append(entry)
    misspelt = not rccl and tool_version < "2.17.9"
    avg = Obj([("bandwidith" if misspelt else "bandwidth", bw_sum / bw_n), ("okay", Raw('"unchecked"'))])
    tail = [("results", results), ("out_of_bounds", Obj([("count", errors), ("okay", errors == 0)])),
            ("average_bus_bandwidith" if misspelt else "average_bus_bandwidth", avg), ("errors", [""]),
            ("end_time", "2026-04-19 11:21:02")]
    return value(Obj(head + [("config", config)] + tail))


def early_closed(full: str, entries: int) -> str:
    """2.18.4+ finalize after an early error: the open entry (out-of-place only) and the lists
    closed, no footer, no end_time."""
    start = full.index('"results":[') + len('"results":[')
    pos, depth, kept = start, 0, 0
    while kept < entries:
        depth += {"{": 1, "}": -1}.get(full[pos], 0)
        pos += 1
        if depth == 0 and full[pos - 1] == "}":
            kept += 1
    cut = full.index(',"in_place":', pos)
    return full[:cut] + "}]}"


def died_in_config(full: str) -> str:
    """A run that failed while listing its devices ("Invalid number of GPUs", before `devices`),
    its -J file closed by jsonOutputFinalize: config and the top object closed, no end_time (the
    stack is 2 deep), no results, no footer."""
    return full[:full.index(',"devices":[')] + "}}"


def died_in_first_size(full: str) -> str:
    """A run that failed inside its first size: writeBenchmarkLinePreamble had opened the entry
    (size .. root), then finalize closed the entry, `results` and the top object."""
    head = full.index('"root":', full.index('"results":[')) + len('"root":"    -1"')
    return full[:head] + "}]}"


def rccl_reporter(fmt: str, mpi: bool = True, nranks: int = 16) -> str:
    """rccl-tests' Reporter (-Z json|csv, -x FILE): std::to_string values, strings quoted. The
    JSON-lines form is the older Reporter's (addResult wrote each record as it came, "name" first,
    no numCycle); the list and CSV forms are writeFile's, numCycle first. "jsonl_sorted": the CSV
    records (writeFile's header names as keys) as one JSON object a line, keys in sorted order, as
    nlohmann::json's default `json` (a std::map) dumps them, so "#wrong" comes first: no published
    file was found, the key order is derived from the writer's header and nlohmann's ordering."""
    keys = ["numCycle", "name", *(["nodes", "ranks", "ranksPerNode", "gpusPerRank"] if mpi else ["gpus"]),
            "size", "type", "redop", "inPlace", "time", "algBw", "busBw", "wrong"]
    records = []
    for size, _, t_oop, t_ip in published_rows():
        for in_place, t in ((0, t_oop), (1, t_ip)):
            alg = size / 1.0e9 / (t * 1e-6)
            where = ["2", "16", "8", "1"] if mpi else ["8"]
            n = nranks if mpi else 8
            records.append(["0", '"AllReduce"', *where, str(size), '"float"', '"sum"', str(in_place), f"{t:f}",
                            f"{alg:f}", f"{alg * bus_factor('all_reduce', n):f}", '"0"' if size != 4096 else '"N/A"'])
    if fmt == "csv":
        head = "numCycle,collective," + ("nodes,ranks,ranksPerNode,gpusPerRank," if mpi else "gpus,")
        return head + "size,type,redop,inplace,time,algbw,busbw,#wrong\n" + "".join(",".join(r) + "\n" for r in records)
    if fmt == "jsonl_sorted":
        head = ["numCycle", "collective", *(["nodes", "ranks", "ranksPerNode", "gpusPerRank"] if mpi else ["gpus"]),
                "size", "type", "redop", "inplace", "time", "algbw", "busbw", "#wrong"]
        return "".join(json.dumps({k: json.loads(v) for k, v in zip(head, r)}, sort_keys=True, separators=(",", ":"))
                       + "\n" for r in records)
    if fmt == "jsonl":
        return "".join("{" + ", ".join(f'"{k}":{v}' for k, v in zip(keys[1:], r[1:])) + "}\n" for r in records)
    lines = ["{" + ", ".join(f'"{k}":{v}' for k, v in zip(keys, r)) + "}" for r in records]
    return "[\n" + ",\n".join(lines) + "\n]\n"


def inspector_logs(folder: Path, nranks: int = 8) -> None:
    """One file per process (hostname-pidN.log), one JSON line per collective per rank (v4.0)."""
    folder.mkdir(exist_ok=True)
    comm = "0x7f8c496ae9f661"
    sizes = [8192 << (2 * i) for i in range(6)]           # 8 KiB .. 8 MiB: smaller ones are not recorded
    for rank in range(nranks):
        lines, sn = [], 100
        for size in sizes:
            for repeat in range(10):
                sn += 1
                t = int(round(20 + size / 9.0e3 * (1 + 0.04 * math.sin(repeat + rank)) + rank))   # whole us
                alg = size / 1.0e9 / (t / 1e6)
                header = Obj([("id", comm), ("comm_name", "DP Group 0"), ("rank", rank), ("n_ranks", nranks), ("nnodes", 1)])
                meta = Obj([("inspector_output_format_version", "v4.0"), ("git_rev", ""),
                        ("rec_mechanism", "nccl_profiler_interface"), ("dump_timestamp_us", 1752867229276385 + sn),
                        ("hostname", "node-a"), ("pid", 438770 + rank)])
                perf = Obj([("coll", "AllReduce"), ("coll_sn", sn), ("coll_msg_size_bytes", size), ("coll_exec_time_us", t),
                        ("coll_timing_source", "kernel_gpu"), ("coll_algobw_gbs", alg),
                        ("coll_busbw_gbs", alg * bus_factor("all_reduce", nranks))])
                lines.append(value(Obj([("header", header), ("metadata", meta), ("coll_perf", perf)])))
        p2p = Obj([("p2p", "Send"), ("p2p_sn", 1), ("p2p_peer", (rank + 1) % nranks), ("p2p_msg_size_bytes", 1048576),
               ("p2p_exec_time_us", 90), ("p2p_timing_source", "kernel_gpu"), ("p2p_algobw_gbs", 11.650844),
               ("p2p_busbw_gbs", 11.650844)])
        lines.append(value(Obj([("header", header), ("metadata", meta), ("p2p_perf", p2p)])))
        (folder / f"node-a-pid{438770 + rank}.log").write_text("".join(line + "\n" for line in lines))


def float_str(v: float, width: int) -> str:
    """getFloatStr (2.19.x): 2 decimals, else 1, else 0, else an exponent, to fit `width`."""
    for text in (f"{v:{width}.2f}", f"{v:{width}.1f}", f"{v:{width}.0f}"):
        if len(text) <= width:
            return text
    return f"{v:{width}.1e}" if width >= 7 else f"{v:{width}.0e}"


def text_log_128() -> str:
    """An all_reduce_perf log at 128 ranks (16 hosts x 8) without its `# Rank` lines, as a cluster
    report pastes it: the title prose says 128, the table the rest (2.19.x printf formats)."""
    n = 128
    out = ["128 GPU all reduce (16 nodes x 8 H100, NDR 400G), nccl-tests 2.19.6", "",
           "# nccl-tests version 2.19.6 nccl-headers=22703 nccl-library=22703",
           "# Collective test starting: all_reduce_perf",
           "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
           "agg iters: 1 validation: 1 graph: 0 unalign: 0", "#", "# Using devices", "#",
           "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % (("",) * 5),  # noqa: UP031 (the writer's printf)
           "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s" % (  # noqa: UP031
               "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
               "#wrong", 0, ""),
           "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s" % (  # noqa: UP031
               "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", 0, "")]
    size, total, rows = 1048576, 0.0, 0
    while size <= 8589934592:
        cells = []
        for extra in (0.0, 0.015):
            t = (60.0 + size / 46.0e3) * (1 + extra)
            alg = size / 1.0e9 / (t * 1e-6)
            bus = alg * bus_factor("all_reduce", n)
            total, rows = total + bus, rows + 1
            cells.append(f"  {float_str(t, 7)}  {float_str(alg, 6)}  {float_str(bus, 6)}  {0:6g}")
        out.append(f"{size:12d}  {size // 4:12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}" + "".join(cells))
        size *= 2
    out += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {total / rows:g} ", "#",
            "# Collective test concluded: all_reduce_perf", ""]
    return "\n".join(out) + "\n"


def main() -> None:
    samples = {
        "nccl_tests_2.17.8_v1_2x8.json": nccl_json("2.17.8"),
        "nccl_tests_2.19.2_v2_I_2x8.json": nccl_json("2.19.2", per_iteration=True, extra_args=("-I", "1")),
        "nccl_tests_2.19.6_v3_I_K2_2x8.json": nccl_json("2.19.6", per_iteration=True, skip=2, iters=22,
                                                         extra_args=("-I", "1", "-K", "2")),
        "nccl_tests_2.19.6_v3_N2_2x8.json": nccl_json("2.19.6", cycles=2, extra_args=("-N", "2")),
        "nccl_tests_2.19.6_v3_o_all_2x8.json": nccl_json("2.19.6", redops=("sum", "prod", "max", "min", "avg"),
                                                          extra_args=("-o", "all")),
        "nccl_tests_2.19.6_v3_nwrong_2x8.json": nccl_json("2.19.6", wrong_at=(65536, "in_place")),
        "rccl_tests_J_hipevt_1x8.json": nccl_json("2.17.9", rccl=True, hip_event=True, procs=1),
        "rccl_tests_Z_json_list.json": rccl_reporter("json"),
        "rccl_tests_Z_json_lines.json": rccl_reporter("jsonl"),
        "rccl_tests_Z_json_lines_sorted_keys.json": rccl_reporter("jsonl_sorted"),
        "rccl_tests_Z_mpi.csv": rccl_reporter("csv"),
        "rccl_tests_Z_single.csv": rccl_reporter("csv", mpi=False),
        "nccl_tests_128gpu_no_rank_lines.txt": text_log_128(),
    }
    full = nccl_json("2.19.6", per_iteration=True, extra_args=("-I", "1"))
    samples["nccl_tests_2.19.6_v3_early_close_2x8.json"] = early_closed(nccl_json("2.19.6"), 5)
    samples["nccl_tests_2.19.6_v3_killed_2x8.json"] = full[:full.index('"size":131072') + 200]
    samples["nccl_tests_2.19.6_v3_died_in_config_2x8.json"] = died_in_config(nccl_json("2.19.6"))
    samples["nccl_tests_2.19.6_v3_died_in_first_size_2x8.json"] = died_in_first_size(nccl_json("2.19.6"))
    for name, text in samples.items():
        (HERE / name).write_text(text)
    inspector_logs(HERE / "nccl_inspector_8ranks")


if __name__ == "__main__":
    main()
