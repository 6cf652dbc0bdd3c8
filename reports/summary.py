"""Comparisons and calibrations as text people read: terminal, Markdown for CI comments, JSON."""
from __future__ import annotations

import html
import math
import re
import textwrap
from collections import Counter

import numpy as np

from collectives.sizes import format_size
from kinds import sized
from reports.canary import figure
from reports.change_points import MIN_RUNS, MIN_SEGMENT
from reports.compare import Comparison, SizeRange
from reports.estimators import describe
from reports.history import MACHINE_ALPHA, MACHINE_MIN_EFFECT, MACHINE_NIGHTS, History, night
from schema.calibration import Calibration
from schema.judgement import (
    IMPROVEMENT,
    INCONCLUSIVE,
    MACHINE_IMPROVEMENT,
    MACHINE_REGRESSION,
    NO_CHANGE,
    REGRESSION,
    STANDING_IMPROVEMENT,
    STANDING_REGRESSION,
    SUSPECTED_IMPROVEMENT,
    SUSPECTED_REGRESSION,
    Cause,
    Samples,
    Verdict,
    VerdictKind,
)
from schema.results import Series, key_order

MARKDOWN_LIMIT = 60_000   # GitHub comments stop at 65,536 characters
VERDICTS = (REGRESSION, IMPROVEMENT, SUSPECTED_REGRESSION, SUSPECTED_IMPROVEMENT, NO_CHANGE, INCONCLUSIVE)   # a compare's counts
HISTORY_VERDICTS = (REGRESSION, IMPROVEMENT, MACHINE_REGRESSION, MACHINE_IMPROVEMENT, NO_CHANGE, INCONCLUSIVE,
                    STANDING_REGRESSION, STANDING_IMPROVEMENT)
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~>-])")


def comment(line: str) -> list[str]:
    """One '# ' line of a summary within 100 columns, carried on to '#   ' lines (a session prints it)."""
    return textwrap.wrap(f"# {line}", 100, subsequent_indent="#   ", break_long_words=False,
                         break_on_hyphens=False) or [f"# {line}"]


def md(text) -> str:
    """A recorded string made inert for Markdown: one line, HTML-escaped, Markdown punctuation
    backslashed, so a label cannot start a heading, a comment, a link or an image."""
    one_line = " ".join(str(text).split())
    return _MD_SPECIAL.sub(r"\\\1", html.escape(one_line, quote=False))


def effect_text(series: Series, ratio: float, low: float, high: float) -> str:
    """A sized kind speaks busbw (higher is better, busbw ~ 1/time); layers and tuning steps speak time."""
    if not sized(series):
        return f"time {ratio - 1:+.1%} [{low - 1:+.1%}, {high - 1:+.1%}]"
    return f"busbw {1 / ratio - 1:+.1%} [{1 / high - 1:+.1%}, {1 / low - 1:+.1%}]"


def sizes_text(first: int, last: int) -> str:
    """'4 KiB', or '4 KiB-1 MiB' for a span of sizes."""
    return format_size(first) if first == last else f"{format_size(first)}-{format_size(last)}"


def range_text(r: SizeRange) -> str:
    """One size range (compare.conclude) as people read it."""
    sizes = "" if r.first == 0 else f" {sizes_text(r.first, r.last)}"
    return f"{r.series.label()}{sizes}: {effect_text(r.series, r.ratio, r.low, r.high)}"


def range_lines(cmp: Comparison, kind: VerdictKind) -> list[str]:
    return [range_text(r) for r in cmp.ranges.get(kind, [])]


def section_lines(sections: list[tuple[str, list[str]]]) -> list[str]:
    """Each (label, lines) as 'label:' and its lines indented under it."""
    return [part for label, lines in sections for part in [f"{label}:", *(f"  {line}" for line in lines)]]


def counted(cells, kinds: tuple[VerdictKind, ...]) -> str:
    """'N regression, N improvement, ...': the cells of each kind, in the order given."""
    counts = Counter(c.outcome.kind for c in cells)
    return ", ".join(f"{counts.get(k, 0)} {k.text()}" for k in kinds)


