"""Intel MPI Benchmarks (IMB-MPI1) output: each collective block (benchmark, process count) a
result. How a block is read: docs/results.md (IMB-MPI1)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from collectives.ops import ITEMSIZE, OPS
from reports.log_rows import MPI_REDOPS, MPI_TYPES, LogRun, as_float, check_rows, each_table, entry, log_lines, table_result
from reports.run_failures import mpi_job
from schema.results import ResultError

BANNER = re.compile(r"Intel\s?\(R\) MPI Benchmark(?:s| Suite)\s+V?([\w.]+)")   # 2018+, and 3.x's "Suite V3.2"
_BENCH = re.compile(r"^#\s*Benchmarking\s+(Multi-)?(\S+)")
_PROCS = re.compile(r"^#\s*#processes\s*=\s*(\d+)")
_GROUPS = re.compile(r"^#\s*\(\s*\d+ groups of \d+ processes")
_DTYPE = re.compile(r"^#\s*MPI_Datatype\s*:\s*(MPI_\w+)")
_RED_DTYPE = re.compile(r"^#\s*MPI_Datatype for reductions\s*:\s*(MPI_\w+)")
_MPI_OP = re.compile(r"^#\s*MPI_Op\s*:\s*(MPI_\w+)")
_FINALIZE = re.compile(r"^#\s*All processes entering MPI_Finalize")
# IMB-MPI1's benchmark names for the collectives hccl-bench has, and those whose #bytes is per peer
NAMES = {"Allreduce": "all_reduce", "Reduce": "reduce", "Bcast": "broadcast", "Allgather": "all_gather",
         "Alltoall": "all_to_all", "Reduce_scatter": "reduce_scatter", "Reduce_scatter_block": "reduce_scatter"}
PER_PEER = {"Allgather", "Alltoall", "Reduce_scatter_block"}


@dataclass
class _Block:
    """One benchmark at one process count: its rows and the run's datatypes and op."""
    name: str
    line: int
    version: str | None
    dtypes: dict[str, str]
    multi: bool = False
    nprocs: int | None = None
    columns: list[str] = field(default_factory=list)
    rows: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    run: LogRun = field(default_factory=lambda: LogRun(first_line=0))


def _blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    version: str | None = None
    dtypes: dict[str, str] = {}
    open_run: list[_Block] = []                      # the blocks of the run not yet finalized
    for number, s in log_lines(text):
        if m := BANNER.search(s):
            _cut_if_open(open_run)                   # a run that never reached MPI_Finalize, then another
            version, dtypes, open_run = m.group(1), {}, []
            continue
        for key, pattern in (("reductions", _RED_DTYPE), ("data", _DTYPE), ("op", _MPI_OP)):
            if m := pattern.match(s):
                dtypes[key] = m.group(1)
                break
        if m := _BENCH.match(s):
            block = _Block(m.group(2), number, version, dict(dtypes), bool(m.group(1)), run=LogRun(number, NAMES.get(m.group(2))))
            blocks.append(block)
            open_run.append(block)
            continue
        if _FINALIZE.match(s):
            open_run = []
            continue
        if not open_run:
            continue
        block = open_run[-1]
        if (m := _PROCS.match(s)) and block.nprocs is None:
            block.nprocs = int(m.group(1))
        elif _GROUPS.match(s):
            block.multi = True
        elif s.startswith("#bytes") or s.startswith("#repetitions"):
            block.columns = s.split()
        elif died := mpi_job(s):
            block.run.failed = block.run.failed or f"line {number}: {died}"
        elif block.columns and s[0].isdigit():
            tokens = s.split()
            if len(tokens) != len(block.columns) or any(as_float(t) is None for t in tokens):
                block.run.cut = f"line {number}: row cut off or garbled ({len(tokens)} of {len(block.columns)} columns)"
                block.run.warnings.append(block.run.cut)
                continue
            block.rows.append((number, dict(zip(block.columns, tokens))))
            block.run.last_line = number
    _cut_if_open(open_run)                           # the file ended inside a run
    return blocks


