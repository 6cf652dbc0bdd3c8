"""``hccl-bench``: everything around result files (the sweeps themselves run under pytest).

Exit status: 0 ok (compare: no regression and every cell decided; history: none that began within
the window), 1 compare or history found a confirmed regression, 2 unusable input (unreadable file,
mismatched setups without --force, bad arguments), 3 internal error (a bug: it never reads as a
regression), 6 compare: no confirmed regression but inconclusive cells (--inconclusive pass: 0),
7 history: no software regression, but cells changed with the canary (the machine changed).
Sides: A is the baseline (the stack as started), B the candidate (--ab-env/--ab-source), everywhere.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from harness import baselines, files, provenance
from layers import memory
from reports import summary, table
from reports.compare import DEFAULT_MIN_EFFECT
from reports.estimators import DEFAULT_ESTIMATOR, ESTIMATORS
from reports.history import DEFAULT_WINDOW
from reports.result_files import load
from reports.results import ResultError

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


def _fail(message: str) -> int:
    print(f"hccl-bench: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _memory(args) -> int:
    if args.params <= 0 or min(args.tp, args.pp, args.dp) < 1 or args.zero not in (0, 1, 2, 3):
        return _fail("--params must be > 0, --tp/--pp/--dp >= 1 and --zero one of 0, 1, 2, 3")
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
    return EXIT_OK


def _say_notes(run):
    """What a run's reader must know (rebuilt from cases.jsonl, incomplete, failed), once on stderr."""
    for note in run.notes:
        print(f"# note: {note}", file=sys.stderr)
    return run


def _load(path: str, side: str = ""):
    return _say_notes(load(path, side=side))


def _named(runs: list, labels: list[str] | None) -> list:
    """--label A=NAME / B=NAME: the first run (side A, the baseline) and the second (side B)."""
    from harness.options import OptionError, parse_labels
    try:
        given = parse_labels(labels or [])
    except OptionError as exc:
        raise ValueError(str(exc)) from None
    for run, side in zip(runs, "AB"):
        if side in given:
            run.meta["labels"] = {**(run.meta.get("labels") or {}), (run.side or ""): given[side]}
            if not run.side:
                run.meta["label"] = given[side]
    return runs


def _pair(args, first: str, second: str | None, usage: str):
    """(base, cand) from two runs, from sides A and B of one interleaved --ab-env run, or from two
    values of one --knobs variable (--knob NAME=BASE,CAND); a ValueError with `usage` otherwise."""
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


def _compare(args) -> int:
    from reports.gate import judge_pair
    base, cand = _pair(args, args.base, args.cand, "compare takes BASE CAND, or one interleaved --ab-env run with --ab")
    cal = json.loads(Path(args.calibration).read_text()) if args.calibration else None
    t0 = time.perf_counter()
    judgement = judge_pair(base, cand, calibration=cal, min_effect=args.min_effect, force=args.force,
                           estimator=args.estimator)
    if judgement.refused:
        return _fail(judgement.refused)
    print(judgement.text)
    print(f"# compared {len(judgement.comparison.cells) if judgement.comparison else 0} cells "
          f"in {time.perf_counter() - t0:.2f} s")
    _write_outputs(args, judgement)
    return judgement.exit_status(args.inconclusive)


def _report(args) -> int:
    from reports.report_page import render
    if args.ab and len(args.runs) != 1:
        return _fail("report --ab takes one interleaved --ab-env run")
    runs = [_load(args.runs[0], side="A"), load(args.runs[0], side="B")] if args.ab else [_load(r) for r in args.runs]
    _named(runs, args.label)
    out = render(runs, Path(args.output), [_load(p) for p in args.predict_from] if args.predict_from else None,
                 heatmap=args.heatmap)
    print(f"# report: {out['html']} ({out['figures']} figures), summary: {out['markdown']}"
          + (f", rank x round heatmap: {', '.join(dict.fromkeys(out['heatmaps']))}" if out["heatmaps"] else ""))
    return EXIT_OK


