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
from reports.results import Run, Series

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
    out += ["# effect: time ratio, 95% CI (paired launches: 20%-trimmed paired t on log launch medians; launches:",
            "#   Welch t; rounds: Hodges-Lehmann); Benjamini-Hochberg across the sweep"]
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
             + "; ".join(md(line) for line in detectable_lines(cmp))]
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


def calibrate(a: Run, b: Run) -> dict:
    """A/A: per size band, how far two runs of the same stack drift, how often the 95% CI misses
    (about 5% when the sampling is honest), and the smallest minimum effect under which none of
    these A/A cells would have been flagged: noise the intervals already carry is not charged twice."""
    cmp = compare(a, b, min_effect=0.0)
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
            "method": "A/A: min effect per size band = the largest A/A effect whose 95% CI excluded no change"}


def calibration_text(cal: dict) -> str:
    out = [f"# A/A calibration {cal['a']} vs {cal['b']} ({cal.get('samples', 'launches')})",
           "# noise: 95th percentile of |A/A ratio - 1|; CI missed: share of cells whose 95% CI excluded 1 (~5% is honest)",
           f"#{'backend and band':>28} {'cells':>6} {'noise':>8} {'CI missed':>10} {'min effect':>11}"]
    for name, b in cal["bands"].items():
        out.append(f" {name:>28} {b['cells']:>6} {b['noise']:>8.1%} {b['ci_missed']:>10.0%} {b['min_effect']:>11.1%}")
    return "\n".join(out)


def _history_lines(hist) -> tuple[str, list[tuple[str, list[str]]], list[str]]:
    """(headline, [(section, lines)], what changed) shared by the terminal and Markdown forms."""
    from reports.history import MIN_SEGMENT, change_run, changed_between
    runs = hist.runs
    sections, changed_at = [], []
    for label, verdict in (("REGRESSIONS", "regression"), ("improvements", "improvement"),
                           (f"standing regressions (began before the last {hist.window} runs)", "standing regression"),
                           ("standing improvements", "standing improvement")):
        lines = []
        for r in size_ranges(hist.judged, verdict):
            at = change_run(hist, r["series"], r["first"], r["last"])
            lines.append(f"{range_text(r)} since {runs[at].label} ({runs[at].started[:16]})")
            if at not in changed_at:
                changed_at.append(at)
        if lines:
            sections.append((label, lines))
    for verdict in ("suspected regression", "suspected improvement"):
        lines = range_lines(hist.suspected, verdict)
        if lines:
            sections.append((f"{verdict}s in the newest run alone (the next run or a same-day A/B confirms)", lines))
    what = []
    for at in changed_at:
        diff = changed_between(hist, at)
        what.append(f"what changed from {runs[at - 1].label} to {runs[at].label}: "
                    + ("; ".join(f"{k}: {' -> '.join(v)}" for k, v in diff) if diff else
                       "nothing recorded (same versions and environment): the machine's state, or something not recorded"))
    headline = (f"{len(runs)} runs {runs[0].started[:10]}..{runs[-1].started[:10]}; a change needs "
                f"{MIN_SEGMENT} runs at its level, counts if it began in the last {hist.window}")
    return headline, sections, what


def history_text(hist) -> str:
    counts = Counter(c.verdict for c in hist.judged.cells)
    from reports.history import MIN_RUNS
    headline, sections, what = _history_lines(hist)
    out = [f"# history: {headline}",
           f"# {len(hist.judged.cells)} cells: " + ", ".join(
               f"{counts.get(v, 0)} {v}" for v in ("regression", "improvement", "no change", "inconclusive",
                                                   "standing regression", "standing improvement"))
           + (f"; {hist.too_short} cells in fewer than {MIN_RUNS} runs not judged" if hist.too_short else ""),
           "# change points: binary segmentation of log time (pooled t, Bonferroni over the splits tried);",
           "#   effect: level after / level before with its 95% CI, Benjamini-Hochberg across the sweep"]
    if hist.judged.calibration:
        out.append(f"# {hist.judged.calibration}")
    for label, lines in sections:
        out += [f"{label}:"] + [f"  {line}" for line in lines]
    out += [f"# {line}" for line in what]
    return "\n".join(out)


def history_markdown(hist) -> str:
    headline, sections, what = _history_lines(hist)
    out = [f"### hccl-bench nightly: {'regression' if hist.regressed else 'no new regression'}", "", md(headline)]
    for label, lines in sections:
        out += ["", f"**{md(label[0].upper() + label[1:])}**", ""] + [f"- {md(line)}" for line in lines]
    out += [""] + [f"_{md(line)}_" for line in what] if what else []
    text_ = "\n".join(out)
    if len(text_) > MARKDOWN_LIMIT:
        text_ = text_[:MARKDOWN_LIMIT].rsplit("\n", 1)[0] + "\n- … (truncated)"
    return text_
