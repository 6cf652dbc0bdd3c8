"""``hccl-bench report RUN [RUN ...] -o DIR``: a self-contained HTML page and a Markdown summary. Its
figures are matplotlib PNGs inlined as data URIs (the page opens offline); every text that comes
from a result file is escaped by jinja2's autoescape."""
from __future__ import annotations

import base64
import io
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

import jinja2
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

import kinds  # noqa: E402
from collectives.backends import algo_label  # noqa: E402
from collectives.ops import bandwidths  # noqa: E402
from collectives.sizes import format_size  # noqa: E402
from kinds.base import Bars, Lines, Panel  # noqa: E402
from reports import provenance_diff, summary, sweep_fits, table  # noqa: E402
from reports.compare import compare  # noqa: E402
from schema import results  # noqa: E402
from schema.judgement import (  # noqa: E402
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_CHANGE,
    REGRESSION,
    SUSPECTED_IMPROVEMENT,
    SUSPECTED_REGRESSION,
)
from schema.results import Cell, Metric, ResultError, Run, Series, layout, metrics, side_role  # noqa: E402
from schema.stats import NAMED_RANKS_OVER  # noqa: E402

TEMPLATES = jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"), autoescape=True)
SIZE_TICKS = FuncFormatter(lambda x, _: format_size(int(x)) if x >= 1 else "")
RATIO_RANGE = (0.25, 4.0)   # the ratio panel's y range: a CI band beyond it is clipped and marked
VERDICT_ORDER = (REGRESSION, SUSPECTED_REGRESSION, IMPROVEMENT, SUSPECTED_IMPROVEMENT)


def names_by_difference(runs: list[Run]) -> list[str]:
    """Legend names that say what differs between the runs: a --label, else the first recorded
    versions or variables that differ (CANN, MPI library, torch, the ranks' environment)."""
    if any(r.given_name for r in runs) or len(runs) < 2:
        return [r.label for r in runs]
    diff = provenance_diff.provenance_diff([provenance_diff.run_provenance(r) for r in runs])
    if not diff:
        return [r.label for r in runs]
    priority = ("cann.", "ranks.", "mpi_library", "packages.", "nccl", "rank_env.", "env.")
    keys = sorted(diff, key=lambda kv: next((i for i, p in enumerate(priority) if kv[0].startswith(p)), len(priority)))
    names = []
    for i, run in enumerate(runs):
        parts = [f"{k.split('.')[-1].removeprefix('MPIR_CVAR_')}={v[i]}" if k.startswith(("rank_env.", "env."))
                 else " ".join(str(v[i]).replace("Version:", "").split()) for k, v in keys if v[i] not in ("-", "")]
        name = ""
        for part in parts:   # whole parts only, up to about 70 characters
            if len(name) + len(part) > 70:
                name += "; ..." if name else part[:70]
                break
            name = f"{name}; {part}" if name else part
        names.append((name or "as is") + (f" ({side_role(run.side)})" if run.side else ""))
    return names if len(set(names)) == len(names) else [f"{n} [{r.label}]" for n, r in zip(names, runs)]


def _size_axis(ax) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(SIZE_TICKS)
    ax.set_xlabel("message size")
    ax.tick_params(axis="x", labelsize=7, labelrotation=30)


