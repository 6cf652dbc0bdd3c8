"""What every log importer shares (rows, the tools' dtype names, the printed-bandwidth cross-check,
the result entry), in its own module so no format reader imports another's dispatcher."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from collectives.ops import OPS, bandwidths
from reports.result_files import size_limit
from reports.run_failures import RunFailed
from schema.results import CollectiveRow, ResultError, bench_entry, result_file
from schema.stats import median

NCCL_TYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64", "int32": "int32",
              "int": "int32", "int8": "int8", "uint8": "uint8", "int64": "int64", "uint32": "uint32",
              "uint64": "uint64", "char": "int8", "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2",
              "fp8_e4m3": "float8_e4m3", "fp8_e5m2": "float8_e5m2"}
HCCL_TYPES = {"fp32": "float32", "fp16": "float16", "bfp16": "bfloat16", "bf16": "bfloat16", "fp64": "float64",
              "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
              "uint16": "uint16", "uint32": "uint32", "uint64": "uint64"}

# MPI's own type names (OSU's "# Datatype: MPI_X.", IMB's "MPI_Datatype : MPI_X") as ours (LP64 longs)
MPI_TYPES = {"MPI_CHAR": "int8", "MPI_SIGNED_CHAR": "int8", "MPI_UNSIGNED_CHAR": "uint8", "MPI_BYTE": "uint8",
             "MPI_SHORT": "int16", "MPI_UNSIGNED_SHORT": "uint16", "MPI_INT": "int32", "MPI_UNSIGNED": "uint32",
             "MPI_LONG": "int64", "MPI_UNSIGNED_LONG": "uint64", "MPI_LONG_LONG": "int64", "MPI_LONG_LONG_INT": "int64",
             "MPI_FLOAT": "float32", "MPI_DOUBLE": "float64", "MPI_INT8_T": "int8", "MPI_INT16_T": "int16",
             "MPI_INT32_T": "int32", "MPI_INT64_T": "int64", "MPI_UINT8_T": "uint8", "MPI_UINT16_T": "uint16",
             "MPI_UINT32_T": "uint32", "MPI_UINT64_T": "uint64"}
MPI_REDOPS = {"MPI_SUM": "sum", "MPI_PROD": "prod", "MPI_MAX": "max", "MPI_MIN": "min"}
# Open MPI's --tag-output, MPICH's -prepend-rank "[RANK] ", an ISO timestamp (kubectl logs --timestamps)
PREFIXES = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\[\d+\] "
                      r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)? )+")
# the launcher's process count on its command line (MVAPICH's mpirun_rsh -np too)
LAUNCH_N = re.compile(r"\b(?:mpirun_rsh|mpirun|mpiexec|srun|orterun|prterun)\b.*?\s(?:-n|-np|--np|--ntasks)[\s=]+(\d+)")
PERF = re.compile(r"\b(?:nccl_|rccl_)?([a-z_]+?)_perf(?:_mpi)?\b")
# nccl-tests prints 2 decimals: a bandwidth must match what size/time gives within that and the
# rounding of the printed time (4-5 significant digits)
_ABS_TOL, _REL_TOL = 0.011, 0.02
LOG_LIMIT_MIB = 64   # a campaign's log is a few MiB; HCCL_BENCH_MAX_LOG_MB raises it


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


def as_float(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def log_bytes(path: Path) -> bytes:
    """A log's bytes, refused in one line when unreadable or above HCCL_BENCH_MAX_LOG_MB."""
    limit = size_limit("HCCL_BENCH_MAX_LOG_MB", LOG_LIMIT_MIB)
    try:
        if (size := path.stat().st_size) > limit:
            raise ResultError(f"{path} is {size >> 20} MiB; logs above {limit >> 20} MiB are refused "
                              "(HCCL_BENCH_MAX_LOG_MB raises it)")
        return path.read_bytes()
    except OSError as exc:
        raise ResultError(f"cannot read {path}: {exc.strerror or exc}") from None


def log_lines(text: str):
    """(line number, line) of every line not blank once its launcher prefix is gone."""
    for number, raw in enumerate(text.splitlines(), 1):
        if s := PREFIXES.sub("", raw).strip():
            yield number, s


def check_rows(rows: list, failed: str, where: str, empty: str) -> None:
    """A table without rows: the run died before its first (`failed`: its error line), else `empty`."""
    if not rows:
        if failed:
            raise RunFailed(f"{where}: the run FAILED before its first result row: {failed}")
        raise ResultError(f"{where}: {empty}")


def table_result(path: Path, fmt: str, tool: str, op: str, nranks: int, benches: list[dict], run: LogRun,
                 label: str | None, zero_only: str) -> dict:
    """A table of an MPI suite as a result; one of only 0-byte rows (`zero_only` names it) is refused."""
    if not benches:
        raise ResultError(f"{zero_only} holds only 0-byte rows")
    return result_of(path, fmt, tool, op, nranks, benches, run, {}, [], label)