def _history(args) -> int:
    from reports.gate import judge_history
    from reports.history import load_runs, too_few
    runs, skipped = load_runs(args.runs)
    for line in skipped:
        print(f"# skipped: {line}")
    for run in runs:
        _say_notes(run)
    if too_few(runs):
        print(too_few(runs) + ("; no history page written" if args.report else ""))
        return EXIT_OK
    cal = json.loads(Path(args.calibration).read_text()) if args.calibration else None
    ab = None
    if args.ab:
        from reports.compare import compare
        ab = compare(load(args.ab, side="A"), load(args.ab, side="B"), min_effect=args.min_effect)
        print(f"# same-day A/B {args.ab}: side A (baseline) the previous stack, side B (candidate) the newest one")
    judgement = judge_history(runs, calibration=cal, min_effect=args.min_effect, window=args.window, force=args.force, ab=ab,
                              estimator=args.estimator)
    if judgement.refused:
        return _fail(judgement.refused)
    print(judgement.text)
    _write_outputs(args, judgement)
    if args.report and judgement.history is not None:
        from reports.history_page import render_history
        out = render_history(judgement.history, Path(args.report))
        print(f"# history page: {out['html']} ({out['figures']} figures)")
    return judgement.exit_status("pass")   # 1 a software regression, 7 the machine changed, else 0


def _import(args) -> int:
    """Every run of every file, in order: OUT.json, OUT.2.json, ...; what each log did not say is named."""
    from reports.importers import import_all
    if args.nranks is not None and args.nranks < 1:
        return _fail(f"--nranks {args.nranks}: give a rank count >= 1")
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
    return EXIT_OK


def _predict(args) -> int:
    from collectives.sizes import parse_sizes
    from reports import predict
    if args.hosts < 1 or args.ranks_per_host < 1:
        return _fail(f"--hosts {args.hosts} --ranks-per-host {args.ranks_per_host}: give whole numbers >= 1")
    runs = [_load(path) for path in args.runs]
    fits = predict.fit(runs)
    sizes = parse_sizes(args.sizes) if args.sizes else sorted({c.size for r in runs for c in r.cells.values() if c.size})
    rows = predict.predict(fits, args.hosts, args.ranks_per_host, sizes)
    if not rows:
        link = "inter-host" if args.hosts > 1 else "intra-host"
        return _fail(f"the runs hold no {link} cells to fit; measure that link class first")
    errors = predict.against(rows, _load(args.compare)) if args.compare else {}
    print(predict.text(fits, rows, errors, args.hosts, args.ranks_per_host))
    if args.json:
        files.write_atomic(args.json, json.dumps({"fits": [vars(f) for f in fits.values()], "predicted": rows,
                                                  "median_abs_error": errors}, indent=1))
    return EXIT_OK


