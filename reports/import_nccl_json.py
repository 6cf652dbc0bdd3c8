"""nccl-tests and rccl-tests `-J` JSON, read as the writer (src/util.cu) writes it, versions 1-3.
What each version holds and how it becomes rows: docs/results.md (`-J` JSON)."""
from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from collectives.ops import OPS, by_log_name
from reports.log_rows import NCCL_TYPES, PERF, LogRun, Sample, cross_check, entry, need, result_of
from reports.run_failures import RunFailed
from schema.results import ResultError

ENV_PREFIXES = ("NCCL_", "RCCL_", "UCX_", "HSA_", "CUDA_", "SLURM_", "OMPI_")   # never the whole environment
LONG = {"nthreads": "t", "ngpus": "g", "iters": "n", "agg_iters": "m", "warmup_iters": "w", "run_cycles": "N",
        "check": "c", "op": "o", "datatype": "d", "root": "r", "blocking": "z", "cudagraph": "G",
        "report_cputime": "C", "average": "a", "per_iter_timing": "I", "per_iter_skip": "K"}
AVERAGE = {0: "rank 0's", 1: "the mean over processes of the", 2: "the fastest process's", 3: "the slowest process's"}
BLOCKING = {1: "each op waited for and followed by a barrier (-z 1)", 2: "each op waited for, no barrier (-z 2)",
            3: "each outer iteration waited for, barrier excluded from the time (-z 3)"}


@dataclass
class Half:
    """One out-of-place or in-place body of one entry."""
    entry: int
    time_us: float
    algbw: float | None
    busbw: float | None
    wrong: float | None
    per_iter: dict | None
    hip_event_us: float | None = None


def _num(value) -> float | None:
    """A writer's number: a float, or "nan" (jsonDouble of NaN) as None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def parse(text: str, where: str) -> tuple[dict, str]:
    """(the whole object, ""), or the complete entries of a file cut off inside `results` and where it stops."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ResultError(f"{where}: JSON that is not an nccl-tests -J object")
        return data, ""
    except (ValueError, RecursionError):
        pass
    marker = text.find('"results":[')
    if marker < 0:
        raise ResultError(f"{where}: JSON that does not parse and holds no '\"results\":[' list: not a usable -J file "
                          "(cut off before its first result?)")
    try:
        head = json.loads(text[:marker].rstrip().rstrip(",") + "}")
    except (ValueError, RecursionError):
        raise ResultError(f"{where}: looks like nccl-tests -J JSON but its header (before 'results') does not parse") from None
    decoder, pos, cut = json.JSONDecoder(), marker + len('"results":['), ""
    entries: list = []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            cut = f"the file ends inside 'results' after {len(entries)} entries (byte {pos})"
            break
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            cut = (f"entry {len(entries) + 1} is cut off at byte {len(text)} (a killed run or a full disk); "
                   f"the {len(entries)} entries before it are kept")
            break
        entries.append(obj)
    return {**head, "results": entries}, cut


def flags_of(args: list[str]) -> dict[str, str]:
    """getopt_long as nccl-tests calls it: -a 0, -a0, --average 0, --average=0."""
    out: dict[str, str] = {}
    i = 1
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            name, eq, val = a[2:].partition("=")
            key = LONG.get(name)
            if not eq and i + 1 < len(args):
                i, val = i + 1, args[i + 1]
        elif a.startswith("-") and len(a) >= 2:
            key, val = a[1], a[2:]
            if not val and i + 1 < len(args):
                i, val = i + 1, args[i + 1]
        else:
            key = None
        if key:
            out[key] = val
        i += 1
    return out


def _int(text, default: int) -> int:
    try:
        return int(str(text), 0)
    except (TypeError, ValueError):
        return default


def timing(flags: dict[str, str], config: dict, cpu: bool) -> dict:
    """What the headline time and the rounds mean under -a, -C, -z, -m, -G, -I, -K."""
    average, blocking = _int(flags.get("a"), 1), _int(flags.get("z"), 1 if config.get("blocking_collectives") == "true" else 0)
    agg, graph = _int(config.get("aggregated_iterations", flags.get("m", 1)), 1), _int(config.get("graph", 0), 0)
    out = {"average": average, "report_cputime": int(cpu), "blocking": blocking, "agg_iters": agg, "cuda_graph_launches": graph,
           "per_iter_timing": config.get("per_iter_timing") == "true" or _int(flags.get("I"), 0) == 1,
           "per_iter_skip": _int(config.get("per_iter_skip", flags.get("K", 0)), 0)}
    what = "host time to enqueue the timed loop (-C 1: not the collective's time; bandwidths come from the synchronised time)" \
        if cpu else f"{AVERAGE.get(average, f'-a {average}')} per-op time of the timed loop (wall time / (iters x {agg}))"
    if graph:
        what += f", the loop captured in a CUDA graph launched {graph} times"
    if blocking:
        what += f"; {BLOCKING.get(blocking, f'-z {blocking}')}"
    out["headline"] = what
    if out["per_iter_timing"]:
        out["rounds"] = ("per-iteration CUDA event times, per op (/ agg iters), max over each process's GPUs, then over "
                         f"processes; the first {out['per_iter_skip']} kept aside (-K)")
    return out


