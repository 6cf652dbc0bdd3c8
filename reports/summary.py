"""Comparisons and calibrations as text people read: terminal, Markdown for CI comments, JSON."""
from __future__ import annotations

import html
import math
import re
import textwrap
from collections import Counter

import numpy as np

from collectives.sizes import format_size
from reports.compare import Comparison, band_key, compare, detectable_bands, size_ranges
from reports.estimators import DEFAULT_ESTIMATOR, describe
from schema.results import Run, Series

MARKDOWN_LIMIT = 60_000   # GitHub comments stop at 65,536 characters
VERDICTS = ("regression", "improvement", "suspected regression", "suspected improvement", "no change", "inconclusive")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~>-])")


def md(text) -> str:
    """A recorded string made inert for Markdown: one line, HTML-escaped, Markdown punctuation
    backslashed, so a label cannot start a heading, a comment, a link or an image."""
    one_line = " ".join(str(text).split())
    return _MD_SPECIAL.sub(r"\\\1", html.escape(one_line, quote=False))


def effect_text(series: Series, ratio: float, low: float, high: float) -> str:
    """Collectives speak busbw (higher is better, busbw ~ 1/time); layers and tuning steps speak time."""
    if series.kind != "collective":
        return f"time {ratio - 1:+.1%} [{low - 1:+.1%}, {high - 1:+.1%}]"
    return f"busbw {1 / ratio - 1:+.1%} [{1 / high - 1:+.1%}, {1 / low - 1:+.1%}]"


def range_text(r: dict) -> str:
    """One size range of size_ranges() as people read it."""
    sizes = format_size(r["first"]) if r["first"] == r["last"] else f"{format_size(r['first'])}-{format_size(r['last'])}"
    sizes = "" if r["first"] == 0 else f" {sizes}"
    return f"{r['series'].label()}{sizes}: {effect_text(r['series'], r['ratio'], r['low'], r['high'])}"


def range_lines(cmp: Comparison, verdict: str) -> list[str]:
    return [range_text(r) for r in size_ranges(cmp, verdict)]


SECTIONS = (("REGRESSIONS", "regression"), ("improvements", "improvement"),
            ("suspected regressions (one launch a side: not confirmed, they do not fail the job)", "suspected regression"),
            ("suspected improvements (one launch a side)", "suspected improvement"))


def settle_command(cmp: Comparison) -> str:
    """The sweep that would settle the suspected cells: only their backends, ops and sizes, with
    launches as the sample; run it for both stacks and compare again (or as one interleaved A/B)."""
    cells = [c for c in cmp.cells if c.verdict.startswith("suspected") and c.series.kind == "collective"]
    if not cells:
        return "pytest benches/ --benchmark --repeat 3" if any(c.verdict.startswith("suspected") for c in cmp.cells) else ""
    pick = lambda name: ",".join(sorted({str(getattr(c.series, name)) for c in cells}))  # noqa: E731
    sizes = ",".join(format_size(s) for s in sorted({c.size for c in cells}))
    return (f"pytest benches/ --benchmark --repeat 3 --backend {pick('backend')} --ops {pick('op')} "
            f"--dtypes {pick('dtype')} --sizes {sizes}")


def headline(cmp: Comparison) -> str:
    """One line: the gate's verdict and its reason. "No change" (every cell confirmed within the
    minimum effect) and "inconclusive" (not enough evidence) never read alike."""
    counts = Counter(c.verdict for c in cmp.cells)
    if cmp.regressed:
        ranges = size_ranges(cmp, "regression")
        return f"REGRESSION in {len(ranges)} size ranges, first: {range_text(ranges[0])}"
    suspected = counts.get("suspected regression", 0)
    tail = (f"{counts.get('no change', 0)} no change, {counts.get('improvement', 0)} improved"
            + (f", {suspected} suspected from one launch a side" if suspected else "") + f" of {len(cmp.cells)} cells")
    if cmp.inconclusive:
        return (f"INCONCLUSIVE: no confirmed regression, but {cmp.inconclusive} of {len(cmp.cells)} cells lack the "
                f"evidence to say no change ({tail})")
    return f"no regression: every cell decided ({tail})"


def detectable_lines(cmp: Comparison) -> list[str]:
    """What the samples taken could have seen, per backend and size band (80% power)."""
    out = []
    for b in detectable_bands(cmp):
        span = format_size(b["first"]) + ("" if b["first"] == b["last"] else f"-{format_size(b['last'])}")
        sizes = f" {span}" if b["kind"] == "collective" else ""
        seen = "nothing (one sample a side)" if not math.isfinite(b["detectable"]) else f"a {b['detectable']:.0%} change"
        out.append(f"{b['band'].split(' (')[0]}{sizes}: could have seen {seen} ({b['cells']} cells)")
    return out


