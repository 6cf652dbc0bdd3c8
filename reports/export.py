"""`hccl-bench export`: a night's figures and verdicts where fleets look, as the Prometheus text format
through prometheus_client's own registry. The metrics, labels and what each input exports: docs/results.md
(Where fleets look)."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import kinds
from collectives.ops import bandwidths
from collectives.sizes import format_size
from reports.compare import CellResult
from reports.gate import Judgement, judge_history, judge_pair
from reports.history import DEFAULT_WINDOW, load_runs, too_few
from reports.placement import round_trip_ns
from reports.result_files import load
from schema.results import NoCells, ResultError, Run, Series

CELL_LABELS = ("op", "bytes", "message_size", "dtype", "redop", "inplace", "backend", "algo", "nranks", "hosts",
               "series", "knobs", "side", "stack", "run", "job", "cluster")
VERDICT_LABELS = ("verdict", "cause", "direction", "confirmed", "machine")
RUN_LABELS = ("run", "job", "cluster")


@dataclass
class Export:
    """What was exported, for the command's line."""
    what: str = ""
    figures: int = 0                 # cells with busbw and time
    verdicts: int = 0
    skipped: list[str] = field(default_factory=list)   # cells or runs with nothing to export, and why
    exit_code: int | None = None     # the judgement's exit status (a history: 1 regression, 7 the machine, else 0)


def _series_labels(series: Series, size: int, row, side: str, stack: str, run: str, where: dict[str, str]) -> dict[str, str]:
    return {"op": series.op or "", "bytes": str(size), "message_size": format_size(size) if size else "",
            "dtype": series.dtype or "", "redop": series.redop or "", "inplace": "" if series.inplace is None else
            str(bool(series.inplace)).lower(), "backend": series.backend, "algo": series.algo or "",
            "nranks": "" if series.nranks is None else str(series.nranks),
            "hosts": str(len(row.hosts)) if getattr(row, "hosts", None) else "", "series": series.label(),
            "knobs": series.knobs or "", "side": side, "stack": stack, "run": run, **where}


def _run_name(run: Run) -> str:
    """The run as a label: its folder (a results.json's parent), else the file."""
    path = Path(run.path)
    return path.parent.name if path.name == "results.json" else path.name


def _stack(run: Run) -> str:
    """What the run's stack is called: its --label, else the CANN version, MPI library or folder."""
    prov = run.provenance
    return (run.given_name or (prov.get("cann") or {}).get("cann") or str(prov.get("mpi_library") or "") or _run_name(run))


class _Metrics:
    def __init__(self):
        from prometheus_client import CollectorRegistry, Gauge
        self.registry = CollectorRegistry()
        g = lambda name, doc, labels: Gauge(name, doc, labels, registry=self.registry)  # noqa: E731
        self.busbw = g("hccl_bench_busbw_gbps", "Bus bandwidth of a cell, GB/s (1e9 B/s), nccl-tests' definition, "
                       "at its median per-op time over launches", CELL_LABELS)
        self.algbw = g("hccl_bench_algbw_gbps", "Algorithm bandwidth (size / time) of a cell, GB/s (1e9 B/s)", CELL_LABELS)
        self.time = g("hccl_bench_time_us", "A cell's per-op time, us: the median over its launches of each launch's "
                      "median round (the slowest rank's per-op time)", CELL_LABELS)
        self.verdict = g("hccl_bench_verdict", "A cell's verdict (1 for the verdict it has): regression, improvement, "
                         "machine regression, suspected ..., no change, inconclusive", CELL_LABELS + VERDICT_LABELS)
        self.ratio = g("hccl_bench_time_ratio", "Candidate / baseline time of a judged cell (a history: level after / "
                       "level before its newest change), with its 95% CI", CELL_LABELS + ("bound",))
        self.detectable = g("hccl_bench_detectable_change", "The change a judged cell's samples could have seen "
                            "(80% power), as a fraction", CELL_LABELS)
        self.exit_code = g("hccl_bench_exit_code", "The judgement's exit status: 0 pass, 1 a confirmed software "
                           "regression, 6 inconclusive (compare), 7 a machine regression (history)", RUN_LABELS)
        self.cores = g("hccl_bench_cores_round_trip_ns", "Ranks 0 and 1's cores' cache-line round trip beside a cell's "
                       "cases, ns (the median over launches of each case's faster probe): where the host put the cores; "
                       "a history judges the launches in its usual placement", CELL_LABELS)
        self.waited = g("hccl_bench_waited_rounds_ratio", "Share of a cell's timed rounds in which a rank waited for a CPU "
                        "(more than 5% of the round): the machine's other work; verdicts judge the other rounds", CELL_LABELS)
        self.canary = g("hccl_bench_canary_seconds", "The canary's median sample of the night, s", ("workload", *RUN_LABELS))
        self.started = g("hccl_bench_run_start_seconds", "When the run began (Unix time)", RUN_LABELS)