def ratio_candidates(op: str, rows: Iterable[Sample | Half]) -> tuple[int, int | None] | None:
    """The rank counts whose bus factor every printed (alg_bw, bus_bw) allows, as (low, high or
    None for unbounded): each value is taken at its printed precision (2 or 6 decimals)."""
    if op not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        return None

    def half(v: float) -> float:   # getFloatStr: 2 decimals, 1 from 1000, 0 from 10000; "%lf": 6
        if abs(v * 100 - round(v * 100)) > 1e-7:
            return 5e-7
        return 0.5 if v >= 10000 else 0.05 if v >= 1000 else 0.005

    def n_of(r: float) -> float:
        top = 2.0 if op == "all_reduce" else 1.0
        return top / (top - r) if r < top else math.inf
    lo, hi = 1.0, math.inf
    for alg, bus in ((r.algbw, r.busbw) for r in rows if r.algbw and r.busbw):
        if alg <= 0 or bus <= 0 or alg < 50 * half(alg):
            continue
        r_lo, r_hi = (bus - half(bus)) / (alg + half(alg)), (bus + half(bus)) / (alg - half(alg))
        lo, hi = max(lo, n_of(r_lo)), min(hi, n_of(r_hi))
    if lo == 1.0 and hi == math.inf:
        return None
    return max(1, math.ceil(lo - 1e-9)), (math.floor(hi + 1e-9) if hi != math.inf else None)


def span_text(cands: tuple[int, int | None] | None) -> str:
    if cands is None:
        return "any rank count"
    low, high = cands
    if high is None:
        return f"{low} or more"
    if high < low:
        return "no rank count at all (the printed bandwidths disagree with each other)"
    return f"only {low}" if low == high else ", ".join(map(str, range(low, high + 1))) if high - low < 8 else f"{low}..{high}"


def fits(cands: tuple[int, int | None] | None, n: int) -> bool:
    return cands is None or (cands[0] <= n and (cands[1] is None or n <= cands[1]))