def statistic_line(estimator: str) -> str:
    """Which statistic of each launch's rounds the verdicts rest on (tables always show medians)."""
    return (f"verdicts rest on each launch's {describe(estimator)} per-op time over its rounds (--estimator "
            f"{estimator}); tables show medians")


def budget_text(b: dict) -> str:
    """What a verdict cost (compare.budget): launches, timed seconds, wall-clock and cluster time."""
    if not b:
        return ""
    la, lb = b["launches"]
    launches = f"{la} launches a side" if la == lb else f"{la} launches (baseline) and {lb} (candidate)"
    wall = f"wall {b['wall_s']:.0f} s" if b.get("wall_s") is not None else "no wall recorded"
    return (f"budget: {launches}, {b['ranks']} ranks, timed rounds {b['timed_s']:.1f} s, {wall}: "
            f"{b['cluster_rank_s']:.0f} rank-s of cluster time")


def sides_lines(cmp: Comparison) -> list[str]:
    """Which run is which, where their names say more than the paths above."""
    if not cmp.base_label or cmp.base_label == cmp.cand_label:
        return []
    return [f"# baseline:  {cmp.base_label}", f"# candidate: {cmp.cand_label}  (effects: candidate against baseline)"]


def text(cmp: Comparison) -> str:
    counts = Counter(c.verdict for c in cmp.cells)
    kinds = Counter(c.samples for c in cmp.cells)
    out = [f"# compare {cmp.base}", f"#      -> {cmp.cand}", *sides_lines(cmp),
           f"# {len(cmp.cells)} cells: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS),
           "# samples: " + ", ".join(f"{n} cells by {k}" for k, n in sorted(kinds.items()))]
    if kinds.get("rounds"):
        out.append("#   (one launch a side: its rounds are not independent samples of a stack, so those cells "
                   "are at most")
        out.append("#   'suspected' and never fail the job)")
    stat = {"median": "medians", "p10": "10th percentiles", "min": "minima"}.get(cmp.estimator, cmp.estimator)
    out += [f"# effect: time ratio, 95% CI (paired launches: 20%-trimmed paired t on log launch {stat}; launches:",
            "#   Welch t; rounds: Hodges-Lehmann); Benjamini-Hochberg across the sweep",
            f"# {statistic_line(cmp.estimator)}"]
    if cmp.budget:
        out.append(f"# {budget_text(cmp.budget)}")
    if cmp.calibration:
        out.append(f"# {cmp.calibration}")
    out += [f"# {line}" for line in detectable_lines(cmp)]
    for label, verdict in SECTIONS:
        lines = range_lines(cmp, verdict)
        if lines:
            out += [f"{label}:"] + [f"  {line}" for line in lines]
    if cmp.inconclusive:
        out += [f"# INCONCLUSIVE: {cmp.inconclusive} cells lack the evidence to say no change. Not a pass: add launches",
                "#   (--repeat, --ab-until-decided), or accept them with --inconclusive pass"]
    if settle := settle_command(cmp):
        wrapped = textwrap.wrap(settle, 100, break_long_words=False, break_on_hyphens=False)
        out += ["# to settle the suspected cells, run for both stacks and compare those runs:"]
        out += [f"#   {part}" + (" \\" if i < len(wrapped) - 1 else "") for i, part in enumerate(wrapped)]
        out += ["#   (or add --repeat 6 --ab-env VAR=VALUE / --ab-source OTHER/set_env.sh: one interleaved A/B)"]
    isolated = [c for c in cmp.cells if c.note.startswith("isolated")]
    if isolated:
        out.append(f"# {len(isolated)} isolated cells left inconclusive (no neighbouring size agreed)")
    if cmp.only_base or cmp.only_cand:
        out.append(f"# unmatched cells: {len(cmp.only_base)} only in baseline, {len(cmp.only_cand)} only in candidate")
    return "\n".join(out)


