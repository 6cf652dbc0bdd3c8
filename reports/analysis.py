"""Numbers a report states about a size sweep: latency floor, peak busbw, n_1/2, alpha-beta fit,
Ring-vs-Tree crossover, and what changed in provenance between runs."""
from __future__ import annotations

import numpy as np


def sweep_stats(sizes: list[int], times_us: list[float], busbw: list[float]) -> dict:
    """Latency floor = time at the smallest size; n_1/2 = first size reaching half the peak busbw;
    alpha-beta: t = alpha + S/bandwidth, least squares weighted by 1/t (every size counts alike)."""
    s = np.asarray(sizes, dtype=float)
    t = np.asarray(times_us, dtype=float) * 1e-6
    b = np.asarray(busbw, dtype=float)
    order = np.argsort(s)
    s, t, b = s[order], t[order], b[order]
    peak = float(b.max()) if b.size else 0.0
    half = next((int(x) for x, y in zip(s, b) if y >= peak / 2), None) if peak > 0 else None
    out = {"latency_floor_us": float(t[0] * 1e6) if t.size else None, "peak_busbw_gbps": peak,
           "peak_at": int(s[int(np.argmax(b))]) if b.size else None, "half_peak_size": half,
           "alpha_us": None, "bandwidth_gbps": None, "r2": None}
    if s.size >= 3:
        w = 1 / t
        A = np.stack([np.ones_like(s), s], axis=1) * w[:, None]
        (alpha, beta), *_ = np.linalg.lstsq(A, t * w, rcond=None)
        pred = alpha + beta * s
        ss_res = float(np.sum(((t - pred) * w) ** 2))
        ss_tot = float(np.sum(((t - np.average(t, weights=w)) * w) ** 2))
        out.update(alpha_us=float(alpha * 1e6), bandwidth_gbps=float(1 / beta / 1e9) if beta > 0 else None,
                   r2=1 - ss_res / ss_tot if ss_tot > 0 else None)
    return out


def crossover(sizes: list[int], first: list[float], second: list[float]) -> int | None:
    """First size at which the faster of two algorithms changes (None if one wins throughout)."""
    sign = np.sign(np.asarray(first) - np.asarray(second))
    for i in range(1, len(sign)):
        if sign[i] != 0 and sign[i - 1] != 0 and sign[i] != sign[i - 1]:
            return int(sizes[i])
    return None


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = str(v)
    return out


def provenance_diff(provs: list[dict]) -> list[tuple[str, list[str]]]:
    """Keys whose value differs between runs (versions, environment, commit...)."""
    flat = [flatten(p) for p in provs]
    keys = sorted(set().union(*flat)) if flat else []
    return [(k, [f.get(k, "-") for f in flat]) for k in keys
            if len({f.get(k, "-") for f in flat}) > 1 and not k.startswith(("command", "driver_host"))]


def run_provenance(run) -> dict:
    """The session's provenance plus what its ranks ran with (algorithm and --ab-env variables) and
    the versions its own groups reported (interpreter, torch, MPI library, thread level): that is
    where the two sides of an --ab-env/--ab-source run differ."""
    rank_env: dict[str, set] = {}
    envs = set()
    for cell in run.cells.values():
        envs.add(tuple(sorted((cell.info.get("group_env") or {}).items())))
        for k, v in (cell.info.get("group_env") or {}).items():
            rank_env.setdefault(k, set()).add(str(v))
    versions: dict[str, set] = {}
    for group in (run.meta.get("groups") or {}).values():
        if isinstance(group, dict) and tuple(sorted((group.get("env") or {}).items())) in envs:
            for k, v in (group.get("versions") or {}).items():
                versions.setdefault(k, set()).add(str(v))
    return {**run.meta.get("provenance", {}), "rank_env": {k: " | ".join(sorted(v)) for k, v in rank_env.items()},
            "ranks": {k: " | ".join(sorted(v)) for k, v in versions.items()}}