SECTIONS = (("REGRESSIONS", REGRESSION), ("improvements", IMPROVEMENT),
            ("suspected regressions (one launch a side: not confirmed, they do not fail the job)", SUSPECTED_REGRESSION),
            ("suspected improvements (one launch a side)", SUSPECTED_IMPROVEMENT))


def settle_command(cmp: Comparison) -> str:
    """The sweep that would settle the suspected cells: only their backends, ops and sizes, with
    launches as the sample; run it for both stacks and compare again (or as one interleaved A/B)."""
    cells = [c for c in cmp.cells if c.outcome.suspected and sized(c.series)]
    if not cells:
        return "pytest benches/ --benchmark --repeat 3" if any(c.outcome.suspected for c in cmp.cells) else ""
    pick = lambda name: ",".join(sorted({str(getattr(c.series, name)) for c in cells}))  # noqa: E731
    sizes = ",".join(format_size(s) for s in sorted({c.size for c in cells}))
    return (f"pytest benches/ --benchmark --repeat 3 --backend {pick('backend')} --ops {pick('op')} "
            f"--dtypes {pick('dtype')} --sizes {sizes}")


def headline(cmp: Comparison) -> str:
    """One line: the gate's verdict and its reason. "No change" (every cell confirmed within the
    minimum effect) and "inconclusive" (not enough evidence) never read alike."""
    counts = Counter(c.outcome.kind for c in cmp.cells)
    if cmp.regressed:
        ranges = cmp.ranges[REGRESSION]
        return f"REGRESSION in {len(ranges)} size ranges, first: {range_text(ranges[0])}"
    suspected, cells = counts.get(SUSPECTED_REGRESSION, 0), len(cmp.cells) + len(cmp.unplaced)
    tail = (f"{counts.get(NO_CHANGE, 0)} no change, {counts.get(IMPROVEMENT, 0)} improved"
            + (f", {suspected} suspected from one launch a side" if suspected else "") + f" of {cells} cells")
    if cmp.inconclusive:
        return (f"INCONCLUSIVE: no confirmed regression, but {cmp.inconclusive} of {cells} cells lack the "
                f"evidence to say no change ({tail})")
    return f"no regression: every cell decided ({tail})"


def detectable_lines(cmp: Comparison) -> list[str]:
    """What the samples taken could have seen, per backend and size band (80% power)."""
    return [f"{b.band.split(' (')[0]}{' ' + sizes_text(b.first, b.last) if b.sized else ''}: could have seen "
            + ("nothing (one sample a side)" if not math.isfinite(b.detectable) else f"a {b.detectable:.0%} change")
            + f" ({b.cells} cells)" for b in cmp.bands]


def statistic_line(estimator: str) -> str:
    """Which statistic of each launch's rounds the verdicts rest on (tables always show medians)."""
    return (f"verdicts rest on each launch's {describe(estimator)} per-op time over its rounds (--estimator "
            f"{estimator}); tables show medians")


def budget_text(b: dict, launches: str = "", no_wall: str = "no wall recorded") -> str:
    """What a verdict cost (compare.budget): launches, timed seconds, wall-clock and cluster time."""
    if not b:
        return ""
    if not launches:
        la, lb = b["launches"]
        launches = f"{la} launches a side" if la == lb else f"{la} launches (baseline) and {lb} (candidate)"
    wall = f"wall {b['wall_s']:.0f} s" if b.get("wall_s") is not None else no_wall
    return (f"budget: {launches}, {b['ranks']} ranks, timed rounds {b['timed_s']:.1f} s, {wall}: "
            f"{b['cluster_rank_s']:.0f} rank-s of cluster time")


