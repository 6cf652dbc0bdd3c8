"""``hccl-bench report RUN [RUN ...] -o DIR``: a self-contained HTML page and a Markdown summary.

Figures are matplotlib PNGs inlined as data URIs (the page opens offline); every text that comes
from a result file is escaped by jinja2's autoescape.
"""
from __future__ import annotations

import base64
import io
import statistics
from collections import defaultdict
from pathlib import Path

import jinja2
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from collectives.ops import bandwidths  # noqa: E402
from collectives.sizes import format_size  # noqa: E402
from reports import analysis, summary  # noqa: E402
from reports.cells import Run  # noqa: E402
from reports.compare import compare, size_ranges  # noqa: E402

SIZE_TICKS = FuncFormatter(lambda x, _: format_size(int(x)) if x >= 1 else "")
RATIO_RANGE = (0.25, 4.0)   # the ratio panel's y range: a CI band beyond it is clipped and marked
VERDICT_ORDER = ("regression", "suspected regression", "improvement", "suspected improvement")


def names_by_difference(runs: list[Run]) -> list[str]:
    """Legend names that say what differs between the runs: a --label, else the first recorded
    versions or variables that differ (CANN, MPI library, torch, the ranks' environment)."""
    if any(r.meta.get("label") for r in runs) or len(runs) < 2:
        return [r.label for r in runs]
    diff = analysis.provenance_diff([analysis.run_provenance(r) for r in runs])
    if not diff:
        return [r.label for r in runs]
    priority = ("cann.", "ranks.", "mpi_library", "packages.", "nccl", "rank_env.", "env.")
    keys = sorted(diff, key=lambda kv: next((i for i, p in enumerate(priority) if kv[0].startswith(p)), len(priority)))
    names = []
    for i, run in enumerate(runs):
        parts = [f"{k.split('.')[-1].removeprefix('MPIR_CVAR_')}={v[i]}" if k.startswith(("rank_env.", "env."))
                 else str(v[i]) for k, v in keys if v[i] not in ("-", "")]
        name = ""
        for part in parts:   # whole parts only, up to about 70 characters
            if len(name) + len(part) > 70:
                name += "; ..." if name else part[:70]
                break
            name = f"{name}; {part}" if name else part
        names.append((name or "as is") + (f" (side {run.side})" if run.side else ""))
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


def _rows(run: Run, series: tuple) -> tuple[list[int], list[float], list[float]]:
    cells = sorted((c for c in run.cells.values() if c.series == series), key=lambda c: c.size)
    # every launch pooled: the median of the per-launch medians (not the first launch's time)
    times = [statistics.median(statistics.median(v) for v in c.launches.values()) * 1e6 for c in cells]
    busbw = [bandwidths(c.info["op"], c.size, t * 1e-6, c.info["nranks"])[1] for c, t in zip(cells, times)]
    return [c.size for c in cells], times, busbw