def markdown(cmp: Comparison) -> str:
    counts = Counter(c.verdict for c in cmp.cells)
    title = "regression" if cmp.regressed else "inconclusive" if cmp.inconclusive else "no regression"
    head = [f"### hccl-bench: {title}", "", md(headline(cmp)), "",
            f"Baseline: {md(cmp.base_label or cmp.base)}; candidate: {md(cmp.cand_label or cmp.cand)}", "",
            "| verdict | cells |", "|---|---|"] + [f"| {v} | {counts.get(v, 0)} |" for v in VERDICTS]
    head += ["", "Could have seen (80% power, the samples taken): "
             + "; ".join(md(line) for line in detectable_lines(cmp)), "", md(statistic_line(cmp.estimator).capitalize())]
    if cmp.budget:
        head += ["", md(budget_text(cmp.budget).capitalize())]
    body = []
    for label, verdict in SECTIONS:
        lines = range_lines(cmp, verdict)
        if lines:
            body += ["", f"**{label[0].upper() + label[1:].lower()}**", ""] + [f"- {md(line)}" for line in lines]
    if settle := settle_command(cmp):
        body += ["", f"To settle the suspected cells, run for both stacks: `{settle}`"]
    text_ = "\n".join(head + body)
    if len(text_) > MARKDOWN_LIMIT:
        text_ = text_[:MARKDOWN_LIMIT].rsplit("\n", 1)[0] + "\n- … (truncated; see the HTML report)"
    return text_


def as_json(cmp: Comparison) -> dict:
    return {"base": cmp.base, "cand": cmp.cand, "base_label": cmp.base_label, "cand_label": cmp.cand_label,
            "regressed": cmp.regressed, "inconclusive": cmp.inconclusive, "headline": headline(cmp),
            "estimator": cmp.estimator, "statistic": statistic_line(cmp.estimator), "budget": cmp.budget,
            "detectable": [{**b, "detectable": _finite(b["detectable"])} for b in detectable_bands(cmp)],
            "mismatch": cmp.mismatch,
            "regressions": range_lines(cmp, "regression"), "improvements": range_lines(cmp, "improvement"),
            "suspected_regressions": range_lines(cmp, "suspected regression"),
            "cells": [{"series": c.series.to_json(), "size": c.size, "ratio": c.ratio, "low": c.low, "high": c.high,
                       "p": c.p, "q": c.q, "samples": c.samples, "verdict": c.verdict, "note": c.note,
                       "min_effect": c.min_effect, "detectable": _finite(c.detectable), "metrics": c.metrics}
                      for c in cmp.cells]}


def _finite(value: float) -> float | None:
    """JSON has no infinity: a change nothing could have seen is null."""
    return value if math.isfinite(value) else None


def calibrate(a: Run, b: Run, estimator: str = DEFAULT_ESTIMATOR) -> dict:
    """A/A: per size band, how far two runs of the same stack drift, how often the 95% CI misses
    (about 5% when the sampling is honest), and the smallest minimum effect under which none of
    these A/A cells would have been flagged: noise the intervals already carry is not charged twice.
    Made with one estimator; a comparison judging another does not apply it."""
    cmp = compare(a, b, min_effect=0.0, estimator=estimator)
    kinds = sorted({c.samples for c in cmp.cells})
    bands = {}
    for key in sorted({band_key(c.series, c.size) for c in cmp.cells}):
        cells = [c for c in cmp.cells if band_key(c.series, c.size) == key]
        drift = np.abs(np.log([c.ratio for c in cells]))
        missed = [max(c.ratio, 1 / c.ratio) - 1 for c in cells if c.low > 1 or c.high < 1]
        bands[key] = {"cells": len(cells), "noise": float(np.exp(np.percentile(drift, 95)) - 1),
                      "ci_missed": len(missed) / len(cells),
                      "min_effect": math.ceil(max(missed, default=0.0) * 1000) / 1000}   # up to the next 0.1%
    return {"a": a.path, "b": b.path, "bands": bands, "samples": kinds[0] if len(kinds) == 1 else "mixed",
            "estimator": estimator,
            "method": "A/A: min effect per size band = the largest A/A effect whose 95% CI excluded no change"}


def calibration_text(cal: dict) -> str:
    out = [f"# A/A calibration {cal['a']} vs {cal['b']} ({cal.get('samples', 'launches')})",
           "# noise: 95th percentile of |A/A ratio - 1|; CI missed: share of cells whose 95% CI excluded 1 (~5% is honest)",
           f"#{'backend and band':>28} {'cells':>6} {'noise':>8} {'CI missed':>10} {'min effect':>11}"]
    for name, b in cal["bands"].items():
        out.append(f" {name:>28} {b['cells']:>6} {b['noise']:>8.1%} {b['ci_missed']:>10.0%} {b['min_effect']:>11.1%}")
    return "\n".join(out)


MACHINE_NOTES = ("canary", "the same-night A/B", "the stack stayed")   # why a change is the machine's (reports/history.py)


