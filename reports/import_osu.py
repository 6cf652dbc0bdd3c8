"""OSU micro-benchmarks (OMB) collective output: each collective test a result, so years of
`osu_allreduce` & co. results serve as baselines. How a test is read: docs/results.md (OSU)."""
from __future__ import annotations

import re
from pathlib import Path

from collectives.ops import ITEMSIZE, OPS
from reports.log_rows import LAUNCH_N, MPI_TYPES, LogRun, as_float, check_rows, each_table, entry, log_lines, table_result
from reports.run_failures import mpi_job
from schema.results import ResultError

HEADER = re.compile(r"^#\s*OSU\s+(?P<lib>[A-Za-z]+)(?:-(?P<dev>[A-Za-z]+(?: MANAGED)?))?\s+(?P<name>.+?)\s+"
                    r"(?:Latency\s+)?Test(?:\s+v(?P<ver>[\w.-]+))?\s*$")
_DATATYPE = re.compile(r"^#\s*Datatype:\s*(MPI_\w+)")
# OMB's test names (the BENCHMARK strings of mpi/collective/*.c) for the collectives hccl-bench has
NAMES = {"allreduce": "all_reduce", "reduce": "reduce", "broadcast": "broadcast", "bcast": "broadcast",
         "allgather": "all_gather", "all-to-all personalized exchange": "all_to_all", "alltoall": "all_to_all",
         "reduce_scatter": "reduce_scatter"}
PER_PEER = {"all_gather", "all_to_all"}        # OMB's size is what one rank sends to each
AVG = "Avg Latency(us)"


class _Test:
    """One test's header, its rows and what its log said around them."""

    def __init__(self, number: int, m: re.Match[str], launch_n: int | None) -> None:
        self.line, self.name, self.version = number, m.group("name"), m.group("ver")
        self.title = m.group(0).lstrip("#").strip()
        self.library, self.device = m.group("lib").upper(), (m.group("dev") or "").upper() or None
        self.op = NAMES.get(self.name.lower())
        self.datatype: str | None = None
        self.columns: list[str] = []
        self.rows: list[tuple[int, dict[str, str]]] = []
        self.run = LogRun(first_line=number, op=self.op, launch_n=launch_n)

    def feed(self, number: int, s: str) -> None:
        if m := _DATATYPE.match(s):
            self.datatype = m.group(1)
            return
        if s.startswith("#"):
            names = re.split(r"\s{2,}", s.lstrip("#").strip())
            if names and names[0] == "Size" and AVG in names:
                self.columns = names
            return
        if died := mpi_job(s):
            self.run.failed = self.run.failed or f"line {number}: {died}"
            if self.rows:
                self.run.cut = self.run.cut or f"line {number}: the job died after {len(self.rows)} rows"
            return
        tokens = s.split()
        if not self.columns or not tokens[0].isdigit():
            return                                   # a warning, a library's log line, a prompt
        if len(tokens) == len(self.columns) and as_float(tokens[1]) is not None:
            self.rows.append((number, dict(zip(self.columns, tokens))))
            self.run.last_line = number
        elif len(tokens) < len(self.columns) and all(as_float(t) is not None for t in tokens):
            self.run.cut = f"line {number}: row cut off ({len(tokens)} of {len(self.columns)} columns), ignored"
            self.run.warnings.append(self.run.cut)


def _tests(text: str) -> list[_Test]:
    tests: list[_Test] = []
    launch_n: int | None = None
    for number, s in log_lines(text):
        if m := HEADER.match(s):
            tests.append(_Test(number, m, launch_n))
            launch_n = None
            continue
        if m := LAUNCH_N.search(s):                  # the next test's command line
            launch_n = int(m.group(1))
            continue
        if tests:
            tests[-1].feed(number, s)
    return tests


def _dtype(test: _Test, given: str | None, where: str) -> str:
    if test.datatype:
        if test.datatype not in MPI_TYPES:
            raise ResultError(f"{where}: datatype {test.datatype} has no counterpart here (allowed: "
                              f"{', '.join(sorted(MPI_TYPES))[:90]}...)")
        return MPI_TYPES[test.datatype]
    if given:
        return given
    assert test.op is not None
    default = "float32" if OPS[test.op].reduces else "int8"
    test.run.warnings.append(f"no '# Datatype' line: {default} assumed (OMB's default for this test before 7.1); "
                             "pass --dtype if the run used another")
    return default


def _result(path: Path, where: str, test: _Test, nranks: int | None, dtype: str | None, label: str | None) -> dict:
    assert test.op is not None
    run, op = test.run, test.op
    check_rows(test.rows, run.failed, where, f"'{test.title}' (line {test.line}) has no result rows after it "
               f"(expected '# Size  {AVG}' and rows)")
    n = test.run.launch_n or nranks
    if not n:
        raise ResultError(f"{where}: OSU prints no rank count and no launcher line with -n precedes the test; "
                          "pass --nranks N")
    if test.run.launch_n and nranks and nranks != n:
        run.warnings.append(f"--nranks {nranks} ignored: the launcher's command line says {n}")
    dt = _dtype(test, dtype, where)
    redop = "sum" if OPS[op].reduces else "none"
    benches = []
    for number, row in test.rows:
        size = int(row["Size"])
        nbytes = size * n if op in PER_PEER else size
        if size == 0:
            continue
        extra = {"osu_size": size, "osu_test": test.name, "source_line": number,
                 "min_latency_us": as_float(row.get("Min Latency(us)", "")),
                 "max_latency_us": as_float(row.get("Max Latency(us)", "")),
                 "iterations": int(row["Iterations"]) if row.get("Iterations", "").isdigit() else None,
                 "validation": row.get("Validation")}
        if row.get("Validation") not in (None, "Pass"):
            run.failed = run.failed or f"line {number}: validation {row['Validation']} at {size} B"
        benches.append(entry("osu", op, dt, redop, False, nbytes, nbytes // ITEMSIZE.get(dt, 1), n,
                             [float(row[AVG])], None, extra, f"{where}: line {number}",
                             backend=f"osu-{test.library.lower()}"))
    run.extra.update({"version": test.version, "library": test.library, "device": test.device, "datatype_printed": test.datatype})
    return table_result(path, "osu-text", "osu-micro-benchmarks", op, n, benches, run, label,
                        f"{where}: '{test.title}' (line {test.line})")


def read(path: Path, text: str, nranks: int | None, dtype: str | None, label: str | None) -> list[dict]:
    """Every collective test in the file, in order, each a result file's content."""
    tests = _tests(text)
    others = sorted({t.title for t in tests if not t.op})
    return each_table(path, [t for t in tests if t.op], "; ".join(others), lambda i, t: f"test {i + 1}, line {t.line}",
                      lambda where, t: _result(path, where, t, nranks, dtype, label),
                      f"{'; '.join(others)[:70]}: no collective test hccl-bench imports (it reads OSU "
                      "allreduce, reduce, bcast, allgather, alltoall, reduce_scatter)")