def _sweep_figure(runs: list[Run], series: tuple, names: list[str]) -> str:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
    for run, name in zip(runs, names):
        sizes, times, busbw = _rows(run, series)
        if sizes:
            ax1.plot(sizes, busbw, marker="o", ms=3, label=name)
            ax2.plot(sizes, times, marker="o", ms=3, label=name)
    for ax, ylabel in ((ax1, "busbw (GB/s, 1e9), log"), (ax2, "time (us), log")):
        _size_axis(ax)
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)) or 1, fontsize=7, frameon=False)
    fig.suptitle(summary.series_label(series), fontsize=9)
    fig.tight_layout(rect=(0, 0.08 + 0.03 * (len(labels) // 3), 1, 1))
    return figure_png(fig)


def clipped_band(cells) -> tuple[list[float], list[float], list[float], list[tuple[int, float]]]:
    """(ratio, low, high) held inside RATIO_RANGE, and the (size, edge) points whose CI went past it."""
    lo_lim, hi_lim = RATIO_RANGE
    clip = lambda v: min(max(v, lo_lim), hi_lim)  # noqa: E731
    marks = [(c.size, hi_lim if c.high > hi_lim else lo_lim) for c in cells if c.high > hi_lim or c.low < lo_lim]
    return [clip(c.ratio) for c in cells], [clip(c.low) for c in cells], [clip(c.high) for c in cells], marks


def _ratio_figure(comparisons, series: tuple) -> str | None:
    """Time ratio per size on a log axis; a CI band beyond RATIO_RANGE is clipped there and the
    clipped points marked, so one wide interval cannot flatten the line that matters."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    lo_lim, hi_lim = RATIO_RANGE
    drawn = False
    for label, cmp in comparisons:
        cells = sorted((c for c in cmp.cells if c.series == series), key=lambda c: c.size)
        if len(cells) < 1:
            continue
        x = [c.size for c in cells]
        ratio, low, high, clipped = clipped_band(cells)
        line, = ax.plot(x, ratio, marker="o", ms=3, label=label)
        ax.fill_between(x, low, high, alpha=0.2, color=line.get_color())
        if clipped:
            ax.scatter(*zip(*clipped), marker="x", s=18, color=line.get_color(), label=f"CI clipped at {lo_lim:g}/{hi_lim:g}")
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.axhline(1.0, color="k", lw=0.8)
    _size_axis(ax)
    ax.set_yscale("log")
    ax.set_ylim(lo_lim * 0.9, hi_lim * 1.1)
    plain = FuncFormatter(lambda y, _: f"{y:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f"{y:g}" if round(y, 2) in (0.5, 2.0, 3.0) else ""))
    ax.set_ylabel("time ratio vs first (95% CI), log")
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.32), frameon=False)
    ax.grid(alpha=0.3, which="both")
    return figure_png(fig)


def _layer_figure(runs: list[Run], names: list[str]) -> str | None:
    """Step time per layer configuration, and the pipelines' measured bubble against theory."""
    rows = [(name, c.info) for run, name in zip(runs, names) for c in run.cells.values() if c.kind == "layer"]
    if not rows:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 0.9 + 0.22 * max(4, len(rows))))
    labels = [f"{i['bench']} tp={i['tp']} pp={i['pp']} "
              f"{i.get('schedule') or (i.get('layer', '') + ('+sp' if i.get('sequence_parallel') else ''))} "
              f"{i.get('impl') or ''} [{name}]" for name, i in rows]
    ax1.barh(range(len(rows)), [i.get("step_us", i.get("time_us", 0)) for _, i in rows], color="#4c72b0")
    ax1.set_yticks(range(len(rows)), labels, fontsize=6)
    ax1.set_xscale("log")
    ax1.xaxis.set_minor_formatter(NullFormatter())
    ax1.set_xlabel("step time (us), log")
    pipes = [(lab, i) for lab, (_, i) in zip(labels, rows) if i.get("bench") == "pipeline"]
    if pipes:
        y = range(len(pipes))
        ax2.barh([v - 0.2 for v in y], [i.get("bubble_measured") or 0 for _, i in pipes], height=0.4, label="measured")
        ax2.barh([v + 0.2 for v in y], [i.get("bubble_theory") or 0 for _, i in pipes], height=0.4, label="theory")
        ax2.set_yticks(list(y), [lab for lab, _ in pipes], fontsize=6)
        ax2.set_xlabel("pipeline bubble (share of the step)")
        ax2.legend(fontsize=7)
    else:
        ax2.axis("off")
    fig.tight_layout()
    return figure_png(fig)


def _algo_figures(run: Run) -> list[dict]:
    """Ring vs Tree (and the library default) per op in one run, crossover marked."""
    by_op = defaultdict(dict)
    for c in run.cells.values():
        if c.kind == "collective":
            backend, algo, op, dtype, redop, inplace, nranks = c.series
            by_op[(backend, op, dtype, redop, inplace, nranks)][algo] = c.series
    out = []
    for key, algos in sorted(by_op.items(), key=str):
        if not {"ring", "tree"} <= set(algos):
            continue
        fig, ax = plt.subplots(figsize=(5.5, 3.2))
        data = {}
        for algo, series in sorted(algos.items()):
            sizes, times, _ = _rows(run, series)
            data[algo] = dict(zip(sizes, times))
            ax.plot(sizes, times, marker="o", ms=3, label=algo)
        common = sorted(set(data["ring"]) & set(data["tree"]))
        cross = analysis.crossover(common, [data["ring"][s] for s in common], [data["tree"][s] for s in common])
        if cross:
            ax.axvline(cross, color="r", ls="--", lw=1)
            ax.annotate(f"crossover {format_size(cross)}", (cross, ax.get_ylim()[1]), fontsize=7, color="r",
                        va="top", ha="left")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("time (us)")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        backend, op, dtype = key[0], key[1], key[2]
        fig.suptitle(f"{run.label}: {op} {dtype} {backend} ring vs tree", fontsize=9)
        out.append({"title": f"{run.label}: {op} {dtype} {backend}", "png": figure_png(fig),
                    "crossover": format_size(cross) if cross else "none (one algorithm wins at every size)"})
    return out


PAGE = jinja2.Environment(autoescape=True).from_string("""<!doctype html>
<html><head><meta charset="utf-8"><title>hccl-bench report</title>
<style>body{font-family:sans-serif;margin:1.5em;max-width:1100px}table{border-collapse:collapse;font-size:12px;margin:.5em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f3f3f3}td.l,th.l{text-align:left}
img{max-width:100%}.reg{color:#b00}.imp{color:#070}.badge{display:inline-block;padding:1px 7px;border-radius:8px;color:#fff;font-size:11px}
.b-regression{background:#c62828}.b-improvement{background:#2e7d32}.b-suspected-regression{background:#ef8f00}
.b-suspected-improvement{background:#7cb342}.verdict{font-size:18px;margin:.3em 0}.note{color:#555;font-size:12px}
pre{white-space:pre-wrap;font-size:11px;background:#f7f7f7;padding:.5em}dt{font-weight:bold;font-size:12px}dd{font-size:12px;margin-bottom:.3em}</style></head><body>
<h1>hccl-bench report</h1>
{% if verdict %}<p class=verdict>{{ sentence }}</p>
<p class=note>{{ names[0] }} &rarr; {{ names[-1] }}; {{ samples_note }}</p>
{% if ranges %}<table><tr><th class=l>what</th><th class=l>sizes</th><th class=l>verdict</th><th>effect [95% CI]</th><th class=l>samples</th></tr>
{% for r in ranges %}<tr><td class=l>{{ r.what }}</td><td class=l>{{ r.sizes }}</td><td class=l><span class="badge b-{{ r.verdict|replace(' ', '-') }}">{{ r.verdict }}</span></td><td>{{ r.effect }}</td><td class=l>{{ r.samples }}</td></tr>{% endfor %}</table>
{% else %}<p>No size range was flagged.</p>{% endif %}
{% if mismatch %}<p class=reg>Setups differ: {{ mismatch|join("; ") }}</p>{% endif %}
{% else %}<p class=verdict>One run: no comparison.</p>{% endif %}
<h2>What changed between the runs</h2>
{% if prov_diff %}<table><tr><th class=l>key</th>{% for n in names %}<th class=l>{{ n }}</th>{% endfor %}</tr>
{% for key, values in prov_diff %}<tr><td class=l>{{ key }}</td>{% for v in values %}<td class=l>{{ v }}</td>{% endfor %}</tr>{% endfor %}</table>
{% else %}<p>No differences in recorded versions or environment.</p>{% endif %}
<h2>Runs</h2><table><tr><th class=l>#</th><th class=l>name</th><th class=l>file</th><th>cells</th></tr>
{% for r in runs %}<tr><td class=l>{{ loop.index }}</td><td class=l>{{ names[loop.index0] }}</td><td class=l>{{ r.path }}</td><td>{{ r.cells|length }}</td></tr>{% endfor %}</table>
<details><summary>Terms</summary><dl>
<dt>busbw</dt><dd>algbw (size / time, GB/s = 1e9 B/s) times nccl-tests' factor for the op: 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter, all_to_all, 1 otherwise. Comparable across rank counts.</dd>
<dt>latency floor, alpha, 1/beta</dt><dd>the smallest measured time; and the fit time = alpha + size x beta over the sweep: alpha is the fixed cost per call, 1/beta the bandwidth it approaches.</dd>
<dt>half peak at</dt><dd>the smallest size reaching half the peak busbw: below it latency dominates.</dd>
<dt>verdicts</dt><dd>regression / improvement: the 95% interval excludes no change, the effect exceeds the minimum, a neighbouring size agrees, launches (or interleaved pairs) were the samples. Suspected: the same seen in rounds of one launch a side, never a failure. No change: the interval lies within the minimum effect. Inconclusive: not enough evidence either way.</dd>
</dl></details>
{% if verdict %}<details><summary>Verdict as text</summary><pre>{{ verdict }}</pre></details>{% endif %}
<h2>Sweeps</h2>{% for f in sweeps %}<div><img alt="{{ f.title }}" src="data:image/png;base64,{{ f.png }}">{% if f.ratio %}<img alt="ratio {{ f.title }}" src="data:image/png;base64,{{ f.ratio }}">{% endif %}</div>{% endfor %}
<h2>Per op and algorithm</h2>
<table><tr><th class=l>series</th><th class=l>run</th><th>latency floor (us)</th><th>peak busbw (GB/s)</th><th>at</th><th>half peak at</th><th>alpha (us)</th><th>1/beta (GB/s)</th><th>R&sup2;</th></tr>
{% for s in stats %}<tr><td class=l>{{ s.series }}</td><td class=l>{{ s.run }}</td><td>{{ "%.2f"|format(s.latency_floor_us) }}</td><td>{{ "%.3f"|format(s.peak_busbw_gbps) }}</td><td>{{ s.peak_at }}</td><td>{{ s.half_peak }}</td><td>{{ s.alpha }}</td><td>{{ s.bw }}</td><td>{{ s.r2 }}</td></tr>{% endfor %}</table>
{% if algos %}<h2>Ring vs Tree</h2>{% for f in algos %}<div><img alt="{{ f.title }}" src="data:image/png;base64,{{ f.png }}"><p>{{ f.title }}: crossover {{ f.crossover }}</p></div>{% endfor %}{% endif %}
{% if layers %}<h2>Layers</h2>{% if layer_png %}<img alt="layers" src="data:image/png;base64,{{ layer_png }}">{% endif %}<table><tr><th class=l>run</th><th class=l>bench</th><th>tp</th><th>pp</th><th>dp</th><th class=l>what</th><th>step (us)</th><th>efficiency</th><th>comm share</th><th>bubble</th><th>theory</th></tr>
{% for l in layers %}<tr><td class=l>{{ l.run }}</td><td class=l>{{ l.bench }}</td><td>{{ l.tp }}</td><td>{{ l.pp }}</td><td>{{ l.dp }}</td><td class=l>{{ l.what }}</td><td>{{ "%.1f"|format(l.step_us) }}</td><td>{{ l.efficiency }}</td><td>{{ l.comm }}</td><td>{{ l.bubble }}</td><td>{{ l.theory }}</td></tr>{% endfor %}</table>{% endif %}
</body></html>""")


def _verdict_rows(cmp) -> list[dict]:
    """The flagged size ranges as the verdict table's rows, worst kind first."""
    rows = []
    for verdict in VERDICT_ORDER:
        for r in size_ranges(cmp, verdict):
            sizes = format_size(r["first"]) if r["first"] == r["last"] else f"{format_size(r['first'])}-{format_size(r['last'])}"
            rows.append({"what": summary.series_label(r["series"]), "sizes": sizes if r["first"] else "-",
                         "verdict": verdict, "effect": summary.effect_text(r["series"], r["ratio"], r["low"], r["high"]),
                         "samples": f"{r['samples']} ({r['cells']} sizes)"})
    return rows


def _sentence(cmp) -> str:
    counts = {v: sum(c.verdict == v for c in cmp.cells) for v in summary.VERDICTS}
    head = "Regression" if cmp.regressed else "No confirmed regression"
    return (f"{head}: {counts['regression']} regressions, {counts['improvement']} improvements, "
            f"{counts['no change']} unchanged, {counts['inconclusive']} inconclusive"
            + (f", {counts['suspected regression'] + counts['suspected improvement']} suspected" if
               counts['suspected regression'] + counts['suspected improvement'] else "") + f" of {len(cmp.cells)} cells.")


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(runs: list[Run], out_dir: Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    first = runs[0]
    names = names_by_difference(runs)
    comparisons = [(f"{name} / {names[0]}", compare(first, run)) for run, name in zip(runs[1:], names[1:])]
    series_all = sorted({c.series for r in runs for c in r.cells.values() if c.kind == "collective"}, key=str)
    sweeps, stats = [], []
    for series in series_all:
        sweeps.append({"title": summary.series_label(series), "png": _sweep_figure(runs, series, names),
                       "ratio": _ratio_figure(comparisons, series) if comparisons else None})
        for run, name in zip(runs, names):
            sizes, times, busbw = _rows(run, series)
            if not sizes:
                continue
            st = analysis.sweep_stats(sizes, times, busbw)
            stats.append({"series": summary.series_label(series), "run": name, **st,
                          "half_peak": format_size(st["half_peak_size"]) if st["half_peak_size"] else "-",
                          "peak_at": format_size(st["peak_at"]), "alpha": _fmt(st["alpha_us"], ".2f"),
                          "bw": _fmt(st["bandwidth_gbps"], ".3f"), "r2": _fmt(st["r2"], ".3f")})
    layers = []
    for run, name in zip(runs, names):
        for c in run.cells.values():
            if c.kind != "layer":
                continue
            i = c.info
            what = (f"{i.get('layer')}{'+sp' if i.get('sequence_parallel') else ''} {i.get('impl')}"
                    if i["bench"] == "linear" else f"{i.get('schedule')} m={i.get('microbatches')}")
            layers.append({"run": name, "bench": i["bench"], "tp": i["tp"], "pp": i["pp"], "dp": i["dp"], "what": what,
                           "step_us": i.get("step_us", i.get("time_us", 0)), "efficiency": _fmt(i.get("efficiency"), ".2f"),
                           "comm": _fmt(i.get("comm_share"), ".2f"), "bubble": _fmt(i.get("bubble_measured"), ".3f"),
                           "theory": _fmt(i.get("bubble_theory"), ".3f")})
    last = comparisons[-1][1] if comparisons else None
    kinds = sorted({c.samples for c in last.cells}) if last else []
    html = PAGE.render(runs=runs, names=names, verdict=summary.text(last) if last else "",
                       sentence=_sentence(last) if last else "", ranges=_verdict_rows(last) if last else [],
                       samples_note="samples: " + ", ".join(kinds) if kinds else "",
                       layer_png=_layer_figure(runs, names), mismatch=last.mismatch if last else [],
                       prov_diff=analysis.provenance_diff([analysis.run_provenance(r) for r in runs]),
                       stats=stats, sweeps=sweeps, algos=[f for r in runs for f in _algo_figures(r)], layers=layers)
    (out_dir / "report.html").write_text(html)
    md = [f"## hccl-bench report: {summary.md(', '.join(r.label for r in runs))}", ""]
    md += [summary.markdown(last)] if last else ["(one run: no comparison)"]
    md_text = "\n".join(md)[:summary.MARKDOWN_LIMIT]
    (out_dir / "summary.md").write_text(md_text + "\n")
    return {"html": str(out_dir / "report.html"), "markdown": str(out_dir / "summary.md"),
            "figures": html.count("data:image/png"),
            "regressed": bool(last and last.regressed)}