def _cut_if_open(open_run: list[_Block]) -> None:
    """A run that ended without its MPI_Finalize line: the block it was in was cut (crash, kill)."""
    if open_run and open_run[-1].rows:
        last = open_run[-1]
        last.run.cut = last.run.cut or (f"line {last.run.last_line}: the run ended without 'All processes entering "
                                        f"MPI_Finalize' (crashed or cut off); the {len(last.rows)} rows before kept")
        last.run.warnings.append(last.run.cut)


def _imported(block: _Block) -> bool:
    return block.name in NAMES and not block.multi and "t_avg[usec]" in block.columns


def _mpi(name: str | None, table: dict[str, str], default: str, what: str, block: _Block, where: str) -> str:
    if name is None:
        block.run.warnings.append(f"no IMB {what} line: {default} assumed (IMB-MPI1's default)")
        return default
    if name not in table:
        raise ResultError(f"{where}: IMB {what} {name} has no counterpart here (allowed {', '.join(sorted(table))[:100]})")
    return table[name]


def _result(path: Path, where: str, block: _Block, nranks: int | None, label: str | None) -> dict:
    op, run = NAMES[block.name], block.run
    check_rows(block.rows, run.failed, where, f"IMB's {block.name} block (line {block.line}) has no result rows")
    if block.nprocs is None:
        raise ResultError(f"{where}: IMB's {block.name} block (line {block.line}) names no '# #processes = N'")
    n = block.nprocs
    if nranks and nranks != n:
        run.warnings.append(f"--nranks {nranks} ignored: IMB says #processes = {n}")
    reduces = OPS[op].reduces
    dtype = _mpi(block.dtypes.get("reductions" if reduces else "data"), MPI_TYPES, "float32" if reduces else "uint8",
                 "MPI_Datatype for reductions" if reduces else "MPI_Datatype", block, where)
    redop = _mpi(block.dtypes.get("op"), MPI_REDOPS, "sum", "MPI_Op", block, where) if reduces else "none"
    benches = []
    for number, row in block.rows:
        size = int(row["#bytes"])
        if size == 0:
            continue
        nbytes = size * n if block.name in PER_PEER else size
        extra = {"imb_bytes": size, "imb_benchmark": block.name, "source_line": number,
                 "repetitions": int(float(row["#repetitions"])), "t_min_us": float(row["t_min[usec]"]),
                 "t_max_us": float(row["t_max[usec]"])}
        if "defects" in row and float(row["defects"]):   # IMB built with -DCHECK
            run.failed = run.failed or f"line {number}: {row['defects']} defects at {size} B"
        benches.append(entry("imb", op, dtype, redop, False, nbytes, nbytes // ITEMSIZE.get(dtype, 1), n,
                             [float(row["t_avg[usec]"])], float(row["defects"]) if "defects" in row else None,
                             extra, f"{where}: line {number}", backend="imb-mpi1"))
    run.extra.update({"version": block.version, "benchmark": block.name, "datatypes": block.dtypes})
    return table_result(path, "imb-mpi1-text", "imb", op, n, benches, run, label,
                        f"{where}: IMB's {block.name} block (line {block.line})")


def read(path: Path, text: str, nranks: int | None, label: str | None) -> list[dict]:
    """Every collective block of the file, in order, each a result file's content."""
    blocks = _blocks(text)
    others = ", ".join(sorted({("Multi-" if b.multi else "") + b.name for b in blocks if not _imported(b)}))
    found = others[:50] or "no '# Benchmarking' block"
    return each_table(path, [b for b in blocks if _imported(b)], others and f"IMB {others}",
                      lambda i, b: f"{b.name}, {b.nprocs} processes, line {b.line}",
                      lambda where, b: _result(path, where, b, nranks, label),
                      f"IMB output with {found}: no collective table hccl-bench imports (it reads "
                      "Allreduce, Reduce, Bcast, Allgather, Alltoall, Reduce_scatter[_block])")