def read(path: Path, text: str, op: str | None, nranks: int | None, label: str | None) -> list[dict]:
    where = str(path)
    data, cut = parse(text, where)
    results = data.get("results")
    _died_early(data, cut, where)
    if not isinstance(results, list):
        raise ResultError(f"{where}: 'results' is not a list: not nccl-tests -J output")
    tool = "rccl-tests" if "rccl_version" in data else "nccl-tests"
    args = [str(a) for a in data.get("args") or [] if isinstance(a, (str, int, float))]
    flags = flags_of(args)
    named = next((by_log_name(m.group(1)) for a in args[:1] for m in [PERF.search(a)] if m), None)
    json_op: str = need(named or op, "collective", where, "--op")
    run = LogRun(first_line=1, op=json_op, cut=cut)
    if op and named and op != named:
        run.warnings.append(f"--op {op} ignored: the file says {named}")
    config: dict = data["config"] if isinstance(data.get("config"), dict) else {}
    devices = [d for d in config.get("devices") or [] if isinstance(d, dict)]
    per_process = _int(config.get("nthreads", 1), 1) * _int(config.get("ngpus", 1), 1)
    said = len(devices) * per_process if devices else None
    halves: dict[tuple, list[Half]] = {}
    incomplete = []
    for index, r in enumerate(results, 1):
        if not isinstance(r, dict) or not isinstance(r.get("size"), int) or r["size"] == 0:
            continue
        if "in_place" not in r or "actual_iterations" not in r:
            incomplete.append(f"entry {index} ({r['size']} B) ends before its "
                              f"{'in-place half' if 'in_place' not in r else 'iteration count'}")
        for inplace, key in ((False, "out_of_place"), (True, "in_place")):
            body = r.get(key)
            if not isinstance(body, dict):
                continue
            t = _num(body.get("time", body.get("cpu_time")))
            if t is None or t <= 0:
                run.warnings.append(f"entry {index} ({r['size']} B {key}): time {body.get('time', body.get('cpu_time'))!r} "
                                    "is not a measurement, ignored")
                continue
            wrong = _num(body.get("nwrong"))
            if wrong is not None and wrong > 0:
                run.failed = run.failed or f"entry {index}: nwrong {wrong:g} at {r['size']} B ({key})"
            per = r.get(key + "_per_iter")
            cell = (r["size"], int(r.get("count") or 0), NCCL_TYPES.get(str(r.get("type")), str(r.get("type"))),
                    str(r.get("redop", "none")) if OPS[json_op].reduces else "none", inplace)
            halves.setdefault(cell, []).append(Half(index, t, _num(body.get("alg_bw", body.get("algbw"))),
                                                    _num(body.get("bus_bw", body.get("busbw"))), wrong,
                                                    per if isinstance(per, dict) else None, _num(body.get("hip_event_time"))))
    if not halves:
        raise ResultError(f"{where}: nccl-tests -J JSON without a complete result" + (f" ({cut})" if cut else ""))
    cpu = any("cpu_time" in (r.get("out_of_place") or r.get("in_place") or {}) for r in results if isinstance(r, dict))
    meaning = timing(flags, config, cpu or _int(flags.get("C"), 0) == 1)
    # the rank count: the file's own, checked against what the printed bandwidths allow
    cands = ratio_candidates(json_op, [h for hs in halves.values() for h in hs])
    if said and not fits(cands, said):
        raise ResultError(f"{where}: config lists {len(devices)} processes x {per_process} GPUs = {said} ranks, but the printed "
                          f"bus_bw/alg_bw fits {span_text(cands)} ranks: the file does not list every rank (or the op is "
                          "wrong); pass --nranks N if you know it")
    if said and nranks and nranks != said:
        run.warnings.append(f"--nranks {nranks} ignored: the file says {said} ranks")
    n = said or nranks
    if n and not said and not fits(cands, n):
        raise ResultError(f"{where}: --nranks {n} does not fit the printed bus_bw/alg_bw (it fits {span_text(cands)})")
    if not n:
        if cands and cands[1] == cands[0]:
            n = cands[0]
            run.warnings.append(f"rank count {n} from bus_bw/alg_bw: the file lists no devices")
        else:
            raise ResultError(f"{where}: the file lists no devices and bus_bw/alg_bw fits {span_text(cands)} ranks; "
                              "pass --nranks N")
    samples = [Sample(c[0], c[1], c[2], c[3], c[4], h.time_us, h.algbw, h.busbw, h.wrong, h.entry)
               for c, hs in halves.items() for h in hs]
    if meaning["report_cputime"]:   # printed bandwidths come from the synchronised time, not the CPU time
        run.warnings.append("-C 1: the times are host enqueue times; the bandwidths were not checked against them")
    else:
        cross_check(json_op, n, samples, where)
    benches = [_cell_entry(tool, json_op, cell, hs, n, data, meaning, where) for cell, hs in halves.items()]
    _verdicts(run, data, results, incomplete)
    hosts = {h: k * per_process for h, k in Counter(str(d.get("hostname")) for d in devices).items()}
    groups = sorted({int(d["group"]) for d in devices if isinstance(d.get("group"), int)})
    if len(groups) > 1:
        run.warnings.append(f"split communicators (groups {groups}): the times are each group's, ranks counted over all")
    env = [e for e in data.get("env") or [] if isinstance(e, str) and e.startswith(ENV_PREFIXES)]
    run.extra.update({"json_version": data.get("version"), "args": args, "timing": meaning,
                      "library_version": data.get("rccl_version", data.get("nccl_version")),
                      "env": dict(e.split("=", 1) for e in env if "=" in e),
                      "start_time": data.get("start_time"), "end_time": data.get("end_time")})
    run.last_line = max(h.entry for hs in halves.values() for h in hs)
    return [result_of(path, f"{tool}-json", tool, json_op, n, benches, run, hosts,
                    [str(d.get("device_info") or d.get("name") or d.get("device_name") or "") for d in devices], label)]


