"""``hccl-bench report RUN [RUN ...] -o DIR``: a self-contained HTML page and a Markdown summary.

Figures are matplotlib PNGs inlined as data URIs (the page opens offline); every text that comes
from a result file is escaped by jinja2's autoescape.
"""
from __future__ import annotations

import base64
import io
from collections import defaultdict
from pathlib import Path

import jinja2
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from collectives.ops import bandwidths  # noqa: E402
from collectives.sizes import format_size  # noqa: E402
from reports import analysis, summary  # noqa: E402
from reports.cells import Run  # noqa: E402
from reports.compare import compare  # noqa: E402


def figure_png(fig) -> str:
    """A finished figure as base64 PNG for a data URI (pages open offline)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _rows(run: Run, series: tuple) -> tuple[list[int], list[float], list[float]]:
    cells = sorted((c for c in run.cells.values() if c.series == series), key=lambda c: c.size)
    times = [c.info["time_us"] for c in cells]
    busbw = [bandwidths(c.info["op"], c.size, t * 1e-6, c.info["nranks"])[1] for c, t in zip(cells, times)]
    return [c.size for c in cells], times, busbw


def _sweep_figure(runs: list[Run], series: tuple) -> str:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
    for run in runs:
        sizes, times, busbw = _rows(run, series)
        if sizes:
            ax1.plot(sizes, busbw, marker="o", ms=3, label=run.label)
            ax2.plot(sizes, times, marker="o", ms=3, label=run.label)
    for ax, ylabel in ((ax1, "busbw (GB/s, 1e9)"), (ax2, "time (us)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    ax2.set_yscale("log")
    ax1.legend(fontsize=7)
    fig.suptitle(summary.series_label(series), fontsize=9)
    return figure_png(fig)


def _ratio_figure(comparisons, series: tuple) -> str | None:
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    drawn = False
    for label, cmp in comparisons:
        cells = sorted((c for c in cmp.cells if c.series == series), key=lambda c: c.size)
        if len(cells) < 1:
            continue
        x = [c.size for c in cells]
        ax.plot(x, [c.ratio for c in cells], marker="o", ms=3, label=label)
        ax.fill_between(x, [c.low for c in cells], [c.high for c in cells], alpha=0.2)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("time ratio vs first run (95% CI)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
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
img{max-width:100%}.reg{color:#b00}.imp{color:#070}</style></head><body>
<h1>hccl-bench report</h1>
<p>Times are the median over rounds of the slowest rank's per-op time; GB/s = 1e9 bytes/s; busbw uses nccl-tests' factors.</p>
<h2>Runs</h2><table><tr><th class=l>#</th><th class=l>label</th><th class=l>file</th><th>cells</th></tr>
{% for r in runs %}<tr><td class=l>{{ loop.index }}</td><td class=l>{{ r.label }}</td><td class=l>{{ r.path }}</td><td>{{ r.cells|length }}</td></tr>{% endfor %}</table>
{% if verdict %}<h2>Verdict: {{ verdicts_base }} &rarr; {{ verdicts_cand }}</h2><pre>{{ verdict }}</pre>{% endif %}
{% if mismatch %}<p class=reg>Setups differ: {{ mismatch|join("; ") }}</p>{% endif %}
<h2>Provenance changes between runs</h2>
{% if prov_diff %}<table><tr><th class=l>key</th>{% for r in runs %}<th class=l>{{ r.label }}</th>{% endfor %}</tr>
{% for key, values in prov_diff %}<tr><td class=l>{{ key }}</td>{% for v in values %}<td class=l>{{ v }}</td>{% endfor %}</tr>{% endfor %}</table>
{% else %}<p>No differences in recorded versions or environment.</p>{% endif %}
<h2>Per op and algorithm</h2>
<table><tr><th class=l>series</th><th class=l>run</th><th>latency floor (us)</th><th>peak busbw (GB/s)</th><th>at</th><th>half peak at</th><th>alpha (us)</th><th>1/beta (GB/s)</th><th>R&sup2;</th></tr>
{% for s in stats %}<tr><td class=l>{{ s.series }}</td><td class=l>{{ s.run }}</td><td>{{ "%.2f"|format(s.latency_floor_us) }}</td><td>{{ "%.3f"|format(s.peak_busbw_gbps) }}</td><td>{{ s.peak_at }}</td><td>{{ s.half_peak }}</td><td>{{ s.alpha }}</td><td>{{ s.bw }}</td><td>{{ s.r2 }}</td></tr>{% endfor %}</table>
<h2>Sweeps</h2>{% for f in sweeps %}<div><img alt="{{ f.title }}" src="data:image/png;base64,{{ f.png }}">{% if f.ratio %}<img alt="ratio {{ f.title }}" src="data:image/png;base64,{{ f.ratio }}">{% endif %}</div>{% endfor %}
{% if algos %}<h2>Ring vs Tree</h2>{% for f in algos %}<div><img alt="{{ f.title }}" src="data:image/png;base64,{{ f.png }}"><p>{{ f.title }}: crossover {{ f.crossover }}</p></div>{% endfor %}{% endif %}
{% if layers %}<h2>Layers</h2><table><tr><th class=l>run</th><th class=l>bench</th><th>tp</th><th>pp</th><th>dp</th><th class=l>what</th><th>step (us)</th><th>efficiency</th><th>comm share</th><th>bubble</th><th>theory</th></tr>
{% for l in layers %}<tr><td class=l>{{ l.run }}</td><td class=l>{{ l.bench }}</td><td>{{ l.tp }}</td><td>{{ l.pp }}</td><td>{{ l.dp }}</td><td class=l>{{ l.what }}</td><td>{{ "%.1f"|format(l.step_us) }}</td><td>{{ l.efficiency }}</td><td>{{ l.comm }}</td><td>{{ l.bubble }}</td><td>{{ l.theory }}</td></tr>{% endfor %}</table>{% endif %}
</body></html>""")


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(runs: list[Run], out_dir: Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    first = runs[0]
    comparisons = [(f"{run.label} / {first.label}", compare(first, run)) for run in runs[1:]]
    series_all = sorted({c.series for r in runs for c in r.cells.values() if c.kind == "collective"}, key=str)
    sweeps, stats = [], []
    for series in series_all:
        sweeps.append({"title": summary.series_label(series), "png": _sweep_figure(runs, series),
                       "ratio": _ratio_figure(comparisons, series) if comparisons else None})
        for run in runs:
            sizes, times, busbw = _rows(run, series)
            if not sizes:
                continue
            st = analysis.sweep_stats(sizes, times, busbw)
            stats.append({"series": summary.series_label(series), "run": run.label, **st,
                          "half_peak": format_size(st["half_peak_size"]) if st["half_peak_size"] else "-",
                          "peak_at": format_size(st["peak_at"]), "alpha": _fmt(st["alpha_us"], ".2f"),
                          "bw": _fmt(st["bandwidth_gbps"], ".3f"), "r2": _fmt(st["r2"], ".3f")})
    layers = []
    for run in runs:
        for c in run.cells.values():
            if c.kind != "layer":
                continue
            i = c.info
            what = (f"{i.get('layer')}{'+sp' if i.get('sequence_parallel') else ''} {i.get('impl')}"
                    if i["bench"] == "linear" else f"{i.get('schedule')} m={i.get('microbatches')}")
            layers.append({"run": run.label, "bench": i["bench"], "tp": i["tp"], "pp": i["pp"], "dp": i["dp"], "what": what,
                           "step_us": i.get("step_us", i.get("time_us", 0)), "efficiency": _fmt(i.get("efficiency"), ".2f"),
                           "comm": _fmt(i.get("comm_share"), ".2f"), "bubble": _fmt(i.get("bubble_measured"), ".3f"),
                           "theory": _fmt(i.get("bubble_theory"), ".3f")})
    last = comparisons[-1][1] if comparisons else None
    html = PAGE.render(runs=runs, verdict=summary.text(last) if last else "", verdicts_base=first.label,
                       verdicts_cand=runs[-1].label, mismatch=last.mismatch if last else [],
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
