"""What each `hccl-bench` subcommand does (harness/cli/__init__.py only parses and dispatches): each reads
its parsed arguments, prints its answer and returns an ExitCode."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import kinds
from harness import files, provenance
from harness.session import baselines
from layers import memory
from reports import calibration, summary, table
from reports.result_files import load
from schema.exit_codes import ExitCode
from schema.results import side_labels


def fail(message: str) -> ExitCode:
    """Unusable input: one line on stderr, never the status of a regression."""
    print(f"hccl-bench: {message}", file=sys.stderr)
    return ExitCode.BAD_INPUT


def run_memory(args) -> ExitCode:
    if args.params <= 0 or min(args.tp, args.pp, args.dp) < 1 or args.zero not in (0, 1, 2, 3):
        return fail("--params must be > 0, --tp/--pp/--dp >= 1 and --zero one of 0, 1, 2, 3")
    est = memory.estimate(args.params, args.tp, args.pp, args.dp, args.zero, args.layers, args.hidden, args.heads,
                          args.seq, args.micro_batch, args.microbatches, args.schedule, args.sp, args.recompute,
                          hccl_buffsize_mb=args.hccl_buffsize)
    print(f"# per-rank memory, params={args.params:g} tp={args.tp} pp={args.pp} dp={args.dp} zero={args.zero} "
          f"(mixed-precision Adam: 2 + 2 + 12 bytes/param; GB = 1e9 bytes)")
    for label, value in (("weights", est.weights), ("gradients", est.grads), ("optimizer states", est.optimizer),
                         ("activations", est.activations), ("comm buffers", est.comm_buffers), ("total", est.total)):
        print(f"{label:>18} {value / memory.GB:10.2f} GB")
    if not args.layers:
        print("# activations need --layers --hidden --heads --seq (Korthikanti et al. 2022)")
    return ExitCode.OK


def run_provenance(args) -> ExitCode:
    print(json.dumps(provenance.collect(), indent=1))
    return ExitCode.OK


def run_table(args) -> ExitCode:
    runs = [_load(args.result, side="A"), load(args.result, side="B")] if args.ab else [_load(args.result)]
    sections = kinds.tables([row for run in runs for row in table.launch_rows(run)])
    if not sections:
        return fail(f"{args.result} holds no cells")
    print("\n\n".join(sections))
    return ExitCode.OK


def run_calibrate(args) -> ExitCode:
    first, second = _pair(args, args.a, args.b, "calibrate takes two runs A B, or one interleaved A/A run with --ab")
    result = calibration.calibrate(first, second, estimator=args.estimator)
    print(summary.calibration_text(result))
    if args.output:
        files.write_atomic(args.output, json.dumps(result.to_json(), indent=1))
    return ExitCode.OK


def _load(path: str, side: str = ""):
    """A run, and what its reader must know (rebuilt from cases.jsonl, incomplete, failed) once on stderr."""
    run = load(path, side=side)
    for note in run.notes:
        print(f"# note: {note}", file=sys.stderr)
    return run


def _named(runs: list, labels: list[str] | None) -> list:
    """--label A=NAME / B=NAME: the first run (side A, the baseline) and the second (side B)."""
    given = side_labels(labels or [])   # ValueError: one line, as every bad argument
    for run, side in zip(runs, "AB"):
        if side in given:
            run.name_as(given[side])
    return runs


def _pair(args, first: str, second: str | None, usage: str):
    """(base, cand): two runs, sides A and B of one --ab-env run, or two values of one --knob; else ValueError(usage)."""
    if getattr(args, "knob", None):
        from reports.result_files import knob_sides
        name, sep, values = args.knob.partition("=")
        chosen = values.split(",")
        if second or args.ab or not sep or len(chosen) != 2 or not all(chosen):
            raise ValueError("--knob NAME=BASE,CAND compares two values of one --knobs variable within one run")
        return tuple(_named(list(knob_sides(_load(first), name, *chosen)), getattr(args, "label", None)))
    if args.ab and not second:
        return tuple(_named([_load(first, side="A"), load(first, side="B")], getattr(args, "label", None)))
    if second and not args.ab:
        return tuple(_named([_load(first), _load(second)], getattr(args, "label", None)))
    raise ValueError(usage)


def _write_outputs(args, judgement) -> None:
    from reports.gate import dumps
    if args.json:
        files.write_atomic(args.json, dumps(judgement))
    if args.markdown:
        files.write_atomic(args.markdown, judgement.markdown + "\n")


def run_compare(args) -> ExitCode:
    from reports.gate import judge_pair
    base, cand = _pair(args, args.base, args.cand, "compare takes BASE CAND, or one interleaved --ab-env run with --ab")
    cal = calibration.read(args.calibration) if args.calibration else None
    t0 = time.perf_counter()
    judgement = judge_pair(base, cand, calibration=cal, min_effect=args.min_effect, force=args.force, estimator=args.estimator)
    if judgement.refused:
        return fail(judgement.refused)
    print(judgement.text)
    print(f"# compared {len(judgement.comparison.cells) if judgement.comparison else 0} cells "
          f"in {time.perf_counter() - t0:.2f} s")
    _write_outputs(args, judgement)
    return judgement.exit_status(args.inconclusive)


def run_report(args) -> ExitCode:
    from reports.report_page import render
    if args.ab and len(args.runs) != 1:
        return fail("report --ab takes one interleaved --ab-env run")
    runs = [_load(args.runs[0], side="A"), load(args.runs[0], side="B")] if args.ab else [_load(r) for r in args.runs]
    _named(runs, args.label)
    out = render(runs, Path(args.output), [_load(p) for p in args.predict_from] if args.predict_from else None,
                 heatmap=args.heatmap)
    print(f"# report: {out['html']} ({out['figures']} figures), summary: {out['markdown']}"
          + (f", rank x round heatmap: {', '.join(dict.fromkeys(out['heatmaps']))}" if out["heatmaps"] else ""))
    return ExitCode.OK


def run_history(args) -> ExitCode:
    from reports.gate import judge_history
    if args.window < 1:
        return fail(f"--window {args.window}: give a number of runs, 1 or more")
    from reports.history import load_runs, too_few
    runs, skipped = load_runs(args.runs)
    short = too_few(runs, ab=bool(args.ab))
    for line in skipped:
        print(f"# skipped: {line}")
    for note in (note for run in runs for note in run.notes):   # as _load, every run's
        print(f"# note: {note}", file=sys.stderr)
    if short:
        print(short + ("; no history page written" if args.report else ""))
        return ExitCode.OK
    cal = calibration.read(args.calibration) if args.calibration else None
    ab = None
    if args.ab:   # judged as compare --ab does: a sequential run's looks replayed, its estimator, a setup check
        from reports.gate import pair
        base, cand = load(args.ab, side="A"), load(args.ab, side="B")
        same_day = pair(base, cand, min_effect=args.min_effect, force=args.force, estimator=args.estimator)
        if same_day.refused:
            return fail(f"--ab {args.ab}: {same_day.refused}")
        ab = same_day.comparison
        print(f"# same-day A/B {args.ab}: side A (baseline) the previous stack, side B (candidate) the newest one")
    judgement = judge_history(runs, calibration=cal, min_effect=args.min_effect, window=args.window, force=args.force, ab=ab,
                              estimator=args.estimator)
    if judgement.refused:
        return fail(judgement.refused)
    print(judgement.text)
    _write_outputs(args, judgement)
    if args.report and judgement.history is not None:
        from reports.history_page import render_history
        out = render_history(judgement.history, Path(args.report))
        print(f"# history page: {out['html']} ({out['figures']} figures)")
    return judgement.exit_status("pass")   # 1 a software regression, 7 the machine changed, else 0


def run_export(args) -> ExitCode:
    """The figures (and verdicts) as Prometheus text; a verdict never fails the export (hccl_bench_exit_code says it)."""
    from reports.export import prometheus
    if args.window < 1:
        return fail(f"--window {args.window}: give a number of runs, 1 or more")
    out = prometheus(args.runs, args.prometheus, job=args.job, window=args.window, cluster=args.cluster)
    for line in out.skipped:
        print(f"# skipped: {line}")
    print(f"# export: {out.what}: {out.figures} cells' figures, {out.verdicts} verdicts"
          + (f", exit status {out.exit_code}" if out.exit_code is not None else "") + f" -> {args.prometheus}")
    return ExitCode.OK


def run_import(args) -> ExitCode:
    """Every run of every file, in order: OUT.json, OUT.2.json, ...; what each log did not say is named."""
    from reports.importers import import_all
    if args.nranks is not None and args.nranks < 1:
        return fail(f"--nranks {args.nranks}: give a rank count >= 1")
    runs = import_all(args.file, args.op, args.nranks, args.dtype, args.label)
    first = Path(args.output or Path(args.file[0]).with_suffix(".hccl-bench.json"))
    for i, data in enumerate(runs, 1):
        out = first if i == 1 else first.with_name(f"{first.stem}.{i}{first.suffix or '.json'}")
        files.write_atomic(out, json.dumps(data, indent=1))
        meta, info = data["hccl_bench"], data["benchmarks"][0]["extra_info"]
        lines = meta["imported_from"]["lines"]
        print(f"# imported {len(data['benchmarks'])} cells ({meta['format']}, {info['op']}, {info['nranks']} ranks, "
              f"{meta['imported_from']['file']} lines {lines[0]}-{lines[1]}) -> {out}")
        for warning in meta["warnings"]:
            print(f"#   warning: {warning}", file=sys.stderr)
        if meta["failed"]:
            print(f"#   marked failed: {meta['failed']}", file=sys.stderr)
    return ExitCode.OK


def run_predict(args) -> ExitCode:
    from collectives.sizes import parse_sizes
    from reports import predict
    if args.hosts < 1 or args.ranks_per_host < 1:
        return fail(f"--hosts {args.hosts} --ranks-per-host {args.ranks_per_host}: give whole numbers >= 1")
    runs = [_load(path) for path in args.runs]
    fits = predict.fit(runs)
    sizes = parse_sizes(args.sizes) if args.sizes else sorted({c.size for r in runs for c in r.cells.values() if c.size})
    rows = predict.predict(fits, args.hosts, args.ranks_per_host, sizes)
    if not rows:
        link = "inter-host" if args.hosts > 1 else "intra-host"
        return fail(f"the runs hold no {link} cells to fit; measure that link class first")
    errors = predict.against(rows, _load(args.compare)) if args.compare else {}
    print(predict.text(fits, rows, errors, args.hosts, args.ranks_per_host))
    if args.json:
        files.write_atomic(args.json, json.dumps({"fits": [vars(f) for f in fits.values()], "predicted": rows,
                                                  "median_abs_error": errors}, indent=1))
    return ExitCode.OK


def run_baseline(args) -> ExitCode:
    if args.action in ("save", "show") and not (args.name and (args.result or args.action == "show")):
        return fail("baseline save RESULT --name NAME; baseline show --name NAME")
    if args.action == "save":
        path = baselines.save(args.result, args.name)
        print(f"# saved baseline {args.name}: {path}")
    elif args.action == "list":
        for e in baselines.entries():
            print(f"{e['platform']:40} {e['name']:24} {e['saved']}  cells={e['cells']}  cann={e.get('cann')}  "
                  f"mpi={e.get('mpi_library')}")
    else:
        print(json.dumps(baselines.find(args.name), indent=1))
    return ExitCode.OK
