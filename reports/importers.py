"""Other tools' logs into the result schema, so years of nccl-tests and hccl_test output can serve
as baselines and be compared. A log is read for what it says, or refused in one line; never guessed
silently.

Formats: nccl-tests / rccl-tests text output (every header generation: with or without `redop`,
`root`, `error` or `#wrong`, `N/A`; the `*_perf_mpi` builds), nccl-tests `-J` JSON (src/util.cu,
version 2), and hccl_test output (`avg_time(us)` in the documentation, `aveg_time(us)` in the binary).
A file may hold several runs and several ops (a campaign's log, a README with two runs): each run
becomes its own result, in file order. Lines may carry Open MPI's `[1,0]<stdout>:` or an ISO
timestamp (`kubectl logs --timestamps`) in front.

Per run: the op from the run's own command or banner (`--op` only where the log does not say);
the rank count from `# Rank` lines, else nThread x nGpus x the launcher's `-n`, else (with a
warning naming the ambiguity) from busbw/algbw. Printed algbw/busbw are kept and cross-checked
against size/time; a mismatch beyond rounding refuses the file. `#wrong`, `Out of bounds values
... FAILED` and hccl_test `failed` mark the run failed; a run cut off mid-table keeps its rows and
says where. Times are microseconds in all three formats; bandwidths are recomputed in GB/s (1e9 B/s).
"""
from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from collectives.ops import OPS, bandwidths
from reports.result_files import size_limit
from reports.results import CollectiveRow, ResultError, bench_entry, result_file

NCCL_OPS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
            "alltoall": "all_to_all", "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv"}
NCCL_TYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64", "int32": "int32",
              "int": "int32", "int8": "int8", "uint8": "uint8", "int64": "int64", "uint32": "uint32",
              "uint64": "uint64", "char": "int8", "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2",
              "fp8_e4m3": "float8_e4m3", "fp8_e5m2": "float8_e5m2"}
HCCL_TYPES = {"fp32": "float32", "fp16": "float16", "bfp16": "bfloat16", "bf16": "bfloat16", "fp64": "float64",
              "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
              "uint16": "uint16", "uint32": "uint32", "uint64": "uint64"}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1, "int16": 2,
            "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "float8_e4m3": 1, "float8_e5m2": 1}