def figure_png(fig) -> str:
    """A finished figure as base64 PNG for a data URI (pages open offline)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _cells(run: Run, series: Series) -> list[Cell]:
    return sorted((c for c in run.cells.values() if c.series == series), key=lambda c: c.size)


def _points(cells: list[Cell]) -> tuple[list[int], list[float], list[float]]:
    """(sizes, pooled time us, busbw): every launch pooled, the median of the per-launch medians
    (not the first launch's time)."""
    times = [c.pooled_s * 1e6 for c in cells]
    busbw = [bandwidths(str(c.series.op), c.size, t * 1e-6, c.row.nranks, str(c.series.algo))[1] for c, t in zip(cells, times)]
    return [c.size for c in cells], times, busbw


def _field_points(ax1, ax2, field: list[tuple[str, Cell]]) -> int:
    """Field data (NCCL Inspector) beside the curve: what production saw at these sizes, as points
    (how many are drawn)."""
    by_name: dict[str, list[Cell]] = defaultdict(list)
    for name, cell in field:
        by_name[name].append(cell)
    for name, cells in by_name.items():
        sizes, times, busbw = _points(sorted(cells, key=lambda c: c.size))
        label = f"field: {name} (what production saw at these sizes)"
        ax1.scatter(sizes, busbw, marker="x", s=22, color="k", label=label, zorder=3)
        ax2.scatter(sizes, times, marker="x", s=22, color="k", zorder=3)
    return len(field)


def _sweep_figure(runs: list[Run], members: list[Series], names: list[str],
                  predicted: tuple[list[int], list[float]] | None = None, field: list | None = None,
                  drawn: list[int] | None = None) -> str:
    """busbw and time against size: a line per run and per --knobs value of the series; field
    data of the same op and rank count as points beside it."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
    if field and drawn is not None:
        drawn.append(_field_points(ax1, ax2, field))
    for (run, run_name), series in ((r, s) for r in zip(runs, names) for s in members):
        sizes, times, busbw = _points(_cells(run, series))
        name = f"{run_name} [{series.knobs}]" if series.knobs else run_name
        if sizes:
            ax1.plot(sizes, busbw, marker="o", ms=3, label=name)
            line, = ax2.plot(sizes, times, marker="o", ms=3, label=name)
            spans = [(min(m) * 1e6, max(m) * 1e6) for m in (c.launch_medians for c in _cells(run, series))]
            if any(hi > lo for lo, hi in spans):   # the spread across launches: fastest to slowest launch
                ax2.fill_between(sizes, [lo for lo, _ in spans], [hi for _, hi in spans], alpha=0.2,
                                 color=line.get_color(), lw=0)
    if predicted:
        ax2.plot(*predicted, ls="--", color="k", lw=1, label="predicted (ring, alpha-beta)")
    for ax, ylabel in ((ax1, "busbw (GB/s, 1e9), log"), (ax2, "time (us), log")):
        _size_axis(ax)
        ax.set(yscale="log", ylabel=ylabel)
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3, which="both")
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)) or 1, fontsize=7, frameon=False)
    fig.suptitle(members[0].without_knobs().label(algo_label), fontsize=9)
    fig.tight_layout(rect=(0, 0.08 + 0.03 * (len(labels) // 3), 1, 1))
    return figure_png(fig)


def clipped_band(cells) -> tuple[list[float], list[float], list[float], list[tuple[int, float]]]:
    """(ratio, low, high) held inside RATIO_RANGE, and the (size, edge) points whose CI went past it."""
    lo_lim, hi_lim = RATIO_RANGE
    clip = lambda v: min(max(v, lo_lim), hi_lim)  # noqa: E731
    marks = [(c.size, hi_lim if c.high > hi_lim else lo_lim) for c in cells if c.high > hi_lim or c.low < lo_lim]
    return [clip(c.ratio) for c in cells], [clip(c.low) for c in cells], [clip(c.high) for c in cells], marks


def _ratio_figure(comparisons, members: list[Series]) -> str | None:
    """Time ratio per size on a log axis; a CI band beyond RATIO_RANGE is clipped there and the
    clipped points marked, so one wide interval cannot flatten the line that matters."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    lo_lim, hi_lim = RATIO_RANGE
    drawn = False
    for (name, cmp), series in ((c, s) for c in comparisons for s in members):
        cells = sorted((c for c in cmp.cells if c.series == series), key=lambda c: c.size)
        if not cells:
            continue
        x = [c.size for c in cells]
        ratio, low, high, clipped = clipped_band(cells)
        line, = ax.plot(x, ratio, marker="o", ms=3, label=f"{name} [{series.knobs}]" if series.knobs else name)
        ax.fill_between(x, low, high, alpha=0.2, color=line.get_color())
        if clipped:
            xs, ys = zip(*clipped)
            ax.scatter(xs, ys, marker="x", s=18, color=line.get_color(), label=f"CI clipped at {lo_lim:g}/{hi_lim:g}")
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.axhline(1.0, color="k", lw=0.8)
    _size_axis(ax)
    ax.set(yscale="log", ylim=(lo_lim * 0.9, hi_lim * 1.1), ylabel="time ratio vs first (95% CI), log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f"{y:g}" if round(y, 2) in (0.5, 2.0, 3.0) else ""))
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.32), frameon=False)
    ax.grid(alpha=0.3, which="both")
    return figure_png(fig)