def text(cmp: Comparison) -> str:
    kinds = Counter(c.samples for c in cmp.cells)
    named = cmp.base_label and cmp.base_label != cmp.cand_label   # the runs' names say more than their paths
    out = [f"# compare {cmp.base}", f"#      -> {cmp.cand}",
           *([f"# baseline:  {cmp.base_label}", f"# candidate: {cmp.cand_label}  (effects: candidate against baseline)"]
             if named else []),
           f"# {len(cmp.cells) + len(cmp.unplaced)} cells: " + counted(cmp.cells, VERDICTS)
           + (f",\n#   {len(cmp.unplaced)} not judged (placement)" if cmp.unplaced else ""),
           "# samples: " + ", ".join(f"{n} cells by {k}" for k, n in sorted(kinds.items()))]
    if kinds.get(Samples.ROUNDS):
        out += ["#   (one launch a side: its rounds are not independent samples of a stack, so those cells are at most",
                "#   'suspected' and never fail the job)"]
    stat = {"median": "medians", "min": "minima"}.get(cmp.estimator, "10th percentiles")   # p10, fastest
    out += [f"# effect: time ratio, 95% CI (paired launches: 20%-trimmed paired t on log launch {stat}; launches:",
            "#   Welch t; rounds: Hodges-Lehmann); Benjamini-Hochberg across the sweep",
            f"# {statistic_line(cmp.estimator)}"]
    if cmp.budget:
        out.append(f"# {budget_text(cmp.budget)}")
    out += [part for line in [*cmp.placement, *cmp.cpu_wait] for part in comment(line)]
    if cmp.calibration:
        out.append(f"# {cmp.calibration}")
    out += [f"# {line}" for line in detectable_lines(cmp)]
    out += section_lines([(label, lines) for label, verdict in SECTIONS if (lines := range_lines(cmp, verdict))])
    if cmp.inconclusive:
        out += [f"# INCONCLUSIVE: {cmp.inconclusive} cells lack the evidence to say no change. Not a pass: add launches",
                "#   (--repeat, --ab-until-decided), or accept them with --inconclusive pass"]
    if settle := settle_command(cmp):
        wrapped = textwrap.wrap(settle, 100, break_long_words=False, break_on_hyphens=False)
        out += ["# to settle the suspected cells, run for both stacks and compare those runs:",
                "#   " + " \\\n#   ".join(wrapped),
                "#   (or add --repeat 6 --ab-env VAR=VALUE / --ab-source OTHER/set_env.sh: one interleaved A/B)"]
    if isolated := sum(c.isolated for c in cmp.cells):
        out.append(f"# {isolated} isolated cells left inconclusive (no neighbouring size agreed)")
    if cmp.only_base or cmp.only_cand:
        out.append(f"# unmatched cells: {len(cmp.only_base)} only in baseline, {len(cmp.only_cand)} only in candidate")
    return "\n".join(out)


def markdown(cmp: Comparison) -> str:
    counts = Counter(c.outcome.kind for c in cmp.cells)
    title = "regression" if cmp.regressed else "inconclusive" if cmp.inconclusive else "no regression"
    head = [f"### hccl-bench: {title}", "", md(headline(cmp)), "",
            f"Baseline: {md(cmp.base_label or cmp.base)}; candidate: {md(cmp.cand_label or cmp.cand)}", "",
            "| verdict | cells |", "|---|---|"] + [f"| {k.text()} | {counts.get(k, 0)} |" for k in VERDICTS]
    head += ["", "Could have seen (80% power, the samples taken): "
             + "; ".join(md(line) for line in detectable_lines(cmp)), "", md(statistic_line(cmp.estimator).capitalize())]
    if cmp.budget:
        head += ["", md(budget_text(cmp.budget).capitalize())]
    head += [f"\n{md(line[:1].upper() + line[1:])}" for line in [*cmp.placement, *cmp.cpu_wait]]
    body = [part for label, verdict in SECTIONS if (lines := range_lines(cmp, verdict))
            for part in ["", f"**{label[0].upper() + label[1:].lower()}**", "", *(f"- {md(line)}" for line in lines)]]
    if settle := settle_command(cmp):
        body += ["", f"To settle the suspected cells, run for both stacks: `{settle}`"]
    return _within_limit("\n".join(head + body), "truncated; see the HTML report")


def _within_limit(text_: str, why: str) -> str:
    """A Markdown comment cut at its last whole line within MARKDOWN_LIMIT, saying so."""
    return text_ if len(text_) <= MARKDOWN_LIMIT else text_[:MARKDOWN_LIMIT].rsplit("\n", 1)[0] + f"\n- … ({why})"