def machine_reason(note: str) -> tuple[str, str]:
    """A machine change's note as (what the headline says it did, the figures behind it)."""
    if note.startswith("canary"):
        return "moved with the canary", note
    if note.startswith("the same-night A/B"):
        return "ran alike on both stacks", "the same-night A/B found no change between them"
    return "began on nights that kept their stack", "each night ran the stack of the night before, nothing recorded changed"


def _history_lines(hist) -> tuple[str, list[tuple[str, list[str]]], list[str]]:
    """(headline, [(section, lines)], what changed) shared by the terminal and Markdown forms."""
    from reports.history import MIN_SEGMENT, change_run, changed_between
    runs = hist.runs
    sections, changed_at = [], []
    for label, verdict in (("REGRESSIONS", "regression"), ("improvements", "improvement"),
                           ("MACHINE CHANGES (the canary moved with them, the same-night A/B ran both stacks "
                            "alike, or every night since kept its stack: the machine, not the software stack)",
                            "machine regression"),
                           ("machine improvements (the canary moved with them, or every night since kept its stack)",
                            "machine improvement"),
                           (f"standing regressions (began before the last {hist.window} runs)", "standing regression"),
                           ("standing improvements", "standing improvement")):
        lines = []
        for r in size_ranges(hist.judged, verdict):
            at = change_run(hist, r["series"], r["first"], r["last"])
            why = next((c.note for c in hist.judged.cells if c.series == r["series"] and r["first"] <= c.size <= r["last"]
                        and c.note.startswith(MACHINE_NOTES)), "") if verdict.startswith("machine") else ""
            lines.append(f"{range_text(r)} since {runs[at].label} ({runs[at].started[:16]})" + (f": {why}" if why else ""))
            if at not in changed_at:
                changed_at.append(at)
        if lines:
            sections.append((label, lines))
    for verdict in ("suspected regression", "suspected improvement"):
        lines = range_lines(hist.suspected, verdict)
        if lines:
            sections.append((f"{verdict}s in the newest run alone (the next run or a same-day A/B confirms)", lines))
    renamed = [f"began in {runs[at].label}: {series.label()}" for series, at in
               sorted(hist.began.items(), key=lambda kv: (kv[1], kv[0].sort_key()))]
    renamed += [f"ended after {runs[at].label}: {series.label()}" for series, at in
                sorted(hist.ended.items(), key=lambda kv: (kv[1], kv[0].sort_key()))]
    if renamed:
        sections.append(("series that began or ended (not judged across the change: see what changed)", renamed))
        changed_at += sorted(({*hist.began.values()} | {at + 1 for at in hist.ended.values()}) - set(changed_at))
    what = []
    for at in changed_at:
        diff = changed_between(hist, at)
        what.append(f"what changed from {runs[at - 1].label} to {runs[at].label}: "
                    + ("; ".join(f"{k}: {' -> '.join(v)}" for k, v in diff) if diff else
                       "nothing recorded (same versions and environment): the machine's state, or something not recorded"))
    headline = (f"{len(runs)} runs {runs[0].started[:10]}..{runs[-1].started[:10]}; a change needs "
                f"{MIN_SEGMENT} runs at its level, counts if it began in the last {hist.window}")
    return headline, sections, what


def history_headline(hist) -> str:
    """One line: a software regression, a change of the machine (with the canary's step), or the
    comparison's own headline; the two kinds are never read alike."""
    if not hist.judged.cells:
        from reports.history import MIN_RUNS
        left = f"; {len(hist.left_out)} noisy nights left out" if hist.left_out else ""
        return f"nothing judged yet: {hist.too_short} cells have fewer than {MIN_RUNS} usable nights{left}"
    machine = [r for v in ("machine regression", "machine improvement") for r in size_ranges(hist.judged, v)]
    reasons = [machine_reason(c.note) for c in hist.judged.cells if c.verdict.startswith("machine ")]
    steps = "; ".join(dict.fromkeys(step for _, step in reasons))
    why = " or ".join(dict.fromkeys(what for what, _ in reasons))
    if hist.regressed:
        return headline(hist.judged) + (f" (and {len(machine)} size ranges {why}: the machine)" if machine else "")
    if machine:
        return (f"MACHINE CHANGED: {len(machine)} size ranges {why} ({steps}), first: "
                f"{range_text(machine[0])}; no software regression")
    return headline(hist.judged)


def night(run: Run) -> str:
    """A history's run as its lines name it: its label and when it started."""
    return f"{run.label} ({run.started[:16]})"


