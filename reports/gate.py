"""The one judgement behind every gate: `hccl-bench compare`/`history` and pytest's `--baseline`/
`--history` call these, so a verdict, its refusal rules and its texts cannot drift apart."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reports import summary
from reports.compare import DEFAULT_MIN_EFFECT, Comparison, compare
from reports.history import DEFAULT_WINDOW
from reports.results import Run

if TYPE_CHECKING:
    from reports.history import History


@dataclass
class Judgement:
    text: str = ""               # what the terminal shows
    markdown: str = ""           # for CI comments
    as_json: dict = field(default_factory=dict)
    headline: str = ""           # one line: the verdict and its reason
    regressed: bool = False      # a confirmed regression: fails the job
    refused: str = ""            # why there is no verdict (setups differ, nothing shared, too few runs)
    comparison: Comparison | None = None   # what a pair's verdict rests on
    history: History | None = None         # what a history's verdict rests on (its page draws from it)


def judge_pair(base: Run, cand: Run, calibration: dict | None = None, min_effect: float = DEFAULT_MIN_EFFECT,
               force: bool = False) -> Judgement:
    cmp = compare(base, cand, calibration=calibration, min_effect=min_effect)
    if cmp.mismatch and not force:
        return Judgement(refused="setups differ, refusing to compare (--force to compare anyway): " + "; ".join(cmp.mismatch),
                         comparison=cmp)
    if not cmp.cells:
        return Judgement(refused="the two runs share no cells (backend, algo, op, dtype, size, in-place, nranks)", comparison=cmp)
    return Judgement(summary.text(cmp), summary.markdown(cmp), summary.as_json(cmp), summary.headline(cmp),
                     cmp.regressed, comparison=cmp)


def judge_history(runs: list[Run], calibration: dict | None = None, min_effect: float = DEFAULT_MIN_EFFECT,
                  window: int = DEFAULT_WINDOW, force: bool = False, ab: Comparison | None = None) -> Judgement:
    """`runs`: enough for a history (callers say `history.too_few` themselves). `ab`: a same-day
    interleaved A/B (base: the previous stack) that settles the newest run's suspicions."""
    from reports.history import analyse, confirm_with_ab
    hist = analyse(runs, calibration=calibration, min_effect=min_effect, window=window)
    if hist.judged.mismatch and not force:
        return Judgement(refused="setups differ across the history (--force to use them anyway): " + hist.judged.mismatch[0],
                         history=hist)
    prefix = ""
    if ab is not None:
        suspected = sum(c.verdict.startswith("suspected") for c in hist.suspected.cells)
        prefix = f"# same-day A/B: confirmed {confirm_with_ab(hist, ab)} of {suspected} suspected cells\n"
    as_json = {**summary.as_json(hist.judged), "runs": [r.path for r in hist.runs],
               "change_at": {f"{k[0].label()} {k[1]} B": hist.runs[i].path for k, i in hist.change_at.items() if i >= 0},
               "suspected": summary.as_json(hist.suspected)["cells"]}
    return Judgement(prefix + summary.history_text(hist), summary.history_markdown(hist), as_json,
                     summary.headline(hist.judged), hist.regressed, history=hist)


def dumps(judgement: Judgement) -> str:
    return json.dumps(judgement.as_json, indent=1)