_PREFIXES = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)? )+")
_PERF = re.compile(r"\b(?:nccl_|rccl_)?([a-z_]+?)_perf(?:_mpi)?\b")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)$")
_NTHREAD = re.compile(r"^#?\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_LAUNCH_N = re.compile(r"\b(?:mpirun|mpiexec|srun|orterun|prterun)\b.*?\s(?:-n|-np|--np|--ntasks)[\s=]+(\d+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)")
# nccl-tests prints 2 decimals: a bandwidth must match what size/time gives within that and the
# rounding of the printed time (4-5 significant digits)
_ABS_TOL, _REL_TOL = 0.011, 0.02
LOG_LIMIT_MIB = 64   # a campaign's log is a few MiB; HCCL_BENCH_MAX_LOG_MB raises it


def canonical_op(name: str) -> str | None:
    return NCCL_OPS.get(name.replace("_", "").lower())


@dataclass
class Sample:
    """One printed row half (out-of-place or in-place) of one size."""
    size: int
    count: int
    dtype: str
    redop: str
    inplace: bool
    time_us: float
    algbw: float | None
    busbw: float | None
    wrong: float | None
    line: int


@dataclass
class LogRun:
    """One run found in a log: its op, ranks, rows and what went wrong, with the lines it spans."""
    first_line: int
    op: str | None = None
    header: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    ranks: dict[int, tuple[str, str]] = field(default_factory=dict)   # rank -> (host, device name)
    nthread_ngpus: int | None = None
    launch_n: int | None = None
    last_line: int = 0
    summary: str = ""            # "Out of bounds values : 0 OK"
    failed: str = ""             # why the tool itself says the run failed
    cut: str = ""                # where the run was cut off (a crash, a truncated file)
    warnings: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


def _need(value, what: str, where: str, flag: str):
    if value in (None, ""):
        raise ResultError(f"{where}: cannot tell the {what} from the log; pass {flag}")
    return value


def _float(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def _dedupe(header: list[str]) -> list[str]:
    """The in-place columns repeat the out-of-place names: suffix the second occurrence."""
    seen, out = set(), []
    for name in header:
        out.append(name + "_2" if name in seen else name)
        seen.add(name)
    return out


def _nranks_from_ratio(op: str, samples: list[Sample]) -> tuple[int | None, str]:
    """busbw/algbw = factor(n), inverted on the row with the most precise (largest) algbw; the
    2-decimal rounding allows a range of n, which is named."""
    rows = [(s.algbw, s.busbw) for s in samples if s.algbw and s.busbw and s.algbw > 0]
    if op not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") or not rows:
        return None, ""
    alg, bus = max(rows)

    def n_of(r: float) -> float:
        if op == "all_reduce":
            return 2 / (2 - r) if r < 2 else float("inf")
        return 1 / (1 - r) if r < 1 else float("inf")
    lo, hi = n_of((bus - 0.005) / (alg + 0.005)), n_of((bus + 0.005) / max(alg - 0.005, 1e-9))
    n = n_of(bus / alg)
    if n == float("inf") or n > 1e6:
        return None, ""
    low, high = max(2, int(lo + 0.5)), int(hi + 0.5) if hi != float("inf") else None
    span = f"only {low}" if low == high else f"any of {low}..{high}" if high else f"any of {low} or more"
    return int(round(n)), (f"rank count {int(round(n))} inferred from busbw/algbw on {alg} GB/s ({span} fits the "
                           "printed rounding): the log names no ranks; pass --nranks to be sure")


class NcclTextReader:
    """nccl-tests / rccl-tests text: splits a log into runs at each banner or table header."""

    def __init__(self):
        self.runs: list[LogRun] = []
        self.pending_op: str | None = None      # the op named since the last run ended
        self.pending_n: int | None = None

    def current(self, number: int) -> LogRun:
        if not self.runs or self.runs[-1].samples or self.runs[-1].summary:
            self.runs.append(LogRun(first_line=number, op=self.pending_op, launch_n=self.pending_n))
        return self.runs[-1]

    def feed(self, number: int, line: str) -> None:
        s = line.strip()
        if not s:
            return
        perf = _PERF.search(s)
        if perf and canonical_op(perf.group(1)):
            op = canonical_op(perf.group(1))
            run = self.runs[-1] if self.runs and not (self.runs[-1].samples or self.runs[-1].summary) else None
            if run is not None and run.op is None:
                run.op = op
            self.pending_op = op
        if m := _LAUNCH_N.search(s[:perf.start()] if perf else s):   # the launcher's -n, not the benchmark's
            self.pending_n = int(m.group(1))
            if self.runs and not (self.runs[-1].samples or self.runs[-1].summary):
                self.runs[-1].launch_n = self.pending_n
        if m := _NTHREAD.match(s):
            run = self.current(number)
            if run.header and not run.samples:   # a second banner before any row: a new launch
                run = LogRun(first_line=number, op=self.pending_op, launch_n=self.pending_n)
                self.runs.append(run)
            run.nthread_ngpus = int(m.group(1)) * int(m.group(2))
            return
        if m := _RANK.match(s):
            run = self.current(number)
            run.ranks.setdefault(int(m.group(1)), (m.group(2), m.group(3).strip()))
            return
        if s.startswith("#"):
            tokens = s.lstrip("#").split()
            if tokens[:3] == ["size", "count", "type"] and "time" in tokens:
                run = self.current(number)
                if run.header and run.samples:
                    run = self.current(number)
                run.header = _dedupe(tokens)
            elif m := _OOB.match(s):
                if self.runs:
                    run = self.runs[-1]
                    run.summary, run.last_line = s.lstrip("# "), number
                    if m.group(2).upper() != "OK" or int(m.group(1)):
                        run.failed = f"the log says: {run.summary}"
                    self.pending_op = self.pending_n = None
            return
        if not self.runs or not self.runs[-1].header or self.runs[-1].summary:
            return
        run = self.runs[-1]
        tokens = s.split()
        if not tokens[0].isdigit():
            return                                  # a library's log line inside the table
        if len(tokens) < len(run.header):
            if len(tokens) >= 3 and tokens[1].isdigit():
                run.cut = f"line {number}: row cut off ({len(tokens)} of {len(run.header)} columns), ignored"
                run.warnings.append(run.cut)
            return
        if not tokens[1].isdigit():
            return
        if len(tokens) > len(run.header) or any(_float(t.rstrip("*")) is None and t != "N/A"
                                                for t in tokens[len(tokens) - 4:]):
            # a row the tool abandoned: nccl-tests prints its error where the numbers would be
            run.failed = run.failed or f"line {number}: the run failed mid-row: {' '.join(tokens[:12])[:120]}"
            run.cut = run.cut or f"line {number}: the run stopped inside this row"
            return
        self._row(run, number, dict(zip(run.header, tokens)))

    def _row(self, run: LogRun, number: int, row: dict[str, str]) -> None:
        size, count = int(row["size"]), int(row["count"])
        dtype = NCCL_TYPES.get(row.get("type", ""))
        if dtype is None:
            run.warnings.append(f"line {number}: unknown data type {row.get('type')!r}, row ignored")
            return
        run.last_line = number
        if size == 0:
            return
        redop = row.get("redop", "none")
        for inplace, suffix in ((False, ""), (True, "_2")):
            time_us = _float(row.get("time" + suffix, "") or row.get("cputime" + suffix, ""))
            if time_us is None:
                continue
            if time_us <= 0:
                run.warnings.append(f"line {number}: time {time_us} us is not a measurement, ignored")
                continue
            wrong_text = row.get("#wrong" + suffix, row.get("wrong" + suffix))
            wrong = None if wrong_text in (None, "N/A") else _float(wrong_text.rstrip("*"))
            if wrong_text and wrong_text.endswith("*"):   # rccl-tests marks errors over its threshold
                run.failed = run.failed or f"line {number}: #wrong {wrong_text} at {size} B"
            if wrong is not None and wrong > 0:
                run.failed = run.failed or f"line {number}: #wrong {wrong_text} at {size} B"
            run.samples.append(Sample(size, count, dtype, redop, inplace, time_us, _float(row.get("algbw" + suffix, "")),
                                      _float(row.get("busbw" + suffix, "")), wrong, number))
        if "error" in row:
            run.extra["wrong_is_max_error"] = True   # the old `error` column is a max error, not a count


def _nranks(run: LogRun, given: int | None, where: str) -> int:
    """From the log's own words first; --nranks only where it says nothing."""
    said = len(run.ranks) or ((run.nthread_ngpus or 1) * run.launch_n if run.launch_n else None)
    if said:
        if given and given != said:
            run.warnings.append(f"--nranks {given} ignored: the log says {said} ranks")
        return said
    if given:
        return given
    n, warning = _nranks_from_ratio(str(run.op), run.samples)
    if warning:
        run.warnings.append(warning)
    if n is None and run.nthread_ngpus and run.nthread_ngpus > 1:   # one process driving its GPUs, most likely
        n = run.nthread_ngpus
        run.warnings.append(f"rank count {n} taken from nThread x nGpus alone (no # Rank lines, no launcher -n); "
                            "pass --nranks if more processes ran")
    return _need(n, "rank count", where, "--nranks")


def _cross_check(op: str, nranks: int, samples: list[Sample], where: str) -> None:
    """Printed bandwidths against size/time: a wrong rank count, op or unit shows here first."""
    factor = OPS[op].bus_factor(nranks)
    for s in samples:
        alg, bus = bandwidths(op, s.size, s.time_us * 1e-6, nranks)
        if s.busbw is not None and s.busbw >= 0.5 and abs(s.busbw - bus) > _ABS_TOL + _REL_TOL * bus:
            if s.algbw and s.algbw >= 0.5 and abs(s.algbw - alg) <= _ABS_TOL + _REL_TOL * alg:
                implied = s.busbw / s.algbw
                raise ResultError(f"{where}: line {s.line}: printed busbw {s.busbw} is {implied:.3f} x algbw, but {op} "
                                  f"on {nranks} ranks gives {factor:.3f} x: the rank count or the op is wrong "
                                  f"(pass --nranks / --op, or check the log)")
            raise ResultError(f"{where}: line {s.line}: printed busbw {s.busbw} GB/s but {s.size} B in {s.time_us} us "
                              f"gives {bus:.2f} GB/s for {op} on {nranks} ranks: rank count, op or units disagree")


def _entry(tool: str, op: str, dtype: str, redop: str, inplace: bool, nbytes: int, count: int, nranks: int,
           times_us: list[float], wrong, imported: dict, where: str) -> dict:
    """One imported cell as a result entry; a time that is not finite and > 0 refuses the log."""
    bad = next((t for t in times_us if not (isinstance(t, (int, float)) and 0 < t < float("inf"))), None)
    if bad is not None:
        raise ResultError(f"{where}: {op} {nbytes} B has time {bad} us; a time must be a finite number > 0")
    t_us = float(statistics.median(times_us))
    algbw, busbw = bandwidths(op, nbytes, t_us * 1e-6, nranks)
    row = CollectiveRow(backend=tool, algo="default", op=op, dtype=dtype, redop=redop, inplace=inplace, nranks=nranks,
                        bytes=nbytes, count=count, time_us=t_us, algbw_gbps=algbw, busbw_gbps=busbw, wrong=wrong,
                        imported={k: v for k, v in imported.items() if v is not None})
    name = f"import[{tool}-{op}-{dtype}-{nbytes}B-{'ip' if inplace else 'oop'}]"
    return bench_entry(name, row, [x * 1e-6 for x in times_us], group=f"{tool} {op} {dtype}")


def _result(path: Path, fmt: str, tool: str, op: str, nranks: int, benches: list[dict], run: LogRun,
            hosts: dict[str, int], devices: list[str], label: str | None) -> dict:
    meta = {"format": fmt, "label": label or None,
            "imported_from": {"file": str(path), "lines": [run.first_line, run.last_line]},
            "complete": not run.cut, "interrupted": run.cut or None,
            "failed": run.failed or None, "warnings": run.warnings,
            "groups": {"imported": {"hosts": hosts, "devices": sorted(set(devices)), "nranks": nranks}},
            "provenance": {"imported": {"tool": tool, "op": op, **run.extra}}}
    return result_file(benches, meta)


def nccl_text(path: Path, text: str, op: str | None, nranks: int | None, label: str | None = None) -> list[dict]:
    where = str(path)
    reader = NcclTextReader()
    for number, line in enumerate(text.splitlines(), 1):
        reader.feed(number, _PREFIXES.sub("", line))
    runs = [r for r in reader.runs if r.samples]
    if not runs:
        crashed = next((r.failed for r in reader.runs if r.failed), "")
        if crashed:
            raise ResultError(f"{path}: the run failed before its first complete row ({crashed})")
        raise ResultError(f"{path}: no nccl-tests result rows found (expected a '# size count type ...' header "
                          "followed by rows)")
    out = []
    for index, run in enumerate(runs):
        where_run = f"{path} (run {index + 1}, line {run.first_line})" if len(runs) > 1 else where
        run_op: str = _need(run.op or op, "collective", where_run, "--op")
        if op and run_op != op:
            run.warnings.append(f"--op {op} ignored: the log says {run_op}")
        run.op = run_op
        n = _nranks(run, nranks, where_run)
        if not run.summary:
            run.cut = run.cut or (f"line {run.last_line}: the run ended without its 'Out of bounds values' line "
                                  f"(crashed or cut off); the {len(run.samples)} samples before it are kept")
            run.warnings.append(run.cut)
        _cross_check(run_op, n, run.samples, where_run)
        cells: dict[tuple, list[Sample]] = {}
        for s in run.samples:
            cells.setdefault((s.size, s.count, s.dtype, s.redop if OPS[run_op].reduces else "none", s.inplace), []).append(s)
        benches = []
        for (size, count, dtype, redop, inplace), samples in cells.items():
            wrongs = [s.wrong for s in samples if s.wrong is not None]
            benches.append(_entry("nccl-tests", run_op, dtype, redop, inplace, size, count, n, [s.time_us for s in samples],
                                  max(wrongs) if wrongs else None,
                                  {"printed_algbw": samples[0].algbw, "printed_busbw": samples[0].busbw,
                                   "header": " ".join(run.header), "source_line": samples[0].line},
                                  f"{where_run}: line {samples[0].line}"))
        hosts: dict[str, int] = {}
        for host, _ in run.ranks.values():
            hosts[host] = hosts.get(host, 0) + 1
        out.append(_result(path, "nccl-tests-text", "nccl-tests", run_op, n, benches, run, hosts,
                           [d for _, d in run.ranks.values()], label))
    return out


def nccl_json(path: Path, data: dict, op: str | None, nranks: int | None, label: str | None = None) -> list[dict]:
    if not isinstance(data, dict):
        raise ResultError(f"{path}: JSON that is not an nccl-tests -J object")
    args = [str(a) for a in data.get("args") or []]
    named = next((canonical_op(m.group(1)) for a in args[:1] for m in [_PERF.search(a)] if m), None)
    json_op: str = _need(named or op, "collective", str(path), "--op")
    run = LogRun(first_line=1, op=json_op)
    config = data.get("config") or {}
    devices = [d for d in config.get("devices") or [] if isinstance(d, dict)]
    per_process = int(config.get("nthreads") or 1) * int(config.get("ngpus") or 1)
    said = config.get("nranks") or (len(devices) * per_process if devices else None)
    n = int(said or nranks or 0) or _need(None, "rank count", str(path), "--nranks")
    benches = []
    results = data.get("results") or []
    if not isinstance(results, list):
        raise ResultError(f"{path}: 'results' is not a list: not nccl-tests -J output")
    for r in results:
        if not isinstance(r, dict) or int(r.get("size", 0)) == 0:
            continue
        for inplace, key in ((False, "out_of_place"), (True, "in_place")):
            body = r.get(key)
            if not isinstance(body, dict) or (body.get("time") or body.get("cpu_time")) in (None, 0):
                continue
            wrong = body.get("nwrong")
            if isinstance(wrong, (int, float)) and wrong > 0:
                run.failed = run.failed or f"nwrong {wrong} at {r.get('size')} B"
            time_us = float(body.get("time") or body.get("cpu_time") or 0)
            sample = Sample(int(r["size"]), int(r.get("count", 0)), NCCL_TYPES.get(str(r.get("type")), str(r.get("type"))),
                            str(r.get("redop", "none")), inplace, time_us, body.get("algbw"), body.get("busbw"), wrong, 0)
            _cross_check(json_op, n, [sample], str(path))
            benches.append(_entry("nccl-tests", json_op, sample.dtype, sample.redop if OPS[json_op].reduces else "none",
                                  inplace, sample.size, sample.count, n, [time_us], wrong,
                                  {"nccl_version": data.get("nccl_version"), "printed_algbw": sample.algbw,
                                   "printed_busbw": sample.busbw}, str(path)))
    if not benches:
        raise ResultError(f"{path}: nccl-tests JSON without results")
    hosts: dict[str, int] = {}
    for d in devices:
        hosts[str(d.get("hostname"))] = hosts.get(str(d.get("hostname")), 0) + per_process
    return [_result(path, "nccl-tests-json", "nccl-tests", json_op, n, benches, run, hosts,
                    [str(d.get("name") or d.get("device_name") or "") for d in devices], label)]


def hccl_test(path: Path, text: str, op: str | None, nranks: int | None, dtype: str | None,
              label: str | None = None) -> list[dict]:
    """hccl_test prints its table on the root rank: a size seen again within one run is a repeat
    (its times are samples), not another rank. Each command line (or a table header after rows)
    starts another run, so concatenated outputs of several tests split into their runs."""
    segments: list[dict] = []
    current: dict | None = None
    for number, line in _logical_lines(text):
        if "_test" in line and ("mpirun" in line or " -b " in line):
            if current is None or current["rows"]:
                current = {"cmd": [], "header": None, "rows": {}, "run": LogRun(first_line=number)}
                segments.append(current)
            current["cmd"].append(line)
            continue
        cols = [c.strip().rstrip(":") for c in line.split("|")]
        if "data_size(Bytes)" in cols:
            if current is None or current["rows"]:
                inherited = current["cmd"] if current else []   # the same command, run again
                current = {"cmd": inherited, "header": None, "rows": {}, "run": LogRun(first_line=number)}
                segments.append(current)
            current["header"] = cols
            continue
        if current is None or current["header"] is None or not cols[0].isdigit():
            continue
        _hccl_row(current, number, cols)
    found = [seg for seg in segments if seg["rows"]]
    if not found:
        raise ResultError(f"{path}: no hccl_test result rows found (expected 'data_size(Bytes): | avg_time(us): | ...')")
    return [_hccl_result(path if len(found) == 1 else f"{path} (run {i + 1})", path, seg, op, nranks, dtype, label)
            for i, seg in enumerate(found)]


def _logical_lines(text: str):
    """(first line number, line) with prefixes removed and backslash-continued lines joined."""
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = _PREFIXES.sub("", raw)
        start = start or number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending, start = "", 0
    if pending:
        yield start, pending


def _hccl_row(seg: dict, number: int, cols: list[str]) -> None:
    run, header = seg["run"], seg["header"]
    if len(cols) < len(header):
        run.cut = f"line {number}: row cut off ({len(cols)} of {len(header)} columns), ignored"
        run.warnings.append(run.cut)
        return
    row = dict(zip(header, cols))
    time_col = "aveg_time(us)" if "aveg_time(us)" in row else "avg_time(us)"
    t = _float(row.get(time_col, ""))
    if t is None or t <= 0:
        run.warnings.append(f"line {number}: no time in this row, ignored")
        return
    check = row.get("check_result")
    if check not in (None, "NULL", "success"):
        run.failed = run.failed or f"line {number}: check_result {check} at {row['data_size(Bytes)']} B"
    algbw = _float(row.get("alg_bandwidth(GB/s)", ""))
    seg["rows"].setdefault(int(row["data_size(Bytes)"]), []).append((t, algbw, check, time_col))
    run.last_line = number


def _hccl_result(where, path: Path, seg: dict, op: str | None, nranks: int | None, dtype: str | None, label) -> dict:
    run, cmd = seg["run"], " ".join(seg["cmd"])
    named = next((canonical_op(m.group(1)) for m in re.finditer(r"([a-z_]+?)_test\b", cmd) if canonical_op(m.group(1))), None)
    run.op = named or op
    m = _LAUNCH_N.search(cmd) or re.search(r"\s-p\s+(\d+)", cmd)
    nranks = (int(m.group(1)) if m else None) or nranks
    m = re.search(r"\s-d\s+(\w+)", cmd)
    dtype = (HCCL_TYPES.get(m.group(1)) if m else None) or dtype
    _need(run.op, "collective", str(where), "--op")
    nranks = _need(nranks, "rank count", str(where), "--nranks")
    dtype = _need(dtype, "data type", str(where), "--dtype")
    benches = []
    for size, samples in sorted(seg["rows"].items()):
        checks = [c for _, _, c, _ in samples if c not in (None, "NULL")]
        benches.append(_entry("hccl_test", run.op, dtype, "sum" if OPS[run.op].reduces else "none", False, size,
                              size // ITEMSIZE.get(dtype, 1), nranks, [t for t, _, _, _ in samples],
                              sum(c != "success" for c in checks) if checks else None,
                              {"reported_algbw": samples[0][1], "check_result": samples[0][2], "time_column": samples[0][3],
                               "repeats": len(samples),
                               "unit_note": "bandwidth recomputed as size/time in GB/s (1e9); hccl_test's printed "
                                            "alg_bandwidth kept as reported_algbw"}, str(where)))
    return _result(path, "hccl_test", "hccl_test", run.op, nranks, benches, run, {}, [], label)


def import_runs(path: str | Path, op: str | None = None, nranks: int | None = None, dtype: str | None = None,
                label: str | None = None) -> list[dict]:
    """Every run in the file, in file order, each a result file's content."""
    path = Path(path)
    if op is not None and op not in OPS:
        raise ResultError(f"--op {op!r}: allowed {', '.join(OPS)}")
    if nranks is not None and nranks < 1:
        raise ResultError(f"--nranks {nranks}: give a rank count >= 1")
    limit = size_limit("HCCL_BENCH_MAX_LOG_MB", LOG_LIMIT_MIB)
    try:
        size = path.stat().st_size
        if size > limit:
            raise ResultError(f"{path} is {size >> 20} MiB; logs above {limit >> 20} MiB are refused "
                              "(HCCL_BENCH_MAX_LOG_MB raises it)")
        raw = path.read_bytes()
    except OSError as exc:
        raise ResultError(f"cannot read {path}: {exc.strerror or exc}") from None
    if b"\0" in raw[:4096]:
        raise ResultError(f"{path} is binary (NUL bytes), not a text log of nccl-tests, rccl-tests or hccl_test")
    if raw.lstrip().startswith(b"{"):
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise ResultError(f"{path}: looks like JSON but does not parse: {str(exc)[:80]}") from None
        return nccl_json(path, data, op, nranks, label)
    text = raw.decode(errors="replace")
    del raw
    if "data_size(Bytes)" in text:
        return hccl_test(path, text, op, nranks, dtype, label)
    return nccl_text(path, text, op, nranks, label)


def import_file(path: str | Path, op: str | None = None, nranks: int | None = None, dtype: str | None = None) -> dict:
    """The file's first run (the common single-run case)."""
    return import_runs(path, op, nranks, dtype)[0]
