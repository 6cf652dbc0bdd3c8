"""Existing logs into the result schema, so they can serve as baselines and be compared.

nccl-tests text output (both header generations: ``... time algbw busbw error`` and
``... root time algbw busbw #wrong``; mpirun ``[1,0]<stdout>:`` prefixes and stray NCCL INFO lines
inside the table are skipped), nccl-tests ``-J`` JSON (schema of src/util.cu, version 2), and
hccl_test output (``avg_time(us)`` in the documentation, ``aveg_time(us)`` in the binary).

Units: times are microseconds in all three. hccl_test's documented samples print alg_bandwidth in
GiB/s (2^30) while its code divides by 1e9, so bandwidths are recomputed here from size and time
in GB/s (1e9) and the printed value is kept as ``reported_algbw``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from collectives.ops import OPS, bandwidths
from reports.cells import ResultError

NCCL_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "alltoall": "all_to_all", "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv"}
NCCL_TYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64", "int32": "int32",
              "int": "int32", "int8": "int8", "uint8": "uint8", "int64": "int64", "uint32": "uint32",
              "uint64": "uint64", "char": "int8", "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2"}
HCCL_TYPES = {"fp32": "float32", "fp16": "float16", "bfp16": "bfloat16", "bf16": "bfloat16", "fp64": "float64",
              "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8"}
_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")
_RANK_LINE = re.compile(r"^#\s+Rank\s+\d+\s")


def _entry(tool: str, op: str, dtype: str, redop: str, inplace: bool, nbytes: int, count: int, nranks: int,
           times_us: list[float], wrong, extra: dict) -> dict:
    t_us = sorted(times_us)[len(times_us) // 2]
    t = t_us * 1e-6
    algbw, busbw = bandwidths(op, nbytes, t, nranks)
    info = {"backend": tool, "algo": "default", "op": op, "dtype": dtype, "redop": redop, "inplace": inplace,
            "nranks": nranks, "bytes": nbytes, "count": count, "time_us": t_us, "algbw_gbps": algbw,
            "busbw_gbps": busbw, "wrong": wrong, "launch": 0, **extra}
    data = [x * 1e-6 for x in times_us]
    name = f"import[{tool}-{op}-{dtype}-{nbytes}B-{'ip' if inplace else 'oop'}]"
    return {"name": name, "fullname": name, "group": f"{tool} {op} {dtype}", "extra_info": info,
            "stats": {"data": data, "median": t, "min": min(data), "max": max(data), "mean": sum(data) / len(data),
                      "rounds": len(data)}}


def _need(value, what: str, path: Path, flag: str):
    if value in (None, ""):
        raise ResultError(f"{path}: cannot tell the {what} from the log; pass {flag}")
    return value


def _nranks_from_ratio(op: str, rows: list[tuple[float, float]]) -> int | None:
    """busbw/algbw = factor(n): invert it on the row with the most precise (largest) algbw."""
    alg, bus = max(rows, default=(0.0, 0.0))
    if alg <= 0 or op not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        return None
    r = bus / alg
    n = 2 / (2 - r) if op == "all_reduce" else 1 / (1 - r) if r < 1 else None
    return int(round(n)) if n and n < 1e6 else None


def nccl_text(path: Path, text: str, op: str | None, nranks: int | None) -> list[dict]:
    lines = [_PREFIX.sub("", line) for line in text.splitlines()]
    header = None
    perf = re.compile(rf"\b({'|'.join(NCCL_OPS)})_perf\b")
    op = op or next((NCCL_OPS[m.group(1)] for line in lines for m in [perf.search(line)] if m), None)
    ranks_seen = sum(1 for line in lines if _RANK_LINE.match(line))
    rows = []
    for line in lines:
        s = line.strip()
        if s.startswith("#"):
            tokens = s.lstrip("#").split()
            if tokens[:3] == ["size", "count", "type"]:
                header = tokens
            continue
        if header is None:
            continue
        tok = s.split()
        if len(tok) != len(header) or not (tok[0].isdigit() and tok[1].isdigit()) or tok[2] not in NCCL_TYPES:
            continue  # stray library log lines inside the table
        rows.append(dict(zip(_dedupe(header), tok)))
    if not rows:
        raise ResultError(f"{path}: no nccl-tests result rows found (expected a '# size count type ...' header)")
    op = _need(op, "collective", path, "--op")
    nranks = nranks or ranks_seen or _nranks_from_ratio(
        op, [(float(r["algbw"]), float(r["busbw"])) for r in rows if int(r["size"]) > 0])
    nranks = _need(nranks, "rank count", path, "--nranks")
    cells: dict[tuple, list] = {}
    for r in rows:
        size = int(r["size"])
        if size == 0:
            continue
        for inplace, suffix in ((False, ""), (True, "_2")):
            wrong = r.get("#wrong" + suffix, r.get("wrong" + suffix, r.get("error" + suffix)))
            wrong = None if wrong in (None, "N/A") else float(wrong)
            key = (size, int(r["count"]), NCCL_TYPES[r["type"]], r["redop"], inplace)
            cells.setdefault(key, [[], []])
            cells[key][0].append(float(r.get("time" + suffix) or r.get("cputime" + suffix)))
            cells[key][1].append(wrong)
    header_gen = "root/#wrong" if "root" in header else "error"
    return [_entry("nccl-tests", op, dtype, redop if OPS[op].reduces else "none", inplace, size, count, nranks, times,
                   max(w for w in wrongs if w is not None) if any(w is not None for w in wrongs) else None,
                   {"header": header_gen, "wrong_is_max_error": header_gen == "error"})
            for (size, count, dtype, redop, inplace), (times, wrongs) in cells.items()]


def _dedupe(header: list[str]) -> list[str]:
    """The in-place columns repeat the out-of-place names: suffix the second occurrence."""
    seen, out = set(), []
    for name in header:
        out.append(name + "_2" if name in seen else name)
        seen.add(name)
    return out


def nccl_json(path: Path, data: dict, op: str | None, nranks: int | None) -> list[dict]:
    args = data.get("args") or []
    op = op or next((NCCL_OPS.get(m.group(1)) for a in args[:1] for m in [re.search(r"(\w+?)_perf", a)] if m), None)
    op = _need(op, "collective", path, "--op")
    devices = (data.get("config") or {}).get("devices") or []
    nranks = _need(nranks or len(devices) or None, "rank count", path, "--nranks")
    out = []
    for r in data.get("results", []):
        if int(r["size"]) == 0:
            continue
        for inplace, key in ((False, "out_of_place"), (True, "in_place")):
            body = r.get(key)
            if not body:
                continue
            out.append(_entry("nccl-tests", op, NCCL_TYPES.get(r["type"], r["type"]), r["redop"] if OPS[op].reduces else "none",
                              inplace, int(r["size"]), int(r["count"]), nranks, [float(body.get("time", body.get("cpu_time")))],
                              body.get("nwrong"), {"nccl_version": data.get("nccl_version")}))
    if not out:
        raise ResultError(f"{path}: nccl-tests JSON without results")
    return out


def hccl_test(path: Path, text: str, op: str | None, nranks: int | None, dtype: str | None) -> list[dict]:
    lines = text.replace("\\\n", " ").splitlines()
    cmd = " ".join(line for line in lines if "_test" in line and ("mpirun" in line or " -b " in line))
    m = re.search(rf"\b({'|'.join(NCCL_OPS)})_test\b", cmd)
    op = op or (NCCL_OPS[m.group(1)] if m else None)
    if not nranks:
        m = re.search(r"(?:mpirun|mpiexec)\s.*?-(?:n|np)\s+(\d+)", cmd) or re.search(r"\s-p\s+(\d+)", cmd)
        nranks = int(m.group(1)) if m else None
    m = re.search(r"\s-d\s+(\w+)", cmd)
    dtype = dtype or (HCCL_TYPES.get(m.group(1)) if m else None)
    header, rows = None, {}
    for line in lines:
        cols = [c.strip().rstrip(":") for c in line.split("|")]
        if "data_size(Bytes)" in cols:
            header = cols
            continue
        if header is None or len(cols) != len(header) or not cols[header.index("data_size(Bytes)")].isdigit():
            continue
        row = dict(zip(header, cols))
        time_col = "aveg_time(us)" if "aveg_time(us)" in row else "avg_time(us)"
        size = int(row["data_size(Bytes)"])
        prev = rows.get(size)
        # each rank may print its own row: the collective's time is the slowest rank's
        if prev is None or float(row[time_col]) > prev[0]:
            rows[size] = (float(row[time_col]), float(row.get("alg_bandwidth(GB/s)", "nan")), row.get("check_result"),
                          time_col)
    if header is None or not rows:
        raise ResultError(f"{path}: no hccl_test result rows found (expected 'data_size(Bytes): | avg_time(us): | ...')")
    op = _need(op, "collective", path, "--op")
    nranks = _need(nranks, "rank count", path, "--nranks")
    dtype = _need(dtype, "data type", path, "--dtype")
    return [_entry("hccl_test", op, dtype, "sum" if OPS[op].reduces else "none", False, size, 0, nranks, [t],
                   None if check in (None, "NULL") else int(check != "success"),
                   {"reported_algbw": reported, "check_result": check, "time_column": col,
                    "unit_note": "bandwidth recomputed as size/time in GB/s (1e9); hccl_test's printed alg_bandwidth kept as reported_algbw"})
            for size, (t, reported, check, col) in sorted(rows.items())]


def import_file(path: str | Path, op: str | None = None, nranks: int | None = None, dtype: str | None = None) -> dict:
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise ResultError(f"cannot read {path}: {exc}") from None
    if op is not None and op not in OPS:
        raise ResultError(f"--op {op!r}: allowed {', '.join(OPS)}")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError as exc:
            raise ResultError(f"{path}: looks like JSON but does not parse: {exc}") from None
        fmt, benches = "nccl-tests-json", nccl_json(path, data, op, nranks)
    elif "data_size(Bytes)" in text:
        fmt, benches = "hccl_test", hccl_test(path, text, op, nranks, dtype)
    else:
        fmt, benches = "nccl-tests-text", nccl_text(path, text, op, nranks)
    return {"benchmarks": benches,
            "hccl_bench": {"schema": "hccl-bench/1", "imported_from": str(path), "format": fmt,
                           "groups": {"imported": {"hosts": {}, "nranks": benches[0]["extra_info"]["nranks"]}},
                           "provenance": {}}}