def _panels_png(panels: list[Panel]) -> str | None:
    """A kind's panels (kinds.base.Bars, Lines) side by side in one figure; the kind says what, this draws."""
    if not panels:
        return None
    tall = max((len(p.labels) for p in panels if isinstance(p, Bars)), default=0)
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), max(3.4, 0.9 + 0.22 * tall)), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        if isinstance(panel, Bars):
            _draw_bars(ax, panel)
        else:
            _draw_lines(ax, panel)
    fig.tight_layout()
    return figure_png(fig)


def _draw_bars(ax, bars: Bars) -> None:
    y = list(range(len(bars.labels)))
    height = 0.8 if bars.stacked else 0.8 / len(bars.series)
    left = [0.0] * len(y)
    for i, (name, values) in enumerate(bars.series.items()):
        at = y if bars.stacked else [v - 0.4 + height * (i + 0.5) for v in y]
        ax.barh(at, values, height=height, left=left if bars.stacked else None, label=name)
        if bars.stacked:
            left = [a + b for a, b in zip(left, values)]
    ax.set_yticks(y, bars.labels, fontsize=6)
    if bars.log:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(bars.xlabel)
    if len(bars.series) > 1:
        ax.legend(fontsize=7)


def _draw_lines(ax, lines: Lines) -> None:
    for label, points in lines.lines.items():
        drawn = [p for p in points if p[0] > 0 or not lines.x_is_size]
        if drawn:
            line, = ax.plot(*zip(*drawn), marker="o", ms=3, label=label)
            for _, level in (p for p in points if lines.x_is_size and p[0] == 0):
                ax.axhline(level, ls="--", lw=1, color=line.get_color())
    if not lines.lines:
        ax.axis("off")
        return
    if lines.x_is_size:
        _size_axis(ax)
    ax.set(xlabel=lines.xlabel, ylabel=lines.ylabel)
    if lines.log:
        ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6, frameon=False)


def _kind_sections(runs: list[Run], names: list[str]) -> list[dict]:
    """A section per bench kind beyond the collective sweep that the runs hold: the kind's figure
    (its panels), one row per cell with the kind's report metrics pooled over launches, and its table."""
    out = []
    for kind in kinds.KINDS:
        if not kind.cells or kind.sized:
            continue
        cells = [(name, c) for run, name in zip(runs, names)
                 for c in sorted(run.cells.values(), key=lambda c: (c.series.sort_key(), c.size)) if kinds.rows_of(kind, [c.row])]
        if not cells:
            continue
        shown = metrics(kind.row_type, "report", kind.name)
        rows = [{"run": name, "what": c.series.label(algo_label) + (f" {format_size(c.size)}" if c.size else ""),
                 "values": [m.text(c.pooled(m.name)) for m in shown]} for name, c in cells]
        texts = [{"run": name, "text": text} for run, name in zip(runs, names)
                 if (text := kind.table(kinds.rows_of(kind, table.launch_rows(run))).strip("\n"))]
        out.append({"title": kind.title, "png": _panels_png(kind.panels(cells)), "heads": [m.heading for m in shown],
                    "rows": rows, "texts": texts})
    return out


