"""``hccl-bench history ... --report DIR``: the nightly guard's page: a figure per flagged size range
(levels before and after its change), the verdict text, the canary night by night, each cell's
detectable change. Self-contained like the report."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from collectives.sizes import format_size
from reports import summary
from reports.compare import SizeRange
from reports.history import History
from reports.report_page import TEMPLATES, figure_png, plt
from schema.judgement import (
    IMPROVEMENT,
    MACHINE_IMPROVEMENT,
    MACHINE_REGRESSION,
    REGRESSION,
    STANDING_IMPROVEMENT,
    STANDING_REGRESSION,
)

FLAGGED = (REGRESSION, IMPROVEMENT, MACHINE_REGRESSION, MACHINE_IMPROVEMENT, STANDING_REGRESSION, STANDING_IMPROVEMENT)

PAGE = TEMPLATES.get_template("history.html.j2")


def _figure(hist: History, r: SizeRange) -> str:
    runs = hist.runs
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for cell in (c for c in hist.judged.cells if c.series == r.series and r.first <= c.size <= r.last):
        idx, points = hist.nights[cell.key]
        times = np.exp(points) * 1e6
        line, = ax.plot(idx, times, marker="o", ms=3, label=format_size(cell.size))
        at = hist.step(cell.key).at
        before = [k for k, i in enumerate(idx) if i < at][-cell.n_base:]   # since the change before it
        after = [k for k, i in enumerate(idx) if i >= at]
        if at >= 0 and before and after:   # a cell an A/B judged alone may lack nights on either side
            ax.hlines([np.exp(np.log(times[before]).mean()), np.exp(np.log(times[after]).mean())],
                      [idx[before[0]], at], [idx[before[-1]], idx[-1]], colors=line.get_color(), linestyles="--", lw=1)
    if (at := r.since) >= 0:
        ax.axvline(at - 0.5, color="r", lw=1)
        ax.annotate(f"change: {runs[at].label}", (at - 0.5, ax.get_ylim()[1]), fontsize=7, color="r", va="top")
    ax.set(yscale="log", xlabel="run (oldest first)", ylabel="time (us)")
    ticks = [run.started[5:16].replace("T", " ") or str(i) for i, run in enumerate(runs)]
    ax.set_xticks(range(len(runs)), ticks, fontsize=6, rotation=90)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return figure_png(fig)


def _canary_figure(hist: History) -> str:
    """Each canary workload's median sample run by run, relative to its own median: noisy nights
    (left out of every cell) as red crosses, steps as dashed lines."""
    fig, ax = plt.subplots(figsize=(8, 2.8))
    for name, secs in hist.canary.seconds.items():
        idx = [i for i, s in enumerate(secs) if s is not None]
        rel = np.array([secs[i] for i in idx]) / hist.canary.level[name]
        line, = ax.plot(idx, rel, marker="o", ms=3, label=name)
        noisy = [k for k, i in enumerate(idx) if i in hist.left_out]
        ax.plot([idx[k] for k in noisy], rel[noisy], "x", color="r", ms=8)
        for step in (s for s in hist.canary.steps if s.workload == name):
            ax.axvline(step.at - 0.5, color=line.get_color(), ls="--", lw=1)
    ax.set(xlabel="run (oldest first); red x: noisy night, left out; dashed: a step of the machine",
           ylabel="time / its median")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return figure_png(fig)


def render_history(hist: History, out_dir: Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    canary = _canary_figure(hist) if hist.canary.seconds else ""
    figures = [{"title": f"{kind.text()}: {summary.range_text(r)}", "png": _figure(hist, r)}
               for kind in FLAGGED for r in hist.judged.ranges.get(kind, [])]
    cells = [{"label": c.series.label(), "size": format_size(c.size) if c.size else "", "verdict": c.outcome.text(),
              "detectable": f"{c.detectable:.0%}" if np.isfinite(c.detectable) else "nothing", "note": c.note}
             for c in hist.judged.cells]
    html = PAGE.render(runs=hist.runs, regressed=hist.regressed, machine=hist.machine_changed,
                       headline=summary.history_headline(hist), text=summary.history_text(hist), figures=figures,
                       canary=canary, canary_lines=summary.canary_lines(hist), cells=cells)
    (out_dir / "history.html").write_text(html)
    return {"html": str(out_dir / "history.html"), "figures": len(figures) + bool(canary)}