def _died_early(data: dict, cut: str, where: str) -> None:
    """A writer's file closed by jsonOutputFinalize after run() failed: no footer, no complete result.
    The error line went to stdout, not here; say where the file stops."""
    results = data.get("results")
    entries = [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []
    if cut or "out_of_bounds" in data or not isinstance(data.get("args"), list) or "version" not in data or any(
            isinstance(r.get(k), dict) for r in entries for k in ("out_of_place", "in_place")):
        return
    config = data.get("config")
    if isinstance(results, list):
        stage = f"inside its first size ({entries[0].get('size')} B)" if entries else "before its first size"
    elif isinstance(config, dict):
        stage = "after 'config', before 'results'" if "devices" in config else \
            "inside 'config', before its devices (e.g. 'Invalid number of GPUs')"
    else:
        stage = "before 'config'"
    errors = [str(e) for e in data.get("errors") or [] if str(e).strip()]
    said = f"; its errors: {errors[0][:160]}" if errors else "; the error line is in the run's output, not in the -J file"
    raise RunFailed(f"{where}: the run FAILED before its first result: nccl-tests closed its -J file {stage}{said}")


def _verdicts(run, data: dict, results: list, incomplete: list[str]) -> None:
    """Failure and completeness as the file states them (the footer may be missing)."""
    bounds = data.get("out_of_bounds")
    bandwidth = data.get("average_bus_bandwidth", data.get("average_bus_bandwidith"))
    if isinstance(bounds, dict) and (bounds.get("okay") == "false" or (_num(bounds.get("count")) or 0) > 0):
        run.failed = run.failed or f"the file says: out_of_bounds count {bounds.get('count')}, okay {bounds.get('okay')}"
    if isinstance(bandwidth, dict) and bandwidth.get("okay") == "false":
        value = bandwidth.get("bandwidth", bandwidth.get("bandwidith"))
        run.failed = run.failed or f"the file says: average bus bandwidth {value} failed its check (okay \"false\")"
    if errors := [str(e) for e in data.get("errors") or [] if str(e).strip()]:
        run.failed = run.failed or f"the file's errors: {errors[0][:160]}"
    ended = [] if isinstance(bounds, dict) and data.get("end_time") else [
        f"no footer ({'out_of_bounds' if not isinstance(bounds, dict) else 'end_time'} missing): the run stopped early"]
    where = "; ".join([run.cut] * bool(run.cut) + incomplete + ended)
    if where:
        run.cut = f"{where}; {sum(isinstance(r, dict) for r in results)} entries read"
        run.warnings.append(run.cut)


def _cell_entry(tool: str, op: str, cell: tuple, halves: list[Half], n: int, data: dict, meaning: dict, where: str) -> dict:
    """One cell from all its repeats: -I's per-iteration rounds (and process rows), else each repeat's headline time."""
    size, count, dtype, redop, inplace = cell
    rounds: list[float] = []
    rows: list[list[float]] | None = []
    skipped: list[float] = []
    for h in halves:
        times = h.per_iter.get("times_us") if h.per_iter else None
        if not isinstance(times, list) or not times or any(_num(t) is None or _num(t) <= 0 for t in times):  # type: ignore[operator]
            rows = None
            continue
        skip = _int(h.per_iter.get("skipped_iterations", meaning["per_iter_skip"]), 0)  # type: ignore[union-attr]
        skipped += times[:skip]
        rounds += times[skip:]
        proc = h.per_iter.get("per_process_max_times_us")  # type: ignore[union-attr]
        if rows is not None:
            if isinstance(proc, list) and proc and all(isinstance(p, list) and len(p) == len(times) for p in proc):
                rows = [a + p[skip:] for a, p in zip(rows, proc)] if rows else [list(p[skip:]) for p in proc]
            else:
                rows = [a + times[skip:] for a in rows] if rows else [list(times[skip:])]
    headline = [h.time_us for h in halves]
    per_iter = bool(rounds) and len(rounds) >= len(halves) and rows is not None
    matrix = [[int(round(float(t) * 1000)) for t in row] for row in rows] if per_iter and rows else None
    imported = {"printed_time_us": headline, "printed_algbw": halves[0].algbw, "printed_busbw": halves[0].busbw,
                "entries": [h.entry for h in halves], "repeats": len(halves), "skipped_us": skipped or None,
                "hip_event_time_us": [h.hip_event_us for h in halves]
                if any(h.hip_event_us is not None for h in halves) else None,
                "samples": "per-iteration rounds" if per_iter else "headline time per repeat",
                "library_version": data.get("rccl_version", data.get("nccl_version"))}
    return entry(tool, op, dtype, redop, inplace, size, count, n, [float(t) for t in rounds] if per_iter else headline,
                 max((h.wrong for h in halves if h.wrong is not None), default=None), imported,
                 f"{where}: entry {halves[0].entry}", matrix_ns=matrix)