def as_json(cmp: Comparison) -> dict:
    """Each cell's verdict as its words ("verdict") and its typed fields (schema/judgement.Verdict.to_json)."""
    return {"base": cmp.base, "cand": cmp.cand, "base_label": cmp.base_label, "cand_label": cmp.cand_label,
            "regressed": cmp.regressed, "inconclusive": cmp.inconclusive, "headline": headline(cmp),
            "estimator": cmp.estimator, "statistic": statistic_line(cmp.estimator), "budget": cmp.budget,
            "detectable": [{**vars(b), "detectable": _finite(b.detectable)} for b in cmp.bands],
            "mismatch": cmp.mismatch, "placement": cmp.placement, "cpu_wait": cmp.cpu_wait,
            "unplaced": [{"series": series.to_json(), "size": size} for series, size in cmp.unplaced],
            "regressions": range_lines(cmp, REGRESSION), "improvements": range_lines(cmp, IMPROVEMENT),
            "suspected_regressions": range_lines(cmp, SUSPECTED_REGRESSION),
            "cells": [{"series": c.series.to_json(), "size": c.size, "ratio": c.ratio, "low": c.low, "high": c.high,
                       "p": c.p, "q": c.q, "samples": c.samples, "verdict": c.outcome.text(), "note": c.note,
                       "min_effect": c.min_effect, "detectable": _finite(c.detectable), "metrics": c.metrics,
                       **c.outcome.to_json()}
                      for c in cmp.cells]}


def _finite(value: float) -> float | None:
    """JSON has no infinity: a change nothing could have seen is null."""
    return value if math.isfinite(value) else None


def calibration_text(cal: Calibration) -> str:
    out = [f"# A/A calibration {cal.a} vs {cal.b} ({cal.samples})",
           "# noise: 95th percentile of |A/A ratio - 1|; CI missed: share of cells whose 95% CI excluded 1 (~5% is honest)",
           f"#{'backend and band':>28} {'cells':>6} {'noise':>8} {'CI missed':>10} {'min effect':>11}"]
    out += [f" {name:>28} {b.cells:>6} {b.noise:>8.1%} {b.ci_missed:>10.0%} {b.min_effect:>11.1%}"
            for name, b in cal.bands.items()]
    return "\n".join(out)


def machine_reason(verdict: Verdict, note: str) -> tuple[str, str]:
    """A machine change as (what the headline says it did, the figures behind it: the canary's step)."""
    if verdict.cause is Cause.CANARY:
        return "moved with the canary", note
    if verdict.cause is Cause.STACKS_ALIKE:
        return "ran alike on both stacks", "the same-night A/B found no change between them"
    return "began on nights that kept their stack", "each night ran the stack of the night before, nothing recorded changed"


QUIET_LINES = 12   # machine steps below the alert rule listed in the text; the JSON holds them all


def _history_lines(hist: History) -> tuple[str, list[tuple[str, list[str]]], list[str]]:
    """(headline, [(section, lines)], what changed) shared by the terminal and Markdown forms."""
    runs = hist.runs
    sections, changed_at = [], []
    for label, kind in (("REGRESSIONS", REGRESSION), ("improvements", IMPROVEMENT),
                        ("MACHINE CHANGES (the canary moved with them, the same-night A/B ran both stacks "
                         "alike, or every night since kept its stack: the machine, not the software stack)", MACHINE_REGRESSION),
                        (f"{MACHINE_IMPROVEMENT.text()}s (the canary moved with them, or every night since kept its stack)",
                         MACHINE_IMPROVEMENT),
                        (f"{STANDING_REGRESSION.text()}s (began before the last {hist.window} runs)", STANDING_REGRESSION),
                        (f"{STANDING_IMPROVEMENT.text()}s", STANDING_IMPROVEMENT)):
        lines = []
        for r in hist.judged.ranges.get(kind, []):
            why = next((c.note for c in hist.judged.cells if c.series == r.series and r.first <= c.size <= r.last
                        and c.outcome.machine), "")
            lines.append(f"{range_text(r)} since {night(runs[r.since])}" + (f": {why}" if why else ""))
            changed_at.append(r.since)
        if lines:
            sections.append((label, lines))
    quiet = [f"{c.series.label()} {format_size(c.size)}: {hist.below_alert[c.key]}" for c in hist.judged.cells
             if c.key in hist.below_alert]
    if len(quiet) > QUIET_LINES:   # a step across a whole sweep would list every cell
        quiet = quiet[:QUIET_LINES] + [f"... and {len(quiet) - QUIET_LINES} more cells (the JSON lists them all)"]
    if quiet:
        sections.append(("machine steps below the machine-alert rule (inconclusive, no alert: a step that held "
                         f"{MACHINE_NIGHTS} nights, >= {MACHINE_MIN_EFFECT:.0%}, past what its nights could have seen, "
                         f"p x cells < {MACHINE_ALPHA:g}, a neighbouring size alike)", quiet))
    sections += [(f"{kind.text()}s in the newest run alone (the next run or a same-day A/B confirms)", lines)
                 for kind in (SUSPECTED_REGRESSION, SUSPECTED_IMPROVEMENT) if (lines := range_lines(hist.suspected, kind))]
    renamed = [f"{word} {runs[at].label}: {series.label()}" for word, changes in (("began in", hist.began),
               ("ended after", hist.ended)) for series, at in sorted(changes.items(), key=lambda kv: (kv[1], kv[0].sort_key()))]
    if renamed:
        sections.append(("series that began or ended (not judged across the change: see what changed)", renamed))
        changed_at += sorted(({*hist.began.values()} | {at + 1 for at in hist.ended.values()}) - set(changed_at))
    what = [f"what changed from {runs[at - 1].label} to {runs[at].label}: "
            + ("; ".join(f"{k}: {' -> '.join(v)}" for k, v in diff) if (diff := hist.changes.get(at, [])) else
               "nothing recorded (same versions and environment): the machine's state, or something not recorded")
            for at in dict.fromkeys(changed_at)]
    headline = (f"{len(runs)} runs {runs[0].started[:10]}..{runs[-1].started[:10]}; a change needs "
                f"{MIN_SEGMENT} runs at its level, counts if it began in the last {hist.window}")
    return headline, sections, what


