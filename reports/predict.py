"""`hccl-bench predict RUN... --hosts H --ranks-per-host R`: collective times at another scale from
alpha-beta fits per link class and the algorithms' step counts (the model: docs/statistics.md)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import kinds
from collectives.ops import OPS as ALL_OPS
from schema.results import ResultError, Run, link_class
from schema.stats import median, relative_fit

OPS = tuple(name for name, op in ALL_OPS.items() if op.traffic)   # the ops whose module declares a traffic model


def cost(op: str, algo: str, p: int) -> tuple[float, float]:
    """(steps, share): t = steps x alpha + share x S x beta (each op module's `traffic`)."""
    if p <= 1:
        return 0.0, 0.0
    traffic = ALL_OPS[op].traffic
    if traffic is None:
        raise KeyError(op)
    return traffic(algo, p)


@dataclass
class Fit:
    op: str
    link: str              # "intra-host" or "inter-host"
    alpha_s: float
    beta_s_per_byte: float
    cells: int

    @property
    def bandwidth_gbps(self) -> float:
        return 1 / self.beta_s_per_byte / 1e9 if self.beta_s_per_byte > 0 else float("inf")


def fit(runs: list[Run]) -> dict[tuple[str, str], Fit]:
    """alpha-beta per (op, link class) from the runs' default-algorithm cells."""
    points: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for run in runs:
        for cell in run.cells.values():
            if (row := kinds.sized_row(cell.row)) is None or row.op not in OPS or not row.hosts or cell.size == 0:
                continue
            steps, share = cost(row.op, "ring", row.nranks)
            link = "intra-host" if link_class(row.hosts) == "intra-host" else "inter-host"   # mixed: the ring crosses hosts
            points.setdefault((row.op, link), []).append((steps, share * cell.size, cell.pooled_s))
    fits = {}
    for (op, link), pts in ((key, np.array(v)) for key, v in points.items() if len(v) >= 3):
        alpha, beta = relative_fit(pts[:, :2], pts[:, 2])
        fits[(op, link)] = Fit(op, link, max(float(alpha), 0.0), max(float(beta), 0.0), len(pts))
    if not fits:
        raise ResultError(f"no {', '.join(OPS[:-1])} or {OPS[-1]} cells with hosts recorded (3 sizes or more per op) to fit")
    return fits


def predict(fits: dict[tuple[str, str], Fit], hosts: int, per_host: int, sizes: list[int]) -> list[dict]:
    """Ring and tree times (us) per op and size at hosts x per_host ranks."""
    p = hosts * per_host
    link = "inter-host" if hosts > 1 else "intra-host"
    out = []
    for op in OPS:
        if (f := fits.get((op, link))) is None:
            continue
        for size in sizes:
            ring, tree = ((steps * f.alpha_s + share * size * f.beta_s_per_byte) * 1e6
                          for steps, share in (cost(op, "ring", p), cost(op, "tree", p)))
            out.append({"op": op, "size": size, "link": link, "nranks": p, "ring_us": ring, "tree_us": tree})
    return out


def against(predicted: list[dict], measured: Run) -> dict[str, float]:
    """Median absolute relative error per op of the ring prediction (the model the fit used for the
    library's default algorithm) against a measured run of the default algorithm."""
    times = {(swept.op, c.size): c.pooled_s * 1e6 for c in measured.cells.values()
             if (swept := kinds.sized_row(c.row)) and swept.algo == "default"}
    errors: dict[str, list[float]] = {}
    for row in predicted:
        t = times.get((row["op"], row["size"]))
        if t:
            row.update(measured_us=t, error=row["ring_us"] / t - 1)
            errors.setdefault(row["op"], []).append(abs(row["error"]))
    return {op: median(list(e)) for op, e in errors.items()}


def text(fits: dict, predicted: list[dict], errors: dict[str, float], hosts: int, per_host: int) -> str:
    out = ["# alpha-beta fits (ring model, per op and link class)",
           f"#{'op':>15} {'link':>11} {'alpha(us)':>10} {'GB/s':>9} {'cells':>6}"]
    out += [f" {f.op:>15} {f.link:>11} {f.alpha_s * 1e6:>10.2f} {f.bandwidth_gbps:>9.3f} {f.cells:>6}"
            for f in sorted(fits.values(), key=lambda f: (f.op, f.link))]
    out += ["", f"# predicted at {hosts} hosts x {per_host} ranks (times in us)",
            f"#{'op':>15} {'size':>11} {'ring':>11} {'tree':>11} {'measured':>11} {'error':>7}"]
    for r in predicted:
        measured = f"{r['measured_us']:>11.1f} {r['error']:>+7.0%}" if "measured_us" in r else f"{'-':>11} {'':>7}"
        out.append(f" {r['op']:>15} {r['size']:>11} {r['ring_us']:>11.1f} {r['tree_us']:>11.1f} {measured}")
    if errors:
        out.append("# median absolute error of the ring prediction: "
                   + ", ".join(f"{op} {e:.0%}" for op, e in sorted(errors.items())))
    return "\n".join(out)
