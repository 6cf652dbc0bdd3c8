"""The one judgement behind every gate: `hccl-bench compare`/`history` and pytest's `--baseline`/
`--history` call these, so a verdict, its refusal rules and its texts cannot drift apart."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Optional

from reports import summary
from reports.compare import Comparison, compare
from reports.estimators import ESTIMATORS
from reports.history import DEFAULT_WINDOW, History, alert_rule, analyse, confirm_with_ab, platform, recorded_ab, settle, too_few
from reports.result_files import load
from reports.sequential import run_looks
from schema.calibration import Calibration
from schema.exit_codes import ExitCode
from schema.judgement import DEFAULT_ESTIMATOR, DEFAULT_MIN_EFFECT, REGRESSION
from schema.results import ResultError, Run


@dataclass
class Judgement:
    text: str = ""               # what the terminal shows
    markdown: str = ""           # for CI comments
    as_json: dict = field(default_factory=dict)
    headline: str = ""           # one line: the verdict and its reason
    regressed: bool = False      # a confirmed regression: fails the job
    inconclusive: int = 0        # cells without enough evidence: fail the job under --inconclusive fail
    machine_changed: bool = False   # history: cells changed with the canary (the machine's change, not the stack's)
    machine_regressed: bool = False   # ... and some got slower: the only machine change that fails a job (exit 7)
    refused: str = ""            # why there is no verdict (setups differ, nothing shared, too few runs)
    comparison: Comparison | None = None   # what a pair's verdict rests on
    history: History | None = None         # what a history's verdict rests on (its page draws from it)

    def exit_status(self, inconclusive: str = "fail") -> ExitCode:
        """1 a confirmed regression; 7 a history's machine regression past the machine-alert rule; 6
        inconclusive cells (unless the gate passes them); else 0."""
        if self.regressed:
            return ExitCode.REGRESSION
        if self.machine_regressed:
            return ExitCode.MACHINE_CHANGED
        return ExitCode.INCONCLUSIVE if self.inconclusive and inconclusive == "fail" else ExitCode.OK


def sequential_budget(base: Run, cand: Run) -> int:
    """The launch budget when these are the two sides of one --ab-until-decided run, else 0."""
    options = base.meta.options
    if base.side and cand.side and base.path == cand.path and options is not None and options.ab_until_decided:
        return options.repeat or 0
    return 0


def recorded_estimator(run: Run) -> str:
    """The --estimator a run was made with (what its session judged by), else the default."""
    value = getattr(run.meta.options, "estimator", None)
    return value if value in ESTIMATORS else DEFAULT_ESTIMATOR


def recorded_min_effect(run: Run) -> float:
    """The --min-effect a run was made with (what its session judged by), else the default."""
    value = getattr(run.meta.options, "min_effect", None)
    return float(value) if value is not None and 0 < value < 1 else DEFAULT_MIN_EFFECT


def pair(base: Run, cand: Run, calibration: Optional[Calibration] = None, min_effect: float | None = None,
         force: bool = False, estimator: str | None = None) -> Judgement:
    """Base (side A) against candidate (side B), not yet written as text (judge_pair writes it); an
    --ab-until-decided run's looks are replayed. `estimator`, `min_effect`: None, the candidate's own."""
    prefix = ""
    estimator = estimator or recorded_estimator(cand)
    min_effect = recorded_min_effect(cand) if min_effect is None else min_effect
    if budget := sequential_budget(base, cand):
        seq = run_looks(base, cand, budget, min_effect=min_effect, calibration=calibration, estimator=estimator)
        cmp = seq.comparison
        prefix = "\n".join([*seq.progress, f"# sequential A/B: {seq.launches_used} launches used of {budget}; "
                             f"{len(seq.undecided)} cells undecided"]) + "\n"
    else:
        cmp = compare(base, cand, calibration=calibration, min_effect=min_effect, estimator=estimator)
    if cmp.mismatch and not force:
        return Judgement(refused="setups differ, refusing to compare (--force to compare anyway): " + "; ".join(cmp.mismatch),
                         comparison=cmp)
    if not cmp.cells and not cmp.unplaced:   # cells not judged for the cores' placement are inconclusive, not absent
        return Judgement(refused="the two runs share no cells (backend, algo, op, dtype, size, in-place, nranks)", comparison=cmp)
    return Judgement(prefix, regressed=cmp.regressed, inconclusive=cmp.inconclusive, comparison=cmp)


def judge_pair(base: Run, cand: Run, calibration: Optional[Calibration] = None, min_effect: float | None = None,
               force: bool = False, estimator: str | None = None) -> Judgement:
    """pair(), written as text, Markdown, JSON and its headline."""
    judgement = pair(base, cand, calibration, min_effect, force, estimator)
    if judgement.refused or (cmp := judgement.comparison) is None:
        return judgement
    return replace(judgement, text=judgement.text + summary.text(cmp), markdown=summary.markdown(cmp),
                   as_json=summary.as_json(cmp), headline=summary.headline(cmp))


def judge_history(runs: list[Run], calibration: Optional[Calibration] = None, min_effect: float | None = None,
                  window: int = DEFAULT_WINDOW, force: bool = False, ab: Comparison | None = None,
                  estimator: str | None = None) -> Judgement:
    """`runs`: enough for a history (callers check `history.too_few`). `ab`: a same-day interleaved A/B of
    the newest run; every earlier night's recorded one is applied too. `estimator`: None, the newest run's."""
    newest = max(runs, key=lambda r: r.started)
    prefix = ""
    newest_platform = platform(newest)
    other = [r for r in runs if platform(r) != newest_platform]
    if other and not force:   # a night on a drained node (fewer ranks) must not stop every later night's guard
        runs = [r for r in runs if r not in other]
        prefix = (f"# left out {len(other)} runs of another setup than the newest's ({other[0].path}: "
                  f"{platform(other[0])}; the newest: {newest_platform}); --force judges them together\n")
        if short := too_few(runs):
            return Judgement(prefix + short, headline=short)
    hist = analyse(runs, calibration=calibration, window=window,
                   min_effect=recorded_min_effect(newest) if min_effect is None else min_effect,
                   estimator=estimator or recorded_estimator(newest))
    if hist.judged.mismatch and not force:
        return Judgement(refused="setups differ across the history (--force to use them anyway): " + hist.judged.mismatch[0],
                         history=hist)
    for at, run in enumerate(hist.runs[:-1]):   # earlier nights' same-night A/Bs, oldest first: theirs stand
        if recorded := recorded_ab(run):
            earlier, line = same_night(recorded[0])
            if earlier is not None:
                confirmed, unexplained = confirm_with_ab(hist, earlier, at)
                prefix += (f"# same-night A/B of {summary.night(run)}: confirmed {confirmed} of the "
                           f"{len(earlier.cells)} cells it measured; {unexplained} regressed cells the stacks ran alike\n")
            else:
                prefix += line
    if ab is None and (recorded := recorded_ab(newest)):
        ab, line = same_night(recorded[0])
        prefix += line
    if ab is not None:
        suspected = len(hist.screened())   # the newest night's moved cells, each on its own p
        regressed = sum(c.outcome.kind == REGRESSION for c in hist.judged.cells)
        confirmed, unexplained = confirm_with_ab(hist, ab)
        prefix += (f"# same-day A/B: confirmed {confirmed} of the {len(ab.cells)} cells it measured ({suspected} suspected); "
                   f"{unexplained} of {regressed} regressed cells the stacks ran alike (the machine's)\n")
    alert_rule(hist)   # once, last: the cells the A/Bs confirmed or found alike are judged as they now stand
    settle(hist)
    as_json = {**summary.as_json(hist.judged), "headline": summary.history_headline(hist), "runs": [r.path for r in hist.runs],
               "change_at": {f"{k[0].label()} {k[1]} B": hist.runs[s.at].path for k, s in hist.steps.items() if s.at >= 0},
               "suspected": summary.as_json(hist.suspected)["cells"], "machine_changed": hist.machine_changed,
               "machine_regressed": hist.machine_regressed, "canary": summary.canary_json(hist),
               "below_alert": {f"{c.series.label()} {c.size} B": hist.below_alert[c.key] for c in hist.judged.cells
                               if c.key in hist.below_alert}}
    return Judgement(prefix + summary.history_text(hist), summary.history_markdown(hist), as_json,
                     summary.history_headline(hist), hist.regressed, machine_changed=hist.machine_changed,
                     machine_regressed=hist.machine_regressed, history=hist)


def same_night(path) -> tuple[Comparison | None, str]:
    """The same-night A/B a --previous-stack session recorded, judged previous -> this stack (a record
    older than hccl_bench.baseline_side is turned round here), and a line saying what it was."""
    try:
        base, cand = load(path, side="A"), load(path, side="B")
        if base.meta.baseline_side is None:   # an older record: side A is this stack
            base, cand = cand, base
        judgement = pair(base, cand)
    except ResultError as exc:
        return None, f"# same-night A/B {path} unusable: {exc}\n"
    if judgement.comparison is None or judgement.refused:
        return None, f"# same-night A/B {path} refused: {judgement.refused}\n"
    cmp = judgement.comparison
    return cmp, (f"# same-night A/B {path} (judged previous stack -> this stack): "
                 f"{summary.budget_text(cmp.budget)}\n")


def dumps(judgement: Judgement) -> str:
    return json.dumps(judgement.as_json, indent=1)