def canary_lines(hist) -> list[str]:
    """The canary as the history saw it: the newest night's figures and usual spread, its steps, the
    nights left out as noisy."""
    from reports.canary import figure
    view, runs = hist.canary, hist.runs
    if not view.seconds:
        return ["canary: none recorded in these runs (timed single-stack sweeps record one): noisy nights and "
                "machine changes cannot be told"]
    newest = [f"{name} {figure(name, view.meta[name], secs[-1])}" for name, secs in view.seconds.items() if secs[-1]]
    spread = ", ".join(f"{name} {np.expm1(sd):.0%}" for name, sd in view.spread.items())
    out = [f"canary ({view.nights} nights): newest " + (", ".join(newest) or "not recorded")
           + (f"; usual night-to-night spread {spread}" if spread else "")]
    out += [f"canary step: {step.text(night(runs[step.at]))}" for step in view.steps]
    out += [f"noisy night left out of every cell: {night(runs[i])}: {why}" for i, why in hist.left_out.items()]
    return out


def canary_json(hist) -> dict:
    view = hist.canary
    return {"nights": view.nights, "seconds": view.seconds, "spread": view.spread,
            "steps": [{**vars(s), "run": hist.runs[s.at].path} for s in view.steps],
            "noisy": {hist.runs[i].path: why for i, why in hist.left_out.items()}}


def history_budget(hist) -> str:
    """What the history's verdict rests on: its nights, their launches and cluster time."""
    from reports.compare import budget
    b = budget(*hist.runs)
    wall = f"wall {b['wall_s']:.0f} s" if b["wall_s"] is not None else "no wall recorded on every night"
    return (f"budget: {len(hist.runs)} nights of up to {max(b['launches'], default=0)} launches, {b['ranks']} ranks, "
            f"timed rounds {b['timed_s']:.1f} s, {wall}: {b['cluster_rank_s']:.0f} rank-s of cluster time")


def history_detectable_lines(hist) -> list[str]:
    """What the history could have seen, per backend and band, from its own night-to-night spread."""
    from reports.history import MIN_SEGMENT
    return ([f"could have seen (a new level held {MIN_SEGMENT} nights, 80% power, from this history's own "
             "night-to-night spread):"] + [f"  {line}" for line in detectable_lines(hist.judged)]) if hist.judged.cells else []


def history_text(hist) -> str:
    counts = Counter(c.verdict for c in hist.judged.cells)
    from reports.history import MIN_RUNS
    headline, sections, what = _history_lines(hist)
    out = [f"# history: {headline}", *([f"# {history_headline(hist)}"] if hist.machine_changed and not hist.regressed else []),
           f"# {len(hist.judged.cells)} cells: " + ", ".join(
               f"{counts.get(v, 0)} {v}" for v in ("regression", "improvement", "machine regression", "machine improvement",
                                                   "no change", "inconclusive", "standing regression",
                                                   "standing improvement"))
           + (f"; {hist.too_short} cells in fewer than {MIN_RUNS} runs not judged" if hist.too_short else ""),
           "# change points: binary segmentation of log time (pooled t, Bonferroni over the splits tried);",
           "#   effect: level after / level before with its 95% CI, Benjamini-Hochberg across the sweep",
           f"# {statistic_line(hist.estimator)}"]
    if hist.judged.calibration:
        out.append(f"# {hist.judged.calibration}")
    out += [f"# {line}" for line in [history_budget(hist), *history_detectable_lines(hist), *canary_lines(hist)]]
    for label, lines in sections:
        out += [f"{label}:"] + [f"  {line}" for line in lines]
    out += [f"# {line}" for line in what]
    return "\n".join(out)


def history_markdown(hist) -> str:
    headline, sections, what = _history_lines(hist)
    title = "regression" if hist.regressed else "machine changed" if hist.machine_changed else "no new regression"
    out = [f"### hccl-bench nightly: {title}", "", md(history_headline(hist)), "", md(headline), "",
           md(statistic_line(hist.estimator).capitalize())]
    out += [""] + [f"- {md(line.strip())}" for line in [history_budget(hist), *history_detectable_lines(hist),
                                                        *canary_lines(hist)]]
    for label, lines in sections:
        out += ["", f"**{md(label[0].upper() + label[1:])}**", ""] + [f"- {md(line)}" for line in lines]
    out += [""] + [f"_{md(line)}_" for line in what] if what else []
    text_ = "\n".join(out)
    if len(text_) > MARKDOWN_LIMIT:
        text_ = text_[:MARKDOWN_LIMIT].rsplit("\n", 1)[0] + "\n- … (truncated)"
    return text_