def _algo_figures(run: Run) -> list[dict]:
    """Ring vs Tree (and the library default) per op in one run, crossover marked."""
    by_op: dict[Series, dict[str, Series]] = defaultdict(dict)
    for c in run.cells.values():
        if kinds.sized(c.series):
            by_op[replace(c.series, algo=None)][str(c.series.algo)] = c.series
    out = []
    for key, algos in sorted(by_op.items(), key=lambda kv: kv[0].sort_key()):
        if not {"ring", "tree"} <= set(algos):
            continue
        fig, ax = plt.subplots(figsize=(5.5, 3.2))
        data = {}
        for algo, series in sorted(algos.items()):
            sizes, times, _ = _points(_cells(run, series))
            data[algo] = dict(zip(sizes, times))
            ax.plot(sizes, times, marker="o", ms=3, label=algo)
        common = sorted(set(data["ring"]) & set(data["tree"]))
        cross = sweep_fits.crossover(common, [data["ring"][s] for s in common], [data["tree"][s] for s in common])
        if cross:
            ax.axvline(cross, color="r", ls="--", lw=1)
            ax.annotate(f"crossover {format_size(cross)}", (cross, ax.get_ylim()[1]), fontsize=7, color="r",
                        va="top", ha="left")
        ax.set_xscale("log", base=2)
        ax.set(yscale="log", xlabel="size (bytes)", ylabel="time (us)")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        title = f"{run.label}: {key.op} {key.dtype} {key.backend}"
        fig.suptitle(f"{title} ring vs tree", fontsize=9)
        out.append({"title": title, "png": figure_png(fig),
                    "crossover": format_size(cross) if cross else "none (one algorithm wins at every size)"})
    return out


def _launch_rows(runs: list[Run], names: list[str]):
    """(run name, case id with -L<launch> past launch 0, row) of every launch of every cell whose
    per-rank data can be read."""
    for run, name in zip(runs, names):
        for cell in sorted(run.cells.values(), key=lambda c: (c.series.sort_key(), c.size)):
            for launch, row in sorted(cell.rows.items()):
                if row.round_ns_per_rank:
                    yield name, kinds.of_series(cell.series).case_id(row, cell.size) + (f"-L{launch}" if launch else ""), row


def _kept_text(row: results.Row) -> str:
    return "every rank" if row.per_rank == "full" else f"{len(row.kept_ranks)} of {row.nranks} ranks"


REPORT_SLOWEST = 3   # ranks named per case on the page


def _slowest_ranks(runs: list[Run], names: list[str], shown: int = REPORT_SLOWEST) -> list[dict]:
    """Groups of more than NAMED_RANKS_OVER ranks: each case's slowest ranks by median round time,
    where they ran and how much slower than the group's median rank."""
    out = []
    for name, cid, row in _launch_rows(runs, names):
        if row.nranks <= NAMED_RANKS_OVER:
            continue
        try:
            view = row.ranks()
        except ValueError:
            continue
        group = view.group_median_us
        for i, rank in enumerate(view.slowest(shown)):
            host, local = view.places.get(rank, ("?", "?"))
            out.append({"run": name, "case": cid, "first": i == 0, "kept": _kept_text(row), "group_us": group,
                        "rank": rank, "host": host, "local": local, "median_us": view.median_us(rank),
                        "ratio": f"{view.median_us(rank) / group:.2f}x" if group > 0 else "-"})
    return out


def _heatmap_figure(row: results.Row, title: str) -> str:
    """Rank x round per-op times of one case: every rank (full), or the ranks kept whole (summary)."""
    view = row.ranks()
    data = view.rounds / view.iters / 1e3
    fig, ax = plt.subplots(figsize=(8, min(9.0, 1.6 + 0.16 * len(view.kept))))
    image = ax.imshow(data, aspect="auto", interpolation="nearest", cmap="viridis")
    if len(view.kept) <= 40 or view.form == "summary":
        step = max(1, len(view.kept) // 40)
        ax.set_yticks(range(0, len(view.kept), step),
                      [f"{r} {view.where(r)}" if r in view.places else str(r) for r in view.kept[::step]], fontsize=6)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="round", ylabel="rank (host/local rank)")
    fig.colorbar(image, ax=ax, label="per-op time (us)")
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    return figure_png(fig)