def each_table(path: Path, tables: list, left_out: str, where, result, refusal: str) -> list[dict]:
    """Every wanted table of a log as a result, in order; the tests left out named in the first's
    warnings. `where(i, table)`: how a message names a table when the file has several."""
    if not tables:
        raise ResultError(f"{path}: {refusal}")
    if left_out:
        tables[0].run.warnings.append(f"left out, not collectives hccl-bench imports: {left_out}")
    return [result(str(path) if len(tables) == 1 else f"{path} ({where(i, table)})", table) for i, table in enumerate(tables)]


def need(value, what: str, where: str, flag: str):
    if value in (None, ""):
        raise ResultError(f"{where}: cannot tell the {what} from the log; pass {flag}")
    return value


def cross_check(op: str, nranks: int, samples: list[Sample], where: str) -> None:
    """Printed bandwidths against size/time: a wrong rank count, op or unit shows here first."""
    factor = OPS[op].bus_factor(nranks)
    for s in samples:
        alg, bus = bandwidths(op, s.size, s.time_us * 1e-6, nranks)
        if s.busbw is not None and s.busbw >= 0.5 and abs(s.busbw - bus) > _ABS_TOL + _REL_TOL * bus:
            if s.algbw and s.algbw >= 0.5 and abs(s.algbw - alg) <= _ABS_TOL + _REL_TOL * alg:
                raise ResultError(f"{where}: line {s.line}: printed busbw {s.busbw} is {s.busbw / s.algbw:.3f} x algbw, but {op} "
                                  f"on {nranks} ranks gives {factor:.3f} x: the rank count or the op is wrong "
                                  f"(pass --nranks / --op, or check the log)")
            raise ResultError(f"{where}: line {s.line}: printed busbw {s.busbw} GB/s but {s.size} B in {s.time_us} us "
                              f"gives {bus:.2f} GB/s for {op} on {nranks} ranks: rank count, op or units disagree")


def entry(tool: str, op: str, dtype: str, redop: str, inplace: bool, nbytes: int, count: int, nranks: int,
           times_us: list[float], wrong, imported: dict, where: str, matrix_ns: list[list[int]] | None = None,
           source: str = "benchmark", backend: str | None = None) -> dict:
    """One imported cell as a result entry; a time that is not finite and > 0 refuses the log. `matrix_ns`:
    a process (or rank) x round matrix of per-op times, summarised as a native case's, its rounds the samples."""
    bad = next((t for t in times_us if not (isinstance(t, (int, float)) and 0 < t < float("inf"))), None)
    if bad is not None:
        raise ResultError(f"{where}: {op} {nbytes} B has time {bad} us; a time must be a finite number > 0")
    stats: dict = {}
    if matrix_ns:
        from schema.stats import per_op_seconds, summarize
        stats = {**summarize(matrix_ns, 1), "round_ns_per_rank": matrix_ns, "iters_per_round": 1}
        times_us = [t * 1e6 for t in per_op_seconds(matrix_ns, 1).tolist()]
    t_us = float(stats.get("time_us") or median(list(times_us)))
    algbw, busbw = bandwidths(op, nbytes, t_us * 1e-6, nranks)
    stats.update(time_us=t_us, algbw_gbps=algbw, busbw_gbps=busbw)
    row = CollectiveRow(backend=backend or tool, algo="default", op=op, dtype=dtype, redop=redop, inplace=inplace,
                        nranks=nranks, bytes=nbytes, count=count, wrong=wrong, source=source,
                        imported={k: v for k, v in imported.items() if v is not None}, **stats)
    red = f"-{redop}" if redop not in ("none", "sum") else ""
    name = f"import[{tool}-{op}-{dtype}{red}-{nbytes}B-{'ip' if inplace else 'oop'}]"
    return bench_entry(name, row, [x * 1e-6 for x in times_us], group=f"{tool} {op} {dtype}")


def result_of(path: Path, fmt: str, tool: str, op: str, nranks: int, benches: list[dict], run: LogRun,
            hosts: dict[str, int], devices: list[str], label: str | None) -> dict:
    meta = {"format": fmt, "label": label or None,
            "imported_from": {"file": str(path), "lines": [run.first_line, run.last_line]},
            "complete": not run.cut, "interrupted": run.cut or None,
            "failed": run.failed or None, "warnings": run.warnings,
            "groups": {"imported": {"hosts": hosts, "devices": sorted(set(devices)), "nranks": nranks}},
            "provenance": {"imported": {"tool": tool, "op": op, **run.extra}}}
    return result_file(benches, meta)


