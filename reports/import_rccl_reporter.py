"""rccl-tests' own reporter (`-Z json|csv` with `-x FILE`): one record per size and placement, read
by its keys. The writer's formats: docs/results.md (rccl-tests reporter)."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from collectives.ops import ITEMSIZE, OPS, by_log_name
from reports.log_rows import NCCL_TYPES, LogRun, Sample, cross_check, entry, result_of
from schema.results import ResultError

FIELDS = ("numCycle", "name", "nodes", "ranks", "ranksPerNode", "gpusPerRank", "gpus", "size", "type", "redop",
          "inPlace", "time", "algBw", "busBw", "wrong")
# the JSON writer's key for every spelling: the CSV header's (collective, inplace, #wrong), any case
KEYS = {f.lower(): f for f in FIELDS} | {"collective": "name", "#wrong": "wrong"}


def _key(name: str) -> str:
    return KEYS.get(name.strip().lower(), name)


def is_record_line(line: str) -> bool:
    """A reporter record on one line, whatever its key order: a JSON object naming a size, a time and the collective."""
    try:
        obj = json.loads(line.strip().rstrip(","))
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and {"size", "time", "name"} <= {_key(k) for k in obj}


def _records(text: str, where: str) -> tuple[list[dict], str, str]:
    """(records, format, where the file ends early) from any of the reporter's three shapes."""
    body = text.strip()
    if body.startswith("numCycle,"):
        reader = csv.reader(io.StringIO(body))
        header = [_key(h) for h in next(reader)]
        rows = [dict(zip(header, r)) for r in reader if r]
        cut = next((f"CSV row {i + 2} has {len(r)} of {len(header)} fields (cut off)" for i, r in enumerate(rows)
                    if len(r) < len(header)), "")
        return [r for r in rows if len(r) == len(header)], "rccl-tests-csv", cut
    try:
        data = json.loads(body)
        if isinstance(data, (list, dict)):
            return data if isinstance(data, list) else [data], "rccl-tests-reporter-json", ""
    except (ValueError, RecursionError):
        pass
    records: list[dict] = []
    cut = ""
    for number, line in enumerate(body.splitlines(), 1):
        line = line.strip().rstrip(",")
        if line in ("[", "]", ""):
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            cut = f"line {number} is not a whole record (cut off); the {len(records)} records before it are kept"
            break
        if isinstance(obj, dict):
            records.append(obj)
    if not records:
        raise ResultError(f"{where}: neither a JSON list nor JSON lines of rccl-tests reporter records")
    return records, "rccl-tests-reporter-json" if body.startswith("[") else "rccl-tests-reporter-jsonl", cut


def _value(record: dict, key: str):
    v = record.get(key)
    return v.strip().strip('"') if isinstance(v, str) else v


def read(path: Path, text: str, op: str | None, nranks: int | None, label: str | None) -> list[dict]:
    where = str(path)
    records, fmt, cut = _records(text, where)
    by_op: dict[str, list[tuple[int, dict]]] = {}
    for index, rec in enumerate(records, 1):
        rec = {_key(k): v for k, v in rec.items()} if isinstance(rec, dict) else {}
        name = by_log_name(str(_value(rec, "name") or "")) or op
        if not name:
            raise ResultError(f"{where}: record {index} names no collective it is ({_value(rec, 'name')!r}); pass --op")
        by_op.setdefault(name, []).append((index, rec))
    out = []
    for run_op, recs in by_op.items():
        run = LogRun(first_line=recs[0][0], op=run_op, cut=cut, warnings=[cut] if cut else [])
        cells: dict[tuple, list[Sample]] = {}
        counts = set()
        for index, rec in recs:
            try:
                per = int(_value(rec, "gpusPerRank") or 1)
                n = int(_value(rec, "ranks")) * per if rec.get("ranks") is not None else int(_value(rec, "gpus"))
                size, t = int(_value(rec, "size")), float(_value(rec, "time"))
                alg, bus = float(_value(rec, "algBw")), float(_value(rec, "busBw"))
                inplace = str(_value(rec, "inPlace")) in ("1", "true")
            except (TypeError, ValueError):
                raise ResultError(f"{where}: record {index} is not an rccl-tests reporter record (size, time, ranks)") from None
            counts.add(n)
            wrong_text = str(_value(rec, "wrong"))
            wrong = None if wrong_text in ("N/A", "None", "") else float(wrong_text)
            if wrong:
                run.failed = run.failed or f"record {index}: wrong {wrong_text} at {size} B"
            if size == 0 or t <= 0:
                continue
            dtype = NCCL_TYPES.get(str(_value(rec, "type")), str(_value(rec, "type")))
            redop = str(_value(rec, "redop")) if OPS[run_op].reduces else "none"
            sample = Sample(size, size // ITEMSIZE.get(dtype, 1), dtype, redop, inplace, t, alg, bus, wrong, index)
            cells.setdefault((size, dtype, redop, inplace), []).append(sample)
            run.last_line = index
        if len(counts) != 1:
            raise ResultError(f"{where}: records of {run_op} disagree on the rank count ({sorted(counts)})")
        n = counts.pop()
        if nranks and nranks != n:
            run.warnings.append(f"--nranks {nranks} ignored: the file says {n} ranks")
        samples = [s for ss in cells.values() for s in ss]
        cross_check(run_op, n, samples, where)
        benches = [entry("rccl-tests", run_op, dtype, redop, inplace, size, ss[0].count, n, [s.time_us for s in ss],
                          max((s.wrong for s in ss if s.wrong is not None), default=None),
                          {"printed_algbw": ss[0].algbw, "printed_busbw": ss[0].busbw, "records": [s.line for s in ss],
                           "repeats": len(ss)}, f"{where}: record {ss[0].line}")
                   for (size, dtype, redop, inplace), ss in cells.items()]
        if not benches:
            raise ResultError(f"{where}: no {run_op} record with a time")
        first = recs[0][1]
        run.extra.update({"nodes": _value(first, "nodes"), "ranks_per_node": _value(first, "ranksPerNode"),
                          "gpus_per_rank": _value(first, "gpusPerRank")})
        out.append(result_of(path, fmt, "rccl-tests", run_op, n, benches, run, {}, [], label))
    return out
