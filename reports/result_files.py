"""Result files on disk -> `Run`s of `Cell`s: results.json (any pytest-benchmark JSON with hccl-bench's
rows), or the run rebuilt from the cases.jsonl beside it; reads bounded by HCCL_BENCH_MAX_RESULT_MB."""
from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from kinds import ROW_TYPES
from schema.results import Cell, NoCells, ResultError, Row, Run, Series, knob_text, row_from_json
from schema.run_meta import RunMeta
from schema.stats import MIN_UNDISTURBED, median, undisturbed, waited_rounds


def size_limit(variable: str, default_mib: int) -> int:
    """A size limit in bytes from an environment variable holding MiB (or the default)."""
    text = os.environ.get(variable, str(default_mib))
    if not text.strip().isdigit() or int(text) < 1:
        raise ResultError(f"{variable}={text!r}: give a whole number of MiB >= 1")
    return int(text) << 20


def read_json_object(path: Path) -> dict:
    """A file's JSON object, or ResultError in one line: too large, not an object, not JSON, nested too deeply."""
    limit = size_limit("HCCL_BENCH_MAX_RESULT_MB", 512)
    try:
        size = path.stat().st_size
        if size > limit:
            raise ResultError(f"{path} is {size >> 20} MiB, more than a result file may be "
                              f"({limit >> 20} MiB; HCCL_BENCH_MAX_RESULT_MB raises it)")
        with open(path, "rb") as f:
            head = f.read(4096).lstrip()
            if head and not head.startswith(b"{"):
                raise ResultError(f"{path} is not a JSON object (it starts with {head[:12]!r})")
            raw = head + f.read()
    except OSError as exc:
        raise ResultError(f"cannot read result file {path}: {exc.strerror or exc}") from None
    try:
        return json.loads(raw)
    except RecursionError:
        raise ResultError(f"{path} nests too deeply to be a result file") from None
    except ValueError as exc:
        raise ResultError(f"{path} is not JSON: {str(exc)[:80]}") from None


def _read(path: Path) -> tuple[dict, Path, list[str]]:
    """(data, the file it came from, notes): results.json, or the run rebuilt from the cases.jsonl
    beside it when results.json is missing or unreadable (a session killed or out of disk)."""
    results = path / "results.json" if path.is_dir() else path
    cases = results.parent / "cases.jsonl"
    try:
        return read_json_object(results), results, []
    except ResultError as exc:
        if results.name != "results.json" or not cases.is_file():
            raise
        data, notes = rebuild(cases)
        why = "is missing" if not results.exists() else f"is unreadable ({str(exc).removeprefix(str(results)).strip()})"
        return data, cases, [f"{results} {why}: rebuilt from {cases.name} ({len(data['benchmarks'])} cases)"] + notes


def rebuild(cases: Path) -> tuple[dict, list[str]]:
    """A results.json-shaped run from cases.jsonl: the session line, each group, each finished case
    (per-op round times from its rank x round matrix), failures; a torn last line is ignored."""
    from schema.stats import per_op_seconds
    meta: dict = {"groups": {}, "failures": [], "overhead": [], "complete": False,
                  "interrupted": "the session ended without writing results.json (killed, or the disk filled)"}
    data: dict = {"benchmarks": [], "hccl_bench": meta}
    notes = []
    limit = size_limit("HCCL_BENCH_MAX_RESULT_MB", 512)
    try:
        if cases.stat().st_size > limit:
            raise ResultError(f"{cases} is larger than {limit >> 20} MiB (HCCL_BENCH_MAX_RESULT_MB raises it)")
        raw = cases.read_bytes()
    except OSError as exc:
        raise ResultError(f"cannot read {cases}: {exc.strerror or exc}") from None
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            if number == len(lines):  # no newline after it: the write was cut off
                notes.append(f"{cases.name}: torn last line (line {number}, {len(line)} bytes) ignored")
                continue
            raise ResultError(f"{cases}: line {number} is not JSON") from None
        if not isinstance(obj, dict):
            raise ResultError(f"{cases}: line {number} is not a JSON object")
        try:
            if "session" in obj:
                meta.update({k: v for k, v in obj["session"].items() if k != "datetime"})
                data["datetime"] = obj["session"].get("datetime")
            elif "group" in obj:
                meta["groups"].update(obj["group"])
            elif "failure" in obj:
                meta["failures"].append({**obj["failure"], "error": str(obj.get("error", "")).split("\n", 1)[0]})
            elif "overhead" in obj:
                meta["overhead"].append(obj["overhead"])
            elif "round_ns_per_rank" in obj:   # either form: a summarised row keeps every round's slowest rank
                times = per_op_seconds(obj["round_ns_per_rank"], obj["iters_per_round"]).tolist()
                data["benchmarks"].append({"name": f"case{number}", "extra_info": obj, "stats": {"data": times}})
        except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as exc:
            raise ResultError(f"{cases}: line {number} is not a case record ({type(exc).__name__})") from None
    return data, notes


