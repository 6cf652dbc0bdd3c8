"""The doctor's outputs beside its text (harness/doctor/__init__.py): doctor.md, the host x host bandwidth
heatmap and doctor.html, from its Diagnosis. Rendering lives in reports/, the driver only asks for it."""
from __future__ import annotations

from reports.report_page import TEMPLATES, figure_png, plt
from reports.summary import md


def markdown(diag) -> str:
    head = [f"### hccl-bench doctor: {'suspects found' if diag.suspects else 'healthy'}", "",
            f"{len(diag.hosts)} hosts, {diag.rounds} {diag.schedule_words}", ""]
    if diag.suspects:
        head += ["| kind | host | peer | x worse | evidence |", "|---|---|---|---|---|"]
        head += [f"| {s.kind} | {md(s.host)} | {md(s.peer or '-')} | {s.ratio:.2f} | {md(s.evidence)} |"
                 for s in diag.suspects]
    return "\n".join(head)


def heatmap_png(diag) -> str:
    n = len(diag.hosts)
    grid = [[diag.bandwidth_gbps.get(a, {}).get(b, float("nan")) for b in diag.hosts] for a in diag.hosts]
    fig, ax = plt.subplots(figsize=(1.2 + 0.6 * n, 1.0 + 0.5 * n))
    image = ax.imshow(grid, cmap="viridis")
    ax.set_xticks(range(n), diag.hosts, rotation=45, fontsize=7)
    ax.set_yticks(range(n), diag.hosts, fontsize=7)
    for i in range(n):
        for j in range(n):
            if i != j and grid[i][j] == grid[i][j]:
                ax.text(j, i, f"{grid[i][j]:.2f}", ha="center", va="center", fontsize=6, color="w")
    fig.colorbar(image, ax=ax, label="GB/s host to host")
    return figure_png(fig)


def html(diag, text: str, heatmap: bool) -> str:
    """doctor.html: the verdict text and, for a few hosts, the heatmap."""
    return TEMPLATES.get_template("doctor.html.j2").render(diag=diag, text=text, png=heatmap_png(diag) if heatmap else None)


# ---- --traces / --flight-recorder (reports/traces/): from the JSON the doctor writes ----


def lateness_png(data: dict) -> str | None:
    """Rank x collective lateness in ms (red: arrived after its peers, blue: waited for them)."""
    grid = [[float("nan") if x is None else x / 1e3 for x in row] for row in data.get("lateness_us") or []]
    if not grid or not grid[0]:
        return None
    fig, ax = plt.subplots(figsize=(min(12.0, 2 + 0.05 * len(grid[0])), 1.2 + 0.3 * len(grid)))
    bound = max(1.0, max((abs(x) for row in grid for x in row if x == x), default=1.0))
    image = ax.imshow(grid, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto", interpolation="nearest")
    ax.set(xlabel="collective (start order)", ylabel="rank")
    ax.set_yticks(range(len(grid)), [f"{r} {data['hosts'].get(str(r), '')}" for r in range(len(grid))], fontsize=7)
    fig.colorbar(image, ax=ax, label="ms late vs its peers")
    return figure_png(fig)


def traces_html(data: dict, text: str) -> str:
    return TEMPLATES.get_template("doctor_traces.html.j2").render(data=data, text=text, png=lateness_png(data))


def traces_markdown(data: dict) -> str:
    head = [f"### hccl-bench doctor ({data['source']}): {'suspects found' if data['suspects'] else 'healthy'}", ""]
    if data["suspects"]:
        head += ["| kind | rank(s) | host | evidence |", "|---|---|---|---|"]
        head += [f"| {s['kind']} | {', '.join(map(str, s['ranks']))} | {md(s['host'])} | {md(s['evidence'])} |"
                 for s in data["suspects"]]
    return "\n".join(head)