def history_headline(hist: History) -> str:
    """One line: a software regression, a change of the machine (with the canary's step), or the
    comparison's own headline; the two kinds are never read alike."""
    if not hist.judged.cells:
        left = f"; {len(hist.left_out)} noisy nights left out" if hist.left_out else ""
        return f"nothing judged yet: {hist.too_short} cells have fewer than {MIN_RUNS} usable nights{left}"
    machine = [r for k in (MACHINE_REGRESSION, MACHINE_IMPROVEMENT) for r in hist.judged.ranges.get(k, [])]
    reasons = [machine_reason(c.outcome, c.note) for c in hist.judged.cells if c.outcome.machine]
    steps = "; ".join(dict.fromkeys(step for _, step in reasons))
    why = " or ".join(dict.fromkeys(what for what, _ in reasons))
    if hist.regressed:
        return headline(hist.judged) + (f" (and {len(machine)} size ranges {why}: the machine)" if machine else "")
    if machine:   # faster only: reported, never a failed job
        what = "MACHINE CHANGED" if hist.machine_regressed else "machine improvement (does not fail the job)"
        return f"{what}: {len(machine)} size ranges {why} ({steps}), first: {range_text(machine[0])}; no software regression"
    return headline(hist.judged)


def canary_lines(hist: History, where: bool = True) -> list[str]:
    """The canary as the history saw it: the newest night's figures and usual spread, its steps, the
    nights left out as noisy; `where`: then where the cores were and what waited for a CPU."""
    view, runs = hist.canary, hist.runs
    tail = placement_lines(hist) + hist.cpu_wait if where else []
    if not view.seconds:
        return ["canary: none recorded in these runs (timed single-stack sweeps record one): noisy nights and machine "
                "changes cannot be told", *tail]
    newest = [f"{name} {figure(name, view.workloads[name], secs[-1])}" for name, secs in view.seconds.items() if secs[-1]]
    spread = ", ".join(f"{name} {np.expm1(sd):.0%}" for name, sd in view.spread.items())
    out = [f"canary ({view.nights} nights): newest " + (", ".join(newest) or "not recorded")
           + (f"; usual night-to-night spread {spread}" if spread else "")]
    out += [f"canary step: {step.text(night(runs[step.at]))}" for step in view.steps]
    out += [f"noisy night left out of every cell: {night(runs[i])}: {why}" for i, why in hist.left_out.items()]
    return out + tail