OTHER_SIDE = {"A": "B", "B": "A"}
SAME_NIGHT_LABELS = {"A": "this stack", "B": "previous stack"}   # the same-night child's --label (harness/session/same_night.py)


def _as_roles(meta: RunMeta) -> RunMeta:
    """A baseline-as-side-B run's metadata by role: its groups' sides and --label names swapped (side A the baseline)."""
    swap = lambda labels: {OTHER_SIDE.get(k, k): v for k, v in labels.items()}  # noqa: E731
    return replace(meta, groups={name: {**g, "side": OTHER_SIDE.get(g.get("side", ""), g.get("side", ""))}
                                 for name, g in meta.groups.items()},
                   options=meta.options and replace(meta.options, labels=swap(meta.options.labels)),
                   labels=swap(meta.labels))


def load(path: str | Path, side: str = "") -> Run:
    """One run; `side` picks the A (baseline) or B (candidate) half of an interleaved --ab-env run,
    by role: a run that records its baseline as side B is read with its sides swapped."""
    data, path, notes = _read(Path(path))
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ResultError(f"{path} is not an hccl-bench/pytest-benchmark result file (no 'benchmarks' list)")
    meta = RunMeta.from_json(data.get("hccl_bench"), str(path))
    labels = (meta.options.labels if meta.options else None) or meta.labels
    # a same-night A/B recorded before baseline_side existed: its child session's side labels say B is the baseline
    if from_labels := meta.baseline_side is None and all(labels.get(s) == name for s, name in SAME_NIGHT_LABELS.items()):
        meta = replace(meta, baseline_side="B")
    recorded = OTHER_SIDE[side] if side in OTHER_SIDE and meta.baseline_side == "B" else side   # the file's side in that role
    cells: dict[tuple, Cell] = {}
    for number, bench in enumerate(data["benchmarks"]):
        where = f"{path}: benchmark {number}"
        if not isinstance(bench, dict):
            raise ResultError(f"{where} is a JSON {type(bench).__name__}, not an object")
        where = f"{where} ({str(bench.get('name', 'unnamed'))[:80]})"
        info, times = _entry_parts(bench, where)
        row = row_from_json(info, where, ROW_TYPES)
        if row is None or row.side != recorded or not times:
            continue  # overhead rows and foreign benchmarks are not comparison cells
        add_row(cells, row if recorded == side else replace(row, side=side), times)
    if not side:   # an A/B side's launch pairs with the other side's: it stays, judged whole
        leave_out_disturbed(cells)
    if not cells:
        what = f"side {side} of an --ab-env run" if side else "collective or layer results (an --ab-env run? use --ab)"
        raise NoCells(f"{path} holds no {what}")
    started = data.get("datetime") or datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat()
    run = Run(str(path), cells, _as_roles(meta) if recorded != side else meta, side, str(started), notes)
    if recorded != side:
        given = meta.options.labels if meta.options else {}
        names = {s: given.get(s) or f"side {s}" for s in "AB"}
        run.notes.append(f"{path}: its session ran the candidate as side A ({names['A']}) and the baseline as side B "
                         f"({names['B']}); read by role, as it records ("
                         f"{'its side labels; recorded before runs carried baseline_side' if from_labels else 'baseline_side B'}"
                         f"): side A (baseline) is {names['B']}, side B (candidate) {names['A']}")
    if not run.complete:
        run.notes.append(f"{path.parent} is an incomplete run ({meta.interrupted or 'ended early'}): {len(cells)} cells")
    if meta.failed:
        run.notes.append(f"{path} is marked failed: {meta.failed}")
    return run