def _heatmaps(runs: list[Run], names: list[str], chosen: str | None) -> list[dict]:
    """The rank x round heatmap of `chosen` (a case id, -L<n> for a later launch) wherever the runs
    have it (every rank count); without one, of the big-group case whose ranks disagree most (largest spread)."""
    rows = list(_launch_rows(runs, names))
    if chosen:
        picked = [(n, c, r) for n, c, r in rows if c == chosen]
        if not picked:
            some = ", ".join(dict.fromkeys(c for _, c, _ in rows[:5]))
            raise ResultError(f"--heatmap {chosen!r}: no case of that id in these runs (ids look like: {some or 'none'})")
    else:
        big = [(n, c, r) for n, c, r in rows if r.nranks > NAMED_RANKS_OVER]
        picked = [max(big, key=lambda t: t[2].rank_spread or 0.0)] if big else []
    out = []
    for name, cid, row in picked:
        try:
            png = _heatmap_figure(row, f"{name}: {cid}, {row.nranks} ranks ({_kept_text(row)} kept whole)")
        except ValueError as exc:
            raise ResultError(f"--heatmap {cid!r} in {name}: {exc}") from None
        why = "" if chosen else f" (the largest spread of the groups of more than {NAMED_RANKS_OVER} ranks)"
        kept = ("every rank's rounds" if row.per_rank == "full" else
                f"the rounds kept whole: the {len(row.kept_ranks)} slowest ranks by median and each round's slowest "
                f"of {row.nranks}; the others are summarised per rank")
        out.append({"case": cid, "run": name, "png": png,
                    "caption": f"{cid} ({row.nranks} ranks) in {name}{why}: {kept}, per-op time (round time / K)"})
    return out


PAGE = TEMPLATES.get_template("report.html.j2")


def _sentence(cmp) -> str:
    counts = Counter(c.outcome.kind for c in cmp.cells)
    suspected = counts[SUSPECTED_REGRESSION] + counts[SUSPECTED_IMPROVEMENT]
    head = "Regression" if cmp.regressed else "Inconclusive (not a pass)" if cmp.inconclusive else "No regression"
    return (f"{head}: {counts[REGRESSION]} regressions, {counts[IMPROVEMENT]} improvements, "
            f"{counts[NO_CHANGE]} unchanged, {counts[INCONCLUSIVE] + len(cmp.unplaced)} inconclusive"
            + (f", {suspected} suspected" if suspected else "") + f" of {len(cmp.cells) + len(cmp.unplaced)} cells"
            + (f" ({len(cmp.unplaced)} not judged: ranks 0 and 1's cores ran elsewhere in one run)." if cmp.unplaced else "."))


def _worst(cells: list[Cell], shown: list[Metric]) -> list[str]:
    """Each shown metric's worst value over a series' sizes (each size pooled over its launches)."""
    values = [(m, [v for c in cells if (v := c.pooled(m.name)) is not None]) for m in shown]
    return [m.text((max if m.better == "lower" else min)(vs) if vs else None) for m, vs in values]


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _predictions(fits, runs: list[Run], series: Series) -> tuple[list[int], list[float]] | None:
    """The ring prediction for this series' layout (hosts x ranks) at its sizes, if fits cover it."""
    from reports import predict
    cells = [c for r in runs for c in r.cells.values() if c.series == series]
    if not fits or not cells or series.op not in predict.OPS or not cells[0].row.hosts:
        return None
    hosts = cells[0].row.hosts
    sizes = sorted({c.size for c in cells})
    rows = [r for r in predict.predict(fits, len(hosts), max(hosts.values()), sizes) if r["op"] == series.op]
    return ([r["size"] for r in rows], [r["ring_us"] for r in rows]) if rows else None


