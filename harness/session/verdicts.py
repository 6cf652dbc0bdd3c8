"""The session's gates at its end (--baseline, --ab-until-decided, --history), each judged from the
results just written as `hccl-bench compare`/`history` would, and the exit status they give."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness import files
from harness.session.session import BenchSession
from schema.exit_codes import ExitCode
from schema.judgement import GateResult
from schema.results import ResultError

if TYPE_CHECKING:
    from reports.gate import Judgement


# a gate whose input is unusable (another setup's --baseline, an unreadable history): never "a regression"
UNUSABLE = ExitCode.BAD_OPTION


def judge(bench: BenchSession) -> ExitCode | None:
    """Every gate the options ask for, appended to bench.verdicts; the session's exit status if one fails."""
    asked = ((bench.opts.ab_until_decided, judge_sequential_ab), (bench.opts.baseline, compare_with_baseline),
             (bench.opts.history, judge_history))
    gates = [judged(bench) for on, judged in asked if on]
    bench.verdicts += gates
    if not (codes := [g.exit for g in gates if g.fail]):
        return None
    # a regression (1) outranks inconclusive cells (6) and a changed machine (7)
    return ExitCode.REGRESSION if ExitCode.REGRESSION in codes else ExitCode(codes[0])


def compare_with_baseline(bench: BenchSession) -> GateResult:
    """--baseline: this run against a stored one; a confirmed regression or another setup's baseline fails."""
    from harness.session import baselines
    from reports.gate import judge_pair
    from reports.result_files import load
    result = str(bench.run_dir / "results.json")
    try:
        base = baselines.auto(result) if bench.opts.baseline == "auto" else bench.opts.baseline
        judgement = judge_pair(load(base), load(result))
    except ResultError as exc:
        return GateResult(f"# baseline comparison impossible: {exc}", UNUSABLE)
    if judgement.refused:
        return GateResult(f"# baseline refused: {judgement.refused}", UNUSABLE)
    return gate(bench, judgement, "compare", f"{judgement.headline} vs baseline {base}")


def gate(bench: BenchSession, judgement, stem: str, headline: str) -> GateResult:
    """A pair's verdict as the session's: STEM.md and STEM.json in the run folder, and its exit status."""
    from reports.gate import dumps
    files.write_atomic(bench.run_dir / f"{stem}.md", judgement.markdown + "\n")
    files.write_atomic(bench.run_dir / f"{stem}.json", dumps(judgement))
    return GateResult(judgement.text, judgement.exit_status(bench.opts.inconclusive), headline)


def judge_sequential_ab(bench: BenchSession) -> GateResult:
    """--ab-until-decided: B against A with the looks replayed, as `hccl-bench compare RUN --ab` prints it."""
    from reports.gate import judge_pair
    from reports.result_files import load
    result = bench.run_dir / "results.json"
    try:
        judgement = judge_pair(load(result, side="A"), load(result, side="B"))
    except ResultError as exc:
        return GateResult(f"# A/B verdict impossible: {exc}", ExitCode.REGRESSION)
    if judgement.refused:
        return GateResult(f"# A/B refused: {judgement.refused}", ExitCode.REGRESSION)
    used = bench.sequential.launches_used if bench.sequential else 0
    return gate(bench, judgement, "ab", f"{judgement.headline}; A/B launches used {used} of {bench.opts.repeat}")


def judge_history(bench: BenchSession) -> GateResult:
    """--history: this run against the earlier ones in its --results folder; a new confirmed regression fails."""
    from reports.gate import judge_history as judge_runs
    from reports.history import load_runs, too_few
    try:
        runs, _ = load_runs([str(bench.run_dir.parent)])
    except ResultError as exc:
        return GateResult(f"# history impossible: {exc}", UNUSABLE)
    if short := too_few(runs, ab=bool(bench.opts.previous_stack and bench.opts.previous_differs)):
        return GateResult(short)
    judgement = judge_runs(runs)
    if judgement.refused:
        return GateResult(f"# history refused: {judgement.refused}", UNUSABLE)
    prefix = ""
    if bench.opts.previous_stack and judgement.history is not None:
        prefix, judgement = confirm_same_night(bench, runs, judgement)
    files.write_atomic(bench.run_dir / "history.md", judgement.markdown + "\n")
    return GateResult(prefix + judgement.text, judgement.exit_status("pass"),   # 1 a software regression, 7 the machine's
                      f"{judgement.headline} in the history of {bench.run_dir.parent}")


def confirm_same_night(bench: BenchSession, runs: list, judgement: Judgement) -> tuple[str, Judgement]:
    """--previous-stack: every cell of this run A/B-tested against a differing previous stack by a child
    session (same_night.py), then the history judged again with its record (docs/options.md, The same night)."""
    from harness.session import same_night
    from reports.gate import judge_history as judge_runs
    newest = max(runs, key=lambda r: r.started)
    if Path(newest.path).parent != bench.run_dir or judgement.history is None:
        return "# same-night A/B: this run is not the history's newest, nothing more was run\n", judgement
    if not bench.opts.previous_differs:   # an A/A of one stack cannot tell a software change; the run records it
        return ("# same-night A/B: the previous stack is this one (it changes nothing here), nothing to A/B; a change "
                "whose nights all ran the stack of the night before, nothing recorded changed, is the machine's\n"), judgement
    keys = set(newest.cells)   # every cell, judged or not (a new one, a noisy night's: the A/B is its own evidence)
    why = f"# same-night A/B: the previous stack differs from this one: all {len(keys)} cells of this run\n"
    outcome = same_night.run(bench.opts, bench.run_dir, keys)
    return why + outcome.text + "\n", judge_runs(runs) if outcome.ok else judgement