def add_row(cells: dict[tuple, Cell], row: Row, times: list[float]) -> None:
    """One launch of a cell: its per-op times and its row."""
    if row.time_us is None:   # files from other writers
        row.time_us = median(times) * 1e6
    series = Series.of(row)
    size = getattr(row, "bytes", 0)
    cell = cells.setdefault((series, size), Cell(series, size, row))
    per_op = [float(t) for t in times]
    waits, k = getattr(row, "round_cpu_wait_ns", []), getattr(row, "iters_per_round", 0) or 0
    cell.launches[row.launch].extend(undisturbed(per_op, waits, k))   # what verdicts judge (schema/stats.py)
    cell.rows.setdefault(row.launch, row)
    if (waited := waited_rounds(per_op, waits, k)) is not None:
        cell.waited[row.launch] = waited


def leave_out_disturbed(cells: dict[tuple, Cell]) -> None:
    """A launch with fewer than MIN_UNDISTURBED rounds free of CPU waits leaves its cell (a cell keeps
    its last) where most of its bench kind's launches with waits had enough. Why: docs/results.md."""
    for bench in sorted({cell.series.bench for cell in cells.values()}):   # a kind's rounds are its own length
        waited = [(cell, i) for cell in cells.values() if cell.series.bench == bench for i in cell.waited]
        whole = [(c, i) for c, i in waited if 0 < c.waited[i][0] and c.waited[i][1] - c.waited[i][0] < MIN_UNDISTURBED]
        if not whole or 2 * len(whole) >= len(waited):
            continue
        for cell, i in whole:
            if len(cell.launches) > 1:
                del cell.launches[i]
                cell.rows.pop(i, None)
                if cell.row.launch == i:
                    cell.row = next(iter(cell.rows.values()))


def run_from_rows(rows: list[Row], side: str, path: str, meta: RunMeta) -> Run:
    """A run from rows still in memory (a session's own launches), its round times from round_ns_per_rank."""
    from schema.stats import per_op_seconds
    cells: dict[tuple, Cell] = {}
    for row in rows:
        if row.side == side and row.iters_per_round:
            add_row(cells, row, per_op_seconds(row.round_ns_per_rank, row.iters_per_round).tolist())
    if not side:
        leave_out_disturbed(cells)
    return Run(path, cells, meta, side)


def _entry_parts(bench: dict, where: str) -> tuple[dict, list]:
    """(extra_info, per-op times) of one entry: times must be a list of finite seconds > 0."""
    info, stats = bench.get("extra_info") or {}, bench.get("stats") or {}
    if not isinstance(info, dict) or not isinstance(stats, dict):
        raise ResultError(f"{where}: extra_info and stats must be objects")
    times = stats.get("data") or []
    bad = [t for t in times if not (isinstance(t, (int, float)) and not isinstance(t, bool) and 0 < t < float("inf"))] \
        if isinstance(times, list) else [times]
    if bad:
        raise ResultError(f"{where}: stats.data must be a list of finite times > 0 s, found {str(bad[0])[:40]}")
    return info, times


def knob_sides(run: Run, name: str, base: str, cand: str) -> tuple[Run, Run]:
    """Two values of one --knobs variable in one run as two runs to compare: each keeps the cells
    measured with its value, their series named without that variable so the cells pair up."""
    def side(value: str) -> Run:
        cells = {}
        for (series, size), cell in run.cells.items():
            knobs = dict(cell.row.knobs)
            if knobs.pop(name, None) != value:
                continue
            renamed = replace(series, knobs=knob_text(knobs))
            cells[(renamed, size)] = replace(cell, series=renamed)
        if not cells:
            found = sorted({f"{name}={c.row.knobs[name]}" for c in run.cells.values() if name in c.row.knobs})
            raise NoCells(f"{run.path} holds no cells with {name}={value} (it has: {', '.join(found) or 'no such knob'})")
        return replace(run, cells=cells, meta=replace(run.meta, label=f"{name}={value}"))
    return side(base), side(cand)