def render(runs: list[Run], out_dir: Path, predict_from: list[Run] | None = None, heatmap: str | None = None) -> dict:
    """The page for `runs`; with `predict_from`, each sweep also shows the time predicted for its
    layout from those runs' alpha-beta fits (reports/predict.py). Big groups get their slowest ranks
    and a rank x round heatmap: of case `heatmap`, else of the case whose ranks disagree most."""
    from reports import predict
    fits = predict.fit(predict_from) if predict_from else {}
    names = names_by_difference(runs)
    heatmaps = _heatmaps(runs, names, heatmap)   # an unknown case id fails before anything is written
    out_dir.mkdir(parents=True, exist_ok=True)
    comparisons = [(f"{name} / {names[0]}", compare(runs[0], run)) for run, name in zip(runs[1:], names[1:])]
    field = [(name, c) for r, name in zip(runs, names) for c in r.cells.values() if getattr(c.row, "source", "") == "field"]
    bench_series = {c.series for r in runs for c in r.cells.values()
                    if kinds.sized(c.series) and getattr(c.row, "source", "") != "field"}
    beside = {(s.op, s.nranks) for s in bench_series}   # field data drawn beside a benchmark curve, not alone
    series_all = sorted(bench_series | {c.series for _, c in field if (c.series.op, c.series.nranks) not in beside},
                        key=Series.sort_key)
    sweeps, stats = [], []
    drawn: list[int] = []     # field points drawn beside benchmark curves
    shown = metrics(next(k for k in kinds.KINDS if k.sized).row_type, "report")
    knob_groups: dict[Series, list[Series]] = {}   # --knobs values of one series share its figure
    for series in series_all:
        knob_groups.setdefault(series.without_knobs(), []).append(series)
    for base, members in knob_groups.items():
        near = [(n, c) for n, c in field if (c.series.op, c.series.nranks) == (base.op, base.nranks) and c.series not in members]
        sweeps.append({"title": base.label(algo_label),
                       "png": _sweep_figure(runs, members, names, _predictions(fits, runs, base), near, drawn),
                       "ratio": _ratio_figure(comparisons, members) if comparisons else None})
    for series in series_all:
        for run, name in zip(runs, names):
            cells = _cells(run, series)
            if not cells:
                continue
            st = sweep_fits.sweep_stats(*_points(cells))
            stats.append({"series": series.label(algo_label), "run": name, **st, "metrics": _worst(cells, shown),
                          "launches": max(len(c.launches) for c in cells),
                          "spread": f"{max(c.launch_spread for c in cells):.2f}",
                          "half_peak": format_size(st["half_peak_size"]) if st["half_peak_size"] else "-",
                          "peak_at": format_size(st["peak_at"]), "alpha": _fmt(st["alpha_us"], ".2f"),
                          "bw": _fmt(st["bandwidth_gbps"], ".3f"), "r2": _fmt(st["r2"], ".3f")})
    last = comparisons[-1][1] if comparisons else None
    judged = {} if last is None else {   # the template shows none of these without a comparison
        "verdict": summary.text(last), "sentence": _sentence(last),
        "ranges": [{"what": r.series.label(algo_label), "sizes": summary.sizes_text(r.first, r.last) if r.first else "-",
                    "verdict": kind.text(), "effect": summary.effect_text(r.series, r.ratio, r.low, r.high),
                    "samples": f"{r.samples} ({r.cells} sizes)"}   # the flagged size ranges, worst kind first
                   for kind in VERDICT_ORDER for r in last.ranges.get(kind, [])],
        "detectable": summary.detectable_lines(last), "mismatch": last.mismatch,
        "samples_note": "samples: " + ", ".join(sampled) if (sampled := sorted({c.samples for c in last.cells})) else ""}
    layouts = [", ".join(sorted({layout(c.row.hosts) for c in r.cells.values()})) for r in runs]
    html = PAGE.render(runs=runs, names=names, layouts=layouts, **judged,
                       prov_diff=provenance_diff.provenance_diff([provenance_diff.run_provenance(r) for r in runs]),
                       stats=stats, metric_heads=[f"worst {m.heading}" for m in shown], sweeps=sweeps,
                       algos=[f for r in runs for f in _algo_figures(r)], kind_sections=_kind_sections(runs, names),
                       slowest=_slowest_ranks(runs, names),
                       named_over=NAMED_RANKS_OVER, heatmaps=heatmaps,
                       field_note=sorted({limits for r in runs if (limits := r.meta.field_limits)}))
    (out_dir / "report.html").write_text(html)
    md = f"## hccl-bench report: {summary.md(', '.join(r.label for r in runs))}\n\n" + (
        summary.markdown(last) if last else "(one run: no comparison)")
    (out_dir / "summary.md").write_text(md[:summary.MARKDOWN_LIMIT] + "\n")
    return {"html": str(out_dir / "report.html"), "markdown": str(out_dir / "summary.md"),
            "figures": html.count("data:image/png"),
            "regressed": bool(last and last.regressed), "field_points": sum(drawn),
            "heatmaps": [h["case"] for h in heatmaps]}
