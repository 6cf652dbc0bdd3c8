"""Other tools' logs into the result schema, read for what they say or refused in one line, never
guessed: nccl-tests / rccl-tests text and hccl_test here, each other format in its import_* module
(import_runs dispatches). What each reads: docs/results.md (Importing other tools' logs)."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from collectives.ops import ITEMSIZE, OPS, by_log_name
from reports import import_imb, import_inspector, import_msprof, import_nccl_json, import_osu, import_rccl_reporter, run_failures
from reports.import_nccl_json import fits, ratio_candidates, span_text
from reports.log_rows import (
    HCCL_TYPES,
    LAUNCH_N,
    NCCL_TYPES,
    PERF,
    PREFIXES,
    LogRun,
    Sample,
    as_float,
    check_rows,
    cross_check,
    entry,
    log_bytes,
    need,
    result_of,
)
from reports.run_failures import FirstFailure
from schema.results import ResultError

_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)$")
_NTHREAD = re.compile(r"^#?\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_HCCL_RANK_FAILED = re.compile(r"local rank_id (\d+), check result failed,\s*(\d+)\s*\|")   # hccl_test, a non-root rank
HCCL_REDOPS = ("sum", "prod", "max", "min")   # hccl_test's -o
_TITLE = re.compile(r"\b(\d{1,6})[ -]?(?:x ?)?(?:GPUs?|gpus?|ranks?|NPUs?|devices)\b")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)")
# rccl-tests' Reporter record, one a line: "numCycle" first, or "name" first (the older writer's lines)
_REPORTER_LINE = re.compile(r'\{\s*"(?:numCycle|name)"\s*:')
# NCCL's own log line (debug.cc: "HOST:PID:TID [DEV] NCCL INFO ", WARN with "FILE:LINE " before NCCL),
# maybe behind an MPICH "[RANK] " tag; printed mid-row, it starts right after the row's last character
_NCCL_LOG = re.compile(r"(?:\[\d+\] ?)?(?P<host>[^\s:\[\]]+):\d+:\d+ \[\d+\] (?:\S+:\d+ )?NCCL (?:INFO|WARN|TRACE|ABORT)\b")


class NcclTextReader:
    """nccl-tests / rccl-tests text: splits a log into runs at each banner or table header."""

    def __init__(self) -> None:
        self.runs: list[LogRun] = []
        self.pending_op: str | None = None      # the op named since the last run ended
        self.pending_n: int | None = None
        self.pending: list[str] = []             # a row's first pieces, split by library log lines
        self.pending_line = 0
        self.hosts: set[str] = set()            # from `# Rank` lines: how NCCL's log lines begin
        self.failures: dict[int, FirstFailure] = {}

    def current(self, number: int) -> LogRun:
        if not self.runs or self.runs[-1].samples or self.runs[-1].summary:
            self.runs.append(LogRun(first_line=number, op=self.pending_op, launch_n=self.pending_n))
        return self.runs[-1]

    def finish(self) -> None:
        """A row still in pieces when the log or its table ends was cut off."""
        if self.pending:
            run = self.runs[-1]
            run.cut = f"line {self.pending_line}: row cut off ({len(self.pending)} of {len(run.header)} columns), ignored"
            run.warnings.append(run.cut)
            self.pending = []

    def _failure(self, number: int, found: tuple[str, bool]) -> None:
        if self.runs and self.runs[-1].summary:
            # after a run's '# Avg bus bandwidth' (nccl-tests tears its communicators down then): that
            # run's rows stand, the error is said with it, and the next banner still starts a clean run
            self.runs[-1].warnings.append(f"line {number}: an error after its summary: {found[0]}")
            return
        run = self.runs[-1] if self.runs and not self.runs[-1].summary else self.current(number)
        first = self.failures.setdefault(id(run), FirstFailure())
        before = first.text
        first.see(number, found)
        if not run.failed or run.failed == before:
            run.failed = first.text
        self.pending = []                       # the row it interrupted is abandoned

    def _without_library_log(self, s: str) -> str:
        """The row text before an NCCL log line printed into it (its host glued to the row's end)."""
        m = _NCCL_LOG.search(s)
        if not m:
            return s
        if m.start("host") > m.start():         # "[RANK] " in front: the host starts clean
            return s[:m.start()]
        host = m.group("host")
        known = next((h for h in self.hosts if host.endswith(h)), None)
        lead = len(host) - len(known) if known else (g.end() if (g := re.match(r"[-+\d.]+(?=[A-Za-z])", host)) else 0)
        return s[:m.start("host") + lead]

    def feed(self, number: int, line: str) -> None:
        s = line.strip()
        if not s:
            return
        if found := run_failures.nccl_tests(s):
            self._failure(number, found)
            return
        perf = PERF.search(s)
        if perf and (op := by_log_name(perf.group(1))):
            run = self.runs[-1] if self.runs and not (self.runs[-1].samples or self.runs[-1].summary) else None
            if run is not None and run.op is None:
                run.op = op
            self.pending_op = op
        if m := LAUNCH_N.search(s[:perf.start()] if perf else s):   # the launcher's -n, not the benchmark's
            self.pending_n = int(m.group(1))
            if self.runs and not (self.runs[-1].samples or self.runs[-1].summary):
                self.runs[-1].launch_n = self.pending_n
        if m := _NTHREAD.match(s):
            self.finish()
            run = self.current(number)
            if run.header:   # a second banner before any row: a new launch
                run = LogRun(first_line=number, op=self.pending_op, launch_n=self.pending_n)
                self.runs.append(run)
            run.nthread_ngpus = int(m.group(1)) * int(m.group(2))
            return
        if m := _RANK.match(s):
            run = self.current(number)
            run.ranks.setdefault(int(m.group(1)), (m.group(2), m.group(3).strip()))
            self.hosts.add(m.group(2))
            return
        if s.startswith("#"):
            self.finish()
            tokens = s.lstrip("#").split()
            if tokens[:3] == ["size", "count", "type"] and "time" in tokens:
                run = self.current(number)
                run.header = [t + "_2" if t in tokens[:i] else t for i, t in enumerate(tokens)]   # in-place: the same names
            elif m := _OOB.match(s):
                if self.runs:
                    run = self.runs[-1]
                    run.summary, run.last_line = s.lstrip("# "), number
                    if m.group(2).upper() != "OK" or int(m.group(1)):
                        run.failed = run.failed or f"the log says: {run.summary}"
                    self.pending_op = self.pending_n = None
            return
        if not self.runs or not self.runs[-1].header or self.runs[-1].summary:
            return
        run = self.runs[-1]
        tokens = self._without_library_log(s).split()
        starts = len(tokens) >= 2 and tokens[0].isdigit() and tokens[1].isdigit()   # size and count
        if self.pending and not starts:
            tokens, number, self.pending = self.pending + tokens, self.pending_line, []
        elif not starts:
            return                                  # a library's log line inside the table
        else:
            self.finish()                           # a new row while another was in pieces: that one was cut
        columns = run.header   # nccl-tests before 2.13.2: alltoall, all_gather and broadcast rows print no redop
        if len(tokens) == len(columns) - 1 and "redop" in columns and as_float(tokens[columns.index("redop")]) is not None:
            columns = [c for c in columns if c != "redop"]
        if len(tokens) < len(columns):
            self.pending, self.pending_line = tokens, number
            return
        if len(tokens) > len(columns) or any(as_float(t.rstrip("*")) is None and t != "N/A" for t in tokens[len(tokens) - 4:]):
            # a row the tool abandoned: nccl-tests prints its error where the numbers would be
            run.failed = run.failed or f"line {number}: the run failed mid-row: {' '.join(tokens[:12])[:120]}"
            run.cut = run.cut or f"line {number}: the run stopped inside this row"
            return
        self._row(run, number, dict(zip(columns, tokens)))

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
            time_us = as_float(row.get("time" + suffix, "") or row.get("cputime" + suffix, ""))
            if time_us is None:
                continue
            if time_us <= 0:
                run.warnings.append(f"line {number}: time {time_us} us is not a measurement, ignored")
                continue
            wrong_text = row.get("#wrong" + suffix, row.get("wrong" + suffix))
            wrong = None if wrong_text in (None, "N/A") else as_float(wrong_text.rstrip("*"))
            if (wrong is not None and wrong > 0) or (wrong_text or "").endswith("*"):   # rccl-tests: * over its threshold
                run.failed = run.failed or f"line {number}: #wrong {wrong_text} at {size} B"
            run.samples.append(Sample(size, count, dtype, redop, inplace, time_us, as_float(row.get("algbw" + suffix, "")),
                                      as_float(row.get("busbw" + suffix, "")), wrong, number))
        if "error" in row:
            run.extra["wrong_is_max_error"] = True   # the old `error` column is a max error, not a count


def _nranks(run: LogRun, given: int | None, where: str, hint: tuple[int, str] | None = None) -> int:
    """From the log's own words first; --nranks only where it says nothing; else what busbw/algbw
    allows at its printed precision, when that is one count (or the title's count is one of them)."""
    said = len(run.ranks) or ((run.nthread_ngpus or 1) * run.launch_n if run.launch_n else None)
    if said:
        if given and given != said:
            run.warnings.append(f"--nranks {given} ignored: the log says {said} ranks")
        return said
    if given:
        return given
    cands = ratio_candidates(str(run.op), run.samples)
    if cands:
        top = max(s.algbw for s in run.samples if s.algbw and s.busbw)
        if cands[0] == cands[1]:
            run.warnings.append(f"rank count {cands[0]} inferred from busbw/algbw on {top} GB/s (only {cands[0]} fits the "
                                "printed rounding): the log names no ranks; pass --nranks to be sure")
            return cands[0]
        if hint and fits(cands, hint[0]):
            run.warnings.append(f"rank count {hint[0]} from the log's words ({hint[1][:60]!r}), which busbw/algbw confirms "
                                f"(it allows {span_text(cands)}): the log has no # Rank lines")
            return hint[0]
        said_hint = f"; its words say {hint[0]}, which does not fit" if hint else ""
        raise ResultError(f"{where}: the log names no ranks and busbw/algbw fits {span_text(cands)} ranks at its printed "
                          f"precision{said_hint}; pass --nranks N")
    if run.nthread_ngpus and run.nthread_ngpus > 1:   # one process driving its GPUs, most likely
        run.warnings.append(f"rank count {run.nthread_ngpus} taken from nThread x nGpus alone (no # Rank lines, no "
                            "launcher -n); pass --nranks if more processes ran")
        return run.nthread_ngpus
    return need(None, "rank count", where, "--nranks")


def nccl_text(path: Path, text: str, op: str | None, nranks: int | None, label: str | None = None) -> list[dict]:
    where = str(path)
    reader = NcclTextReader()
    hints: list[tuple[int, int, str]] = []   # (line, count, prose): "128 GPU all reduce ...", a hint only
    for number, line in enumerate(text.splitlines(), 1):
        clean = PREFIXES.sub("", line)
        if (m := _TITLE.search(clean)) and not clean.lstrip().startswith("#"):
            hints.append((number, int(m.group(1)), clean.strip()))
        reader.feed(number, clean)
    reader.finish()
    runs = [r for r in reader.runs if r.samples]
    dead = [r for r in reader.runs if r.failed and not r.samples]
    check_rows(runs, dead[0].failed if dead else "", str(path),
               "no nccl-tests result rows found (expected a '# size count type ...' header followed by rows)")
    for d in dead:   # told beside the run before it, never dropped silently
        near = max((r for r in runs if r.first_line < d.first_line), key=lambda r: r.first_line, default=runs[0])
        near.warnings.append(f"the run at line {d.first_line} FAILED before its first result row: {d.failed}")
    out = []
    for index, run in enumerate(runs):
        where_run = f"{path} (run {index + 1}, line {run.first_line})" if len(runs) > 1 else where
        run_op: str = need(run.op or op, "collective", where_run, "--op")
        if op and run_op != op:
            run.warnings.append(f"--op {op} ignored: the log says {run_op}")
        run.op = run_op
        before = [h for h in hints if h[0] < run.first_line and (index == 0 or h[0] > runs[index - 1].last_line)]
        n = _nranks(run, nranks, where_run, (before[-1][1], before[-1][2]) if before else None)
        if not run.summary:
            run.cut = run.cut or (f"line {run.last_line}: the run ended without its 'Out of bounds values' line "
                                  f"(crashed or cut off); the {len(run.samples)} samples before it are kept")
            run.warnings.append(run.cut)
        cross_check(run_op, n, run.samples, where_run)
        if n == nranks and not (run.ranks or run.launch_n):   # a given count must fit the printed precision too
            cands = ratio_candidates(run_op, run.samples)
            if not fits(cands, n):
                raise ResultError(f"{where_run}: --nranks {n} does not fit the printed busbw/algbw (it fits "
                                  f"{span_text(cands)} ranks)")
        cells: dict[tuple, list[Sample]] = {}
        for s in run.samples:
            cells.setdefault((s.size, s.count, s.dtype, s.redop if OPS[run_op].reduces else "none", s.inplace), []).append(s)
        benches = [entry("nccl-tests", run_op, dtype, redop, inplace, size, count, n, [s.time_us for s in ss],
                         max((s.wrong for s in ss if s.wrong is not None), default=None),
                         {"printed_algbw": ss[0].algbw, "printed_busbw": ss[0].busbw, "header": " ".join(run.header),
                          "source_line": ss[0].line}, f"{where_run}: line {ss[0].line}")
                   for (size, count, dtype, redop, inplace), ss in cells.items()]
        hosts = dict(Counter(host for host, _ in run.ranks.values()))
        out.append(result_of(path, "nccl-tests-text", "nccl-tests", run_op, n, benches, run, hosts,
                           [d for _, d in run.ranks.values()], label))
    return out


def hccl_test(path: Path, text: str, op: str | None, nranks: int | None, dtype: str | None,
              label: str | None = None) -> list[dict]:
    """hccl_test prints its table on the root rank: a size seen again within one run is a repeat, not another
    rank. Each command line (or a table header after rows) starts another run."""
    segments: list[dict] = []
    current: dict | None = None

    def segment(number: int, cmd: list[str] | None = None) -> dict:
        segments.append({"cmd": [] if cmd is None else cmd, "header": None, "rows": {}, "run": LogRun(first_line=number)})
        return segments[-1]
    for number, line in _logical_lines(text):
        if error := run_failures.hccl_test(line.strip()):
            current = current or segment(number)
            current.setdefault("failure", FirstFailure()).see(number, error)
            continue
        if "_test" in line and ("mpirun" in line or " -b " in line):
            if current is None or current["rows"]:
                current = segment(number)
            current["cmd"].append(line)
            continue
        if failed := _HCCL_RANK_FAILED.search(line):   # a non-root rank's own check: the root's row shows only its own
            current = current or segment(number)
            rank, size = int(failed.group(1)), int(failed.group(2))
            current.setdefault("rank_failures", {}).setdefault(size, set()).add(rank)
            current["run"].failed = current["run"].failed or f"line {number}: rank {rank}'s check failed at {size} B"
            continue
        cols = [c.strip().rstrip(":") for c in line.split("|")]
        if "data_size(Bytes)" in cols:
            if current is None or current["rows"]:
                current = segment(number, current["cmd"] if current else None)   # the same command, run again
            current["header"] = cols
            continue
        if current is None or current["header"] is None or not cols[0].isdigit():
            continue
        run, header = current["run"], current["header"]
        if len(cols) < len(header):
            run.cut = f"line {number}: row cut off ({len(cols)} of {len(header)} columns), ignored"
            run.warnings.append(run.cut)
            continue
        row = dict(zip(header, cols))
        time_col = "aveg_time(us)" if "aveg_time(us)" in row else "avg_time(us)"
        if (t := as_float(row.get(time_col, ""))) is None or t <= 0:
            run.warnings.append(f"line {number}: no time in this row, ignored")
            continue
        if (check := row.get("check_result")) not in (None, "NULL", "success"):
            run.failed = run.failed or f"line {number}: check_result {check} at {row['data_size(Bytes)']} B"
        algbw = as_float(row.get("alg_bandwidth(GB/s)", ""))
        current["rows"].setdefault(int(row["data_size(Bytes)"]), []).append((t, algbw, check, time_col))
        run.last_line = number
    for seg in segments:
        if "failure" in seg:
            seg["run"].failed = seg["run"].failed or seg["failure"].text
    found = [seg for seg in segments if seg["rows"]]
    check_rows(found, next((seg["run"].failed for seg in segments if seg["run"].failed), ""), str(path),
               "no hccl_test result rows found (expected 'data_size(Bytes): | avg_time(us): | ...')")
    return [_hccl_result(path if len(found) == 1 else f"{path} (run {i + 1})", path, seg, op, nranks, dtype, label)
            for i, seg in enumerate(found)]


def _logical_lines(text: str):
    """(first line number, line) with prefixes removed and backslash-continued lines joined."""
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = PREFIXES.sub("", raw)
        start = start or number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending, start = "", 0
    if pending:
        yield start, pending


def _hccl_result(where, path: Path, seg: dict, op: str | None, nranks: int | None, dtype: str | None, label) -> dict:
    run, cmd = seg["run"], " ".join(seg["cmd"])
    named = next(filter(None, (by_log_name(m.group(1)) for m in re.finditer(r"([a-z_]+?)_test\b", cmd))), None)
    run.op = named or op
    binary = re.search(r"[a-z_]+_test\b", cmd)
    launcher, own = (cmd[:binary.start()], cmd[binary.end():]) if binary else (cmd, cmd)   # hccl_test's own -n is iterations
    m = LAUNCH_N.search(launcher) or re.search(r"\s-p\s+(\d+)", own)
    nranks = (int(m.group(1)) if m else None) or nranks
    m = re.search(r"\s-d\s+(\w+)", own)
    dtype = (HCCL_TYPES.get(m.group(1)) if m else None) or dtype
    m = re.search(r"\s(?:-o|--op)[\s=]+(\w+)", own)
    redop = (m.group(1).lower() if m else "sum") if OPS[run.op].reduces else "none"
    if redop not in HCCL_REDOPS:
        raise ResultError(f"{where}: hccl_test -o {redop!r} is not a reduction hccl_test runs (allowed "
                          f"{', '.join(HCCL_REDOPS)})")
    rank_failures = seg.get("rank_failures", {})
    need(run.op, "collective", str(where), "--op")
    nranks = need(nranks, "rank count", str(where), "--nranks")
    dtype = need(dtype, "data type", str(where), "--dtype")
    benches = []
    for size, samples in sorted(seg["rows"].items()):
        checks = [c for _, _, c, _ in samples if c not in (None, "NULL")]
        wrong = sum(c != "success" for c in checks) if checks else None
        if size in rank_failures:   # the root's row says success for itself; these ranks said failed
            wrong = (wrong or 0) + len(rank_failures[size])
        benches.append(entry("hccl_test", run.op, dtype, redop, False, size,
                              size // ITEMSIZE.get(dtype, 1), nranks, [t for t, _, _, _ in samples], wrong,
                              {"reported_algbw": samples[0][1], "check_result": samples[0][2], "time_column": samples[0][3],
                               "repeats": len(samples),
                               "unit_note": "bandwidth recomputed as size/time in GB/s (1e9); hccl_test's printed "
                                            "alg_bandwidth kept as reported_algbw"}, str(where)))
    return result_of(path, "hccl_test", "hccl_test", run.op, nranks, benches, run, {}, [], label)


def import_runs(path: str | Path, op: str | None = None, nranks: int | None = None, dtype: str | None = None,
                label: str | None = None) -> list[dict]:
    """Every run in the file, in file order, each a result file's content."""
    path = Path(path)
    if op is not None and op not in OPS:
        raise ResultError(f"--op {op!r}: allowed {', '.join(OPS)}")
    if nranks is not None and nranks < 1:
        raise ResultError(f"--nranks {nranks}: give a rank count >= 1")
    if path.is_dir():    # an NCCL Inspector dump directory: its per-process logs together
        return import_inspector.read([path], label)
    raw = log_bytes(path)
    if b"\0" in raw[:4096]:
        raise ResultError(f"{path} is binary (NUL bytes), not a text log of nccl-tests, rccl-tests or hccl_test")
    text = raw.decode(errors="replace")
    del raw
    head = text.lstrip()[:4096]
    import_msprof.refuse(path, head)
    if head.startswith("{\"header\"") or head.startswith("{\n  \"header\""):
        return import_inspector.read([path], label)
    first_line = head.split("\n", 1)[0]
    if (re.match(r"\[\s*(?:\{|\])", head) or _REPORTER_LINE.match(head) or head.startswith("numCycle,")
            or (first_line.startswith("{") and import_rccl_reporter.is_record_line(first_line))):
        return import_rccl_reporter.read(path, text, op, nranks, label)
    if head.startswith("{"):
        return import_nccl_json.read(path, text, op, nranks, label)
    if not head:
        raise ResultError(f"{path} is empty (rccl-tests leaves its -x output empty when the run crashed)")
    # OSU and IMB runs, and nccl-tests runs beside them (an acceptance job's log), in file order
    osu = "# OSU " in text and any(import_osu.HEADER.match(PREFIXES.sub("", line).strip()) for line in text.splitlines())
    imb = bool(import_imb.BANNER.search(text) or ("# Benchmarking " in text and "#repetitions" in text))
    runs = (import_osu.read(path, text, nranks, dtype, label) if osu else []) + (
        import_imb.read(path, text, nranks, label) if imb else [])
    if (osu or imb) and re.search(r"^\S*#\s+size\s+count\s+type\b", text, re.M):
        runs += nccl_text(path, text, op, nranks, label)
    if runs:
        return sorted(runs, key=lambda r: r["hccl_bench"]["imported_from"]["lines"][0])
    if "data_size(Bytes)" in text or run_failures.HCCL_TEST_BANNER.search(text) or run_failures.hccl_test_died(text):
        return hccl_test(path, text, op, nranks, dtype, label)
    return nccl_text(path, text, op, nranks, label)


def _is_inspector(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(64).lstrip().startswith(b'{"header"')
    except OSError:
        return False


def import_all(names: list[str], op: str | None = None, nranks: int | None = None, dtype: str | None = None,
               label: str | None = None) -> list[dict]:
    """Every run of every file, in order; NCCL Inspector logs (one per process) read together as one job's."""
    paths = [Path(n) for n in names]
    inspector = [p for p in paths if p.is_file() and _is_inspector(p)]
    out: list[dict] = []
    for p in paths:
        if p not in inspector:
            out += import_runs(p, op, nranks, dtype, label)
        elif p == inspector[0]:
            out += import_inspector.read(inspector, label)
    return out


def import_file(path: str | Path, op: str | None = None, nranks: int | None = None, dtype: str | None = None) -> dict:
    """The file's first run (the common single-run case)."""
    return import_runs(path, op, nranks, dtype)[0]