def _baseline(args) -> int:
    if args.action == "save":
        path = baselines.save(args.result, args.name)
        print(f"# saved baseline {args.name}: {path}")
    elif args.action == "list":
        for e in baselines.entries():
            print(f"{e['platform']:40} {e['name']:24} {e['saved']}  cells={e['cells']}  cann={e.get('cann')}  "
                  f"mpi={e.get('mpi_library')}")
    else:
        print(json.dumps(baselines.find(args.name), indent=1))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hccl-bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("provenance", help="print this machine's versions and relevant environment as JSON")
    show = sub.add_parser("table", help="print the nccl-tests-style table of a run (every launch; sides A and B with --ab)")
    show.add_argument("result", help="a results.json, its run folder, or an imported file")
    show.add_argument("--ab", action="store_true", help="RESULT is one --ab-env/--ab-source run: both sides and B/A per pair")
    cmp = sub.add_parser("compare", help="baseline vs candidate: verdict per cell, regressions as size ranges")
    cmp.add_argument("base", help="the baseline run (results.json, run folder, stored baseline or imported file)")
    cmp.add_argument("cand", nargs="?", help="the candidate run (omit with --ab)")
    cmp.add_argument("--ab", action="store_true", help="BASE is one run made with --ab-env: side B (candidate) against "
                                                       "side A (baseline); an --ab-until-decided run replays its looks")
    cmp.add_argument("--knob", help="NAME=BASE,CAND: compare two values of one --knobs variable within the run BASE "
                                    "(e.g. HCCL_BUFFSIZE=200,400)")
    cmp.add_argument("--calibration", help="A/A calibration JSON (hccl-bench calibrate) raising the minimum effect per size band")
    cmp.add_argument("--min-effect", type=float, default=DEFAULT_MIN_EFFECT,
                     help=f"smallest change worth a verdict (default {DEFAULT_MIN_EFFECT:g})")
    cmp.add_argument("--force", action="store_true", help="compare even if rank counts, hosts or backends differ")
    cmp.add_argument("--estimator", choices=ESTIMATORS, default=None,
                     help=f"each launch's statistic of its rounds that verdicts rest on (default: the one the candidate "
                          f"run was made with, else {DEFAULT_ESTIMATOR}; tables show medians)")
    cmp.add_argument("--inconclusive", choices=["fail", "pass"], default="fail",
                     help="cells without the evidence to say no change: fail (exit 6, the default) or pass (exit 0)")
    cmp.add_argument("--label", action="append", help="A=NAME or B=NAME: what to call the baseline (A) or candidate (B)")
    cmp.add_argument("--json", help="write the verdicts as JSON")
    cmp.add_argument("--markdown", help="write a Markdown summary (for CI comments)")
    cal = sub.add_parser("calibrate", help="A/A: noise per size band between two runs of the same stack")
    cal.add_argument("a", help="the first A/A run")
    cal.add_argument("b", nargs="?", help="the second A/A run (omit with --ab)")
    cal.add_argument("--ab", action="store_true", help="A is one run made with --ab-env setting a variable nothing "
                                                       "reads (e.g. HCCL_BENCH_AA=1): calibrate paired comparisons")
    cal.add_argument("-o", "--output", help="write the calibration JSON here")
    cal.add_argument("--estimator", choices=ESTIMATORS, default=DEFAULT_ESTIMATOR,
                     help="each launch's statistic of its rounds (a calibration applies only to comparisons judging it)")
    his = sub.add_parser("history", help="nightly guard: change points in each cell's history of runs")
    his.add_argument("runs", nargs="+", help="result files, run directories, or a --results directory of nightly runs")
    his.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                     help=f"fail only on changes that began within the last N runs (default {DEFAULT_WINDOW})")
    his.add_argument("--calibration", help="A/A calibration JSON of separate runs, raising the minimum effect per size band")
    his.add_argument("--min-effect", type=float, default=DEFAULT_MIN_EFFECT,
                     help=f"smallest change worth a verdict (default {DEFAULT_MIN_EFFECT:g})")
    his.add_argument("--force", action="store_true", help="use runs whose rank counts or hosts differ")
    his.add_argument("--estimator", choices=ESTIMATORS, default=None,
                     help=f"each launch's statistic of its rounds (default: the newest run's, else {DEFAULT_ESTIMATOR})")
    his.add_argument("--json", help="write the verdicts as JSON")
    his.add_argument("--markdown", help="write a Markdown summary (for CI comments)")
    his.add_argument("--ab", help="a same-day --ab-env/--ab-source run, side A (baseline) the previous stack and side B "
                                  "the newest: confirms or clears the newest run's suspected changes")
    his.add_argument("--report", help="write DIR/history.html: each flagged size range run by run, its levels and change")
    rep = sub.add_parser("report", help="HTML page and Markdown summary for one or more runs (oldest first)")
    rep.add_argument("runs", nargs="+", help="runs oldest first; each is compared with the first")
    rep.add_argument("-o", "--output", required=True, help="folder for report.html and summary.md")
    rep.add_argument("--ab", action="store_true", help="RUN is one --ab-env run: side B (candidate) against side A (baseline)")
    rep.add_argument("--label", action="append", help="A=NAME or B=NAME: what to call the first run or side A, the second or B")
    rep.add_argument("--predict-from", nargs="+", help="runs at another scale: draw the times their alpha-beta fits "
                                                       "predict for each sweep's hosts x ranks (hccl-bench predict)")
    rep.add_argument("--heatmap", metavar="CASE_ID", help="draw this case's rank x round times (its id as the sweep "
                                                          "names it, -L<n> for launch n; default: the big-group case "
                                                          "with the largest rank spread)")
    imp = sub.add_parser("import", help="nccl-tests / rccl-tests (text, -J JSON, rccl -Z json|csv), hccl_test logs or NCCL "
                                        "Inspector logs (field data) -> result files, one per run (OUT.json, OUT.2.json, ...)")
    imp.add_argument("file", nargs="+")
    imp.add_argument("-o", "--output", help="the first run's file (default FILE.hccl-bench.json); more runs get .2, .3, ...")
    imp.add_argument("--label", help="what to call these runs in reports (default: the CANN version or folder)")
    imp.add_argument("--op", help="the collective, when the log does not name it")
    imp.add_argument("--nranks", type=int, help="rank count, when the log does not show it and busbw/algbw cannot pin "
                                               "it down (the refusal names the counts that fit)")
    imp.add_argument("--dtype", help="data type, when the log does not show it (hccl_test)")
    base = sub.add_parser("baseline", help="stored reference results: save, list, show")
    base.add_argument("action", choices=["save", "list", "show"], help="save RESULT --name NAME, list, show --name NAME")
    base.add_argument("result", nargs="?", help="the run to store (save)")
    base.add_argument("--name", help="the stack's name, e.g. cann-8.0.RC3 (required for save and show)")
    mem = sub.add_parser("memory", help="per-rank memory estimate for a model shape and tp/pp/dp")
    mem.add_argument("--params", type=float, required=True, help="parameter count, e.g. 100e9")
    for name, default, what in (("tp", 1, "tensor-parallel degree"), ("pp", 1, "pipeline-parallel degree"),
                                ("dp", 1, "data-parallel degree"), ("zero", 0, "ZeRO stage 0-3 over dp"),
                                ("layers", 0, "transformer layers (for activations)"), ("hidden", 0, "hidden size"),
                                ("heads", 0, "attention heads"), ("seq", 0, "sequence length"),
                                ("micro-batch", 1, "micro-batch size"), ("microbatches", 1, "microbatches per step")):
        mem.add_argument(f"--{name}", type=int, default=default, help=f"{what} (default {default})")
    mem.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b"], help="pipeline schedule (activations in flight)")
    mem.add_argument("--sp", action="store_true", help="sequence parallelism")
    mem.add_argument("--recompute", default="none", choices=list(memory.RECOMPUTE), help="activation recomputation")
    mem.add_argument("--hccl-buffsize", type=float, default=200.0, help="HCCL_BUFFSIZE in MB (default 200)")
    pre = sub.add_parser("predict", help="collective times at another scale from alpha-beta fits per link class")
    pre.add_argument("runs", nargs="+", help="measured runs (their hosts say intra- or inter-host)")
    pre.add_argument("--hosts", type=int, required=True, help="hosts at the scale to predict")
    pre.add_argument("--ranks-per-host", type=int, required=True, help="ranks per host at that scale")
    pre.add_argument("--sizes", help="sizes to predict (default: the runs' own)")
    pre.add_argument("--compare", help="a measured run at that scale: print each prediction's error")
    pre.add_argument("--json", help="write fits, predictions and errors as JSON")
    clu = sub.add_parser("cluster", add_help=False,
                         help="an emulated cluster on this machine: up --hosts N, status, exec HOST -- CMD, down (root)")
    clu.add_argument("rest", nargs=argparse.REMAINDER)
    doc = sub.add_parser("doctor", add_help=False,
                         help="which host, link or rank is bad: --launcher TEMPLATE --nproc N [--json FILE] [-o DIR]")
    doc.add_argument("rest", nargs=argparse.REMAINDER)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["cluster"]:   # commands with their own options (argparse cannot pass "--x" through)
        from harness import cluster
        return cluster.main(argv[1:])
    if argv[:1] == ["doctor"]:
        from harness import doctor
        return doctor.main(argv[1:])
    args = parser.parse_args(argv)
    try:
        if args.command == "provenance":
            print(json.dumps(provenance.collect(), indent=1))
            return EXIT_OK
        if args.command == "memory":
            return _memory(args)
        if args.command == "table":
            runs = [_load(args.result, side="A"), load(args.result, side="B")] if args.ab else [_load(args.result)]
            rows = [row for run in runs for row in table.rows_of(run)]
            tuning = [row for run in runs for row in table.tuning_rows_of(run)]
            if not rows and not tuning:
                return _fail(f"{args.result} holds no collective or tuning cells (layer results are in its table.txt)")
            texts = (table.render(rows) if rows else "", table.render_tuning(tuning).strip("\n"))
            print("\n\n".join(text for text in texts if text))
            return EXIT_OK
        if args.command == "compare":
            return _compare(args)
        if args.command == "calibrate":
            pair = _pair(args, args.a, args.b, "calibrate takes two runs A B, or one interleaved A/A run with --ab")
            first, second = pair
            result = summary.calibrate(first, second, estimator=args.estimator)
            print(summary.calibration_text(result))
            if args.output:
                files.write_atomic(args.output, json.dumps(result, indent=1))
            return EXIT_OK
        if args.command == "report":
            return _report(args)
        if args.command == "predict":
            return _predict(args)
        if args.command == "history":
            if args.window < 1:
                return _fail(f"--window {args.window}: give a number of runs, 1 or more")
            return _history(args)
        if args.command == "import":
            return _import(args)
        if args.action in ("save", "show") and not (args.name and (args.result or args.action == "show")):
            return _fail("baseline save RESULT --name NAME; baseline show --name NAME")
        return _baseline(args)
    except (ResultError, OSError, ValueError) as exc:
        return _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except Exception as exc:  # a bug: one line, and never the exit status of a regression
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(f"hccl-bench: internal error in {args.command}: {type(exc).__name__}: {first}"
              " (please report it with the command line)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