def placement_lines(hist: History) -> list[str]:
    """Where ranks 0 and 1's cores usually were and what ran elsewhere (reports/placement.py); nothing
    when every case ran in one placement or none recorded it."""
    if not (hist.placement and hist.placement.left_out):
        return []
    out = [hist.placement.text()]
    if hist.tonight_elsewhere:
        out.append(f"the newest night ran in another placement: {hist.tonight_elsewhere} cells not judged tonight, they wait "
                   "for a night in the usual one (a same-night A/B judges tonight's stack round by round)")
    cells = [f"{series.label()} {format_size(size)} {n}" for (series, size), n in sorted(
        hist.placed_out.items(), key=lambda kv: key_order(kv[0]))]
    if cells:
        more = f", and {len(cells) - QUIET_LINES} more cells" if len(cells) > QUIET_LINES else ""
        where = "near (none in the near round trip's own mode)" if hist.placement.fastest else "in the usual placement"
        out.append(f"nights with no launch {where}, left out of the cell: " + ", ".join(cells[:QUIET_LINES]) + more)
    return out


def canary_json(hist: History) -> dict:
    view = hist.canary
    return {"nights": view.nights, "seconds": view.seconds, "spread": view.spread,
            "steps": [{**vars(s), "run": hist.runs[s.at].path} for s in view.steps],
            "noisy": {hist.runs[i].path: why for i, why in hist.left_out.items()},
            "cpu_wait": hist.cpu_wait,
            "placement": {**hist.placement.record(), "cells_with_nights_left_out": len(hist.placed_out),
                          "cell_nights_left_out": sum(hist.placed_out.values()),
                          "newest_night_cells_left_out": hist.tonight_elsewhere} if hist.placement else None}


def history_budget(hist: History) -> str:
    """What the history's verdict rests on: its nights, their launches and cluster time."""
    return budget_text(hist.budget, f"{len(hist.runs)} nights of up to {max(hist.budget['launches'], default=0)} launches",
                       "no wall recorded on every night")


def history_detectable_lines(hist: History) -> list[str]:
    """What the history could have seen, per backend and band, from its own night-to-night spread."""
    return ([f"could have seen (a new level held {MIN_SEGMENT} nights, 80% power, from this history's own "
             "night-to-night spread):"] + [f"  {line}" for line in detectable_lines(hist.judged)]) if hist.judged.cells else []


def history_text(hist: History) -> str:
    headline, sections, what = _history_lines(hist)
    out = [f"# history: {headline}", *([f"# {history_headline(hist)}"] if hist.machine_changed and not hist.regressed else []),
           f"# {len(hist.judged.cells)} cells: " + counted(hist.judged.cells, HISTORY_VERDICTS)
           + (f"; {hist.too_short} cells in fewer than {MIN_RUNS} runs not judged" if hist.too_short else ""),
           "# change points: binary segmentation of log time (pooled t, Bonferroni over the splits tried);",
           "#   effect: level after / level before with its 95% CI, Benjamini-Hochberg across the sweep",
           f"# {statistic_line(hist.estimator)}"]
    if hist.judged.calibration:
        out.append(f"# {hist.judged.calibration}")
    out += [f"# {line}" for line in [history_budget(hist), *history_detectable_lines(hist), *canary_lines(hist, where=False)]]
    out += [part for line in [*placement_lines(hist), *hist.cpu_wait] for part in comment(line)]
    out += section_lines(sections)
    out += [f"# {line}" for line in what]
    return "\n".join(out)


def history_markdown(hist: History) -> str:
    headline, sections, what = _history_lines(hist)
    title = ("regression" if hist.regressed else "machine changed" if hist.machine_regressed else
             "machine improvement (passes)" if hist.machine_changed else "no new regression")
    out = [f"### hccl-bench nightly: {title}", "", md(history_headline(hist)), "", md(headline), "",
           md(statistic_line(hist.estimator).capitalize())]
    out += [""] + [f"- {md(line.strip())}" for line in [history_budget(hist), *history_detectable_lines(hist),
                                                        *canary_lines(hist)]]
    for label, lines in sections:
        out += ["", f"**{md(label[0].upper() + label[1:])}**", ""] + [f"- {md(line)}" for line in lines]
    out += [""] + [f"_{md(line)}_" for line in what] if what else []
    return _within_limit("\n".join(out), "truncated")