def _figures(m: _Metrics, run: Run, side: str, where: dict[str, str], out: Export) -> None:
    """Each collective cell's busbw, algbw and time (median over launches) with its labels."""
    name, stack = _run_name(run), _stack(run)
    other = 0
    for (series, size), cell in sorted(run.cells.items(), key=lambda kv: (kv[0][0].sort_key(), kv[0][1])):
        if (row := kinds.sized_row(cell.row)) is None or not size:
            other += 1
            continue
        seconds = cell.pooled_s
        algbw, busbw = bandwidths(row.op, size, seconds, row.nranks, row.algo)
        labels = _series_labels(series, size, row, side, stack, name, where)
        m.busbw.labels(**labels).set(busbw)
        m.algbw.labels(**labels).set(algbw)
        m.time.labels(**labels).set(seconds * 1e6)
        if (rt := round_trip_ns(cell)) is not None:
            m.cores.labels(**labels).set(rt)
        if rounds := sum(r for _, r in cell.waited.values()):
            m.waited.labels(**labels).set(sum(w for w, _ in cell.waited.values()) / rounds)
        out.figures += 1
    if other:
        out.skipped.append(f"{other} cells of {name}{' side ' + side if side else ''} are not collectives "
                           "(no bandwidth): not exported")
    try:
        started = datetime.fromisoformat(run.started.replace("Z", "+00:00")).timestamp()
        m.started.labels(run=name, **where).set(started)
    except ValueError:
        pass


def _verdicts(m: _Metrics, judgement: Judgement, cells: list[CellResult], run: Run, stack: str, where: dict[str, str],
              out: Export, inconclusive: str) -> None:
    """Each judged cell's verdict, ratio and detectable change, labelled as `run`'s cells, and the exit status."""
    rows, name = {k: c.row for k, c in run.cells.items()}, _run_name(run)
    for c in cells:
        labels = _series_labels(c.series, c.size, rows.get(c.key), "", stack, name, where)
        v = c.outcome
        m.verdict.labels(**labels, verdict=v.text(), cause=v.cause.value, direction=v.direction.value,
                         confirmed=str(v.confirmed).lower(), machine=str(v.machine).lower()).set(1)
        for bound, value in (("estimate", c.ratio), ("low", c.low), ("high", c.high)):
            m.ratio.labels(**labels, bound=bound).set(value)
        m.detectable.labels(**labels).set(c.detectable)
        out.verdicts += 1
    out.exit_code = int(judgement.exit_status(inconclusive))
    m.exit_code.labels(run=name, **where).set(out.exit_code)


def _canary(m: _Metrics, run: Run, where: dict[str, str]) -> None:
    from schema.stats import median
    for workload, w in (run.meta.canary.workloads if run.meta.canary else {}).items():
        samples = w.get("samples") if isinstance(w, dict) else None
        if isinstance(samples, list) and samples and all(isinstance(s, (int, float)) and s > 0 for s in samples):
            m.canary.labels(workload=str(workload), run=_run_name(run), **where).set(median(samples))


def _ab_sides(path: str) -> tuple[Run, Run] | None:
    """Sides A (baseline) and B (candidate) of one interleaved run, by role; None when it is not one."""
    try:
        return load(path, side="A"), load(path, side="B")
    except NoCells:
        return None


def collect(paths: list[str], job: str | None = None, window: int = DEFAULT_WINDOW,
            cluster: str | None = None) -> tuple[_Metrics, Export]:
    """The gauges for `paths` (one run, one A/B run, several runs or a --results folder of nights)."""
    where = {"job": job or os.environ.get("SLURM_JOB_NAME") or os.environ.get("JOB_NAME") or "hccl-bench",   # on every sample
             "cluster": cluster or os.environ.get("SLURM_CLUSTER_NAME") or socket.gethostname()}
    m, out = _Metrics(), Export()
    runs, skipped = load_runs(paths)
    if not runs and len(paths) == 1 and (sides := _ab_sides(paths[0])) is not None:
        base, cand = sides
        for run in sides:
            _figures(m, run, run.side, where, out)
        judgement = judge_pair(base, cand)
        if judgement.comparison is not None and not judgement.refused:
            _verdicts(m, judgement, judgement.comparison.cells, cand, f"{_stack(base)} -> {_stack(cand)}", where, out,
                      "fail")   # as `compare --ab` exits
        else:
            out.skipped.append(f"no verdicts: {judgement.refused}")
        out.what = f"the A/B run {paths[0]}: {base.label} -> {cand.label}"
        return m, out
    if not runs:
        raise ResultError(f"{', '.join(paths)}: no run with cells to export ({'; '.join(skipped) or 'nothing found'})")
    out.skipped += [f"run: {line}" for line in skipped]
    runs.sort(key=lambda r: r.started)
    newest = runs[-1]
    if too_few(runs):   # a run or two: their figures, nothing to judge
        for run in runs:
            _figures(m, run, "", where, out)
            _canary(m, run, where)
        whose = "1 run's" if len(runs) == 1 else f"{len(runs)} runs'"
        out.what = f"{whose} figures ({too_few(runs).removeprefix('# ')})"
        return m, out
    judgement = judge_history(runs, window=window)
    _figures(m, newest, "", where, out)
    _canary(m, newest, where)
    hist = judgement.history
    if hist is None or judgement.refused:
        out.skipped.append(f"no verdicts: {judgement.refused or judgement.headline}")
    else:
        _verdicts(m, judgement, hist.judged.cells, newest, _stack(newest), where, out, "pass")
    out.what = f"the history of {len(runs)} runs: the newest night {_run_name(newest)}'s figures and the history's verdicts"
    return m, out


def prometheus(paths: list[str], file: str | Path, job: str | None = None, window: int = DEFAULT_WINDOW,
               cluster: str | None = None) -> Export:
    """Write the Prometheus text format of `paths` to `file` (atomically: a scrape never sees half a file)."""
    from prometheus_client import write_to_textfile
    m, out = collect(paths, job, window, cluster)
    Path(file).parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(file), m.registry)
    return out
