"""``hccl-bench``: everything around result files (the sweeps themselves run under pytest).

Exit status: 0 ok (compare: no regression and every cell decided; history: none that began within
the window), 1 compare or history found a confirmed regression, 2 unusable input (unreadable file,
mismatched setups without --force, bad arguments), 3 internal error (a bug: it never reads as a
regression), 6 compare: no confirmed regression but inconclusive cells (--inconclusive pass: 0),
7 history: no software regression, but the machine got slower past the machine-alert rule (an improvement exits 0).
Sides: A is the baseline (the stack as started), B the candidate (--ab-env/--ab-source), everywhere.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import harness.cli.commands as commands
from kinds.options import fraction
from layers import memory
from reports.estimators import ESTIMATORS
from reports.history import DEFAULT_WINDOW
from schema.exit_codes import ExitCode
from schema.judgement import DEFAULT_ESTIMATOR, DEFAULT_MIN_EFFECT
from schema.results import ResultError


def _fraction(text: str) -> float:
    """--min-effect (kinds.options.fraction), its problem as argparse's usage line."""
    try:
        return fraction(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _arg(*names: str, **kwargs) -> tuple[tuple[str, ...], dict]:
    """One add_argument call, as a row of ARGUMENTS."""
    return names, kwargs


# command -> its arguments, in the order of its --help
ARGUMENTS: dict[str, list[tuple[tuple[str, ...], dict]]] = {
    "table": [
        _arg("result", help="a results.json, its run folder, or an imported file"),
        _arg("--ab", action="store_true", help="RESULT is one --ab-env/--ab-source run: both sides and B/A per pair")],
    "compare": [
        _arg("base", help="the baseline run (results.json, run folder, stored baseline or imported file)"),
        _arg("cand", nargs="?", help="the candidate run (omit with --ab)"),
        _arg("--ab", action="store_true", help="BASE is one run made with --ab-env: side B (candidate) against "
                                               "side A (baseline); an --ab-until-decided run replays its looks"),
        _arg("--knob", help="NAME=BASE,CAND: compare two values of one --knobs variable within the run BASE "
                            "(e.g. HCCL_BUFFSIZE=200,400)"),
        _arg("--calibration", help="A/A calibration JSON (hccl-bench calibrate) raising the minimum effect per size band"),
        _arg("--min-effect", type=_fraction, default=None,
             help=f"smallest change worth a verdict (default: the candidate run's, else {DEFAULT_MIN_EFFECT:g})"),
        _arg("--force", action="store_true", help="compare even if rank counts, hosts or backends differ"),
        _arg("--estimator", choices=ESTIMATORS, default=None,
             help=f"each launch's statistic of its rounds that verdicts rest on (default: the one the candidate "
                  f"run was made with, else {DEFAULT_ESTIMATOR}; tables show medians)"),
        _arg("--inconclusive", choices=["fail", "pass"], default="fail",
             help="cells without the evidence to say no change: fail (exit 6, the default) or pass (exit 0)"),
        _arg("--label", action="append", help="A=NAME or B=NAME: what to call the baseline (A) or candidate (B)"),
        _arg("--json", help="write the verdicts as JSON"),
        _arg("--markdown", help="write a Markdown summary (for CI comments)")],
    "calibrate": [
        _arg("a", help="the first A/A run"),
        _arg("b", nargs="?", help="the second A/A run (omit with --ab)"),
        _arg("--ab", action="store_true", help="A is one run made with --ab-env setting a variable nothing "
                                               "reads (e.g. HCCL_BENCH_AA=1): calibrate paired comparisons"),
        _arg("-o", "--output", help="write the calibration JSON here"),
        _arg("--estimator", choices=ESTIMATORS, default=DEFAULT_ESTIMATOR,
             help="each launch's statistic of its rounds (a calibration applies only to comparisons judging it)")],
    "history": [
        _arg("runs", nargs="+", help="result files, run directories, or a --results directory of nightly runs"),
        _arg("--window", type=int, default=DEFAULT_WINDOW,
             help=f"fail only on changes that began within the last N runs (default {DEFAULT_WINDOW})"),
        _arg("--calibration", help="A/A calibration JSON of separate runs, raising the minimum effect per size band"),
        _arg("--min-effect", type=_fraction, default=None,
             help=f"smallest change worth a verdict (default: the newest run's, else {DEFAULT_MIN_EFFECT:g})"),
        _arg("--force", action="store_true", help="use runs whose rank counts or hosts differ"),
        _arg("--estimator", choices=ESTIMATORS, default=None,
             help=f"each launch's statistic of its rounds (default: the newest run's, else {DEFAULT_ESTIMATOR})"),
        _arg("--json", help="write the verdicts as JSON"),
        _arg("--markdown", help="write a Markdown summary (for CI comments)"),
        _arg("--ab", help="a same-day --ab-env/--ab-source run, side A (baseline) the previous stack and side B "
                          "the newest: confirms or clears the newest run's suspected changes"),
        _arg("--report", help="write DIR/history.html: each flagged size range run by run, its levels and change")],
    "report": [
        _arg("runs", nargs="+", help="runs oldest first; each is compared with the first"),
        _arg("-o", "--output", required=True, help="folder for report.html and summary.md"),
        _arg("--ab", action="store_true", help="RUN is one --ab-env run: side B (candidate) against side A (baseline)"),
        _arg("--label", action="append", help="A=NAME or B=NAME: what to call the first run or side A, the second or B"),
        _arg("--predict-from", nargs="+", help="runs at another scale: draw the times their alpha-beta fits "
                                               "predict for each sweep's hosts x ranks (hccl-bench predict)"),
        _arg("--heatmap", metavar="CASE_ID", help="draw this case's rank x round times (its id as the sweep names it, -L<n> for "
             "launch n; default: the big-group case with the largest rank spread)")],
    "export": [
        _arg("runs", nargs="+", help="a run, one --ab-env/--ab-source run, or a history (a --results folder of "
                                     "nightly runs): its figures, and the verdicts of an A/B run or a history"),
        _arg("--prometheus", required=True, metavar="FILE", help="write the Prometheus text format here (node_exporter's "
             "textfile collector: a FILE.prom in its --collector.textfile.directory), written atomically"),
        _arg("--job", help="the job label (default: $SLURM_JOB_NAME, else hccl-bench)"),
        _arg("--cluster", help="the cluster label on every sample (default: $SLURM_CLUSTER_NAME, else this machine's name)"),
        _arg("--window", type=int, default=DEFAULT_WINDOW,
             help=f"a history's window, as `history --window` (default {DEFAULT_WINDOW})")],
    "import": [
        _arg("file", nargs="+"),
        _arg("-o", "--output", help="the first run's file (default FILE.hccl-bench.json); more runs get .2, .3, ..."),
        _arg("--label", help="what to call these runs in reports (default: the CANN version or folder)"),
        _arg("--op", help="the collective, when the log does not name it"),
        _arg("--nranks", type=int, help="rank count, when the log does not show it and busbw/algbw cannot pin "
                                        "it down (the refusal names the counts that fit)"),
        _arg("--dtype", help="data type, when the log does not show it (hccl_test)")],
    "baseline": [
        _arg("action", choices=["save", "list", "show"], help="save RESULT --name NAME, list, show --name NAME"),
        _arg("result", nargs="?", help="the run to store (save)"),
        _arg("--name", help="the stack's name, e.g. cann-8.0.RC3 (required for save and show)")],
    "memory": [
        _arg("--params", type=float, required=True, help="parameter count, e.g. 100e9"),
        *(_arg(f"--{name}", type=int, default=default, help=f"{what} (default {default})")
          for name, default, what in (("tp", 1, "tensor-parallel degree"), ("pp", 1, "pipeline-parallel degree"),
                                      ("dp", 1, "data-parallel degree"), ("zero", 0, "ZeRO stage 0-3 over dp"),
                                      ("layers", 0, "transformer layers (for activations)"), ("hidden", 0, "hidden size"),
                                      ("heads", 0, "attention heads"), ("seq", 0, "sequence length"),
                                      ("micro-batch", 1, "micro-batch size"), ("microbatches", 1, "microbatches per step"))),
        _arg("--schedule", default="1f1b", choices=["gpipe", "1f1b"], help="pipeline schedule (activations in flight)"),
        _arg("--sp", action="store_true", help="sequence parallelism"),
        _arg("--recompute", default="none", choices=list(memory.RECOMPUTE), help="activation recomputation"),
        _arg("--hccl-buffsize", type=float, default=200.0, help="HCCL_BUFFSIZE in MB (default 200)")],
    "predict": [
        _arg("runs", nargs="+", help="measured runs (their hosts say intra- or inter-host)"),
        _arg("--hosts", type=int, required=True, help="hosts at the scale to predict"),
        _arg("--ranks-per-host", type=int, required=True, help="ranks per host at that scale"),
        _arg("--sizes", help="sizes to predict (default: the runs' own)"),
        _arg("--compare", help="a measured run at that scale: print each prediction's error"),
        _arg("--json", help="write fits, predictions and errors as JSON")],
}


def _cluster(argv: list[str]) -> int:
    """An ExitCode, or under `cluster launch` (what launcher templates call) the ranks' own status."""
    from harness import cluster
    return cluster.main(argv)


def _doctor(argv: list[str]) -> ExitCode:
    from harness import doctor
    return doctor.main(argv)


# name -> (help, what it runs); the order is the order of --help
COMMANDS: dict[str, tuple[str, Callable[[argparse.Namespace], ExitCode]]] = {
    "provenance": ("print this machine's versions and relevant environment as JSON", commands.run_provenance),
    "table": ("print the nccl-tests-style table of a run (every launch; sides A and B with --ab)", commands.run_table),
    "compare": ("baseline vs candidate: verdict per cell, regressions as size ranges", commands.run_compare),
    "calibrate": ("A/A: noise per size band between two runs of the same stack", commands.run_calibrate),
    "history": ("nightly guard: change points in each cell's history of runs", commands.run_history),
    "report": ("HTML page and Markdown summary for one or more runs (oldest first)", commands.run_report),
    "export": ("a run's figures and a history's verdicts as Prometheus text (node_exporter textfile, Grafana)",
               commands.run_export),
    "import": ("nccl-tests / rccl-tests (text, -J JSON, rccl -Z json|csv), hccl_test, OSU, IMB-MPI1 logs or NCCL "
               "Inspector logs (field data) -> result files, one per run (OUT.json, OUT.2.json, ...)", commands.run_import),
    "baseline": ("stored reference results: save, list, show", commands.run_baseline),
    "memory": ("per-rank memory estimate for a model shape and tp/pp/dp", commands.run_memory),
    "predict": ("collective times at another scale from alpha-beta fits per link class", commands.run_predict),
}
# commands with their own option parsers: argv goes to them whole (argparse cannot pass "--x" through)
OWN_PARSERS: dict[str, tuple[str, Callable[[list[str]], int]]] = {
    "cluster": ("an emulated cluster on this machine: up --hosts N, status, exec HOST -- CMD, down (root)", _cluster),
    "doctor": ("which host, link or rank is bad: --launcher TEMPLATE --nproc N, or a job's own --traces DIR / "
               "--flight-recorder DIR [--json FILE] [-o DIR]", _doctor),
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="hccl-bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True)
    for name, (what, run) in COMMANDS.items():
        p = sub.add_parser(name, help=what)
        for names, kwargs in ARGUMENTS.get(name, []):
            p.add_argument(*names, **kwargs)
        p.set_defaults(func=run)
    for name, (what, _) in OWN_PARSERS.items():
        sub.add_parser(name, add_help=False, help=what).add_argument("rest", nargs=argparse.REMAINDER)
    return top


def main(argv: list[str] | None = None) -> int:
    """An ExitCode (`cluster launch mpi` replaces itself with hydra's mpiexec: that status is hydra's)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in OWN_PARSERS:
        return OWN_PARSERS[argv[0]][1](argv[1:])
    if argv[:1] and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        return commands.fail(f"unknown command {argv[0]!r}: choose from {', '.join([*COMMANDS, *OWN_PARSERS])}")
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (ResultError, OSError, ValueError) as exc:
        return commands.fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except Exception as exc:  # a bug: one line, and never the exit status of a regression
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(f"hccl-bench: internal error in {args.command}: {type(exc).__name__}: {first}"
              " (please report it with the command line)", file=sys.stderr)
        return ExitCode.INTERNAL


if __name__ == "__main__":
    sys.exit(main())
