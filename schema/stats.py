"""Everything derived from the rank x round matrix (docs/method.md, Time): a round's time is the
slowest rank's, per-op time round / K. Past FULL_MATRIX_RANKS a row keeps a summary per rank, and
RankView reads either form."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FULL_MATRIX_RANKS = 256       # ~80 KiB a case in results.json at 20 rounds: a default sweep stays under 10 MB
SLOWEST_KEPT = 8              # past the threshold: the rounds of this many slowest ranks are kept whole
NAMED_RANKS_OVER = 8          # the table and report name the slowest ranks of groups larger than this
RANK_QUANTILES = ("min", "p25", "median", "p75", "max")
UNDISTURBED_SHARE = 0.05      # a round is undisturbed when no rank waited for a CPU longer than this share of it
MIN_UNDISTURBED = 5           # a launch is judged on its undisturbed rounds when it has at least this many


def median(values) -> float:
    """The median every reader uses (the mean of the two middle values at even n); a short list is
    sorted in Python, where numpy's call costs 50 us."""
    if isinstance(values, list) and 0 < len(values) <= 64 and all(v == v for v in values):   # NaN: numpy's answer
        s = sorted(values)
        mid = len(s) // 2
        return float(s[mid]) if len(s) % 2 else (float(s[mid - 1]) + float(s[mid])) / 2
    return float(np.median(np.asarray(values, dtype=np.float64)))


def medians(values, axis: int = -1) -> np.ndarray:
    """Medians along one axis of a matrix, for the vectorised readers."""
    return np.median(np.asarray(values, dtype=np.float64), axis=axis)


def quantiles(values, percents) -> list[float]:
    """Linear-interpolated percentiles (numpy's default, as pytest-benchmark and nccl-tests readers expect)."""
    return [float(q) for q in np.percentile(np.asarray(values, dtype=np.float64), percents)]


def relative_fit(design, t) -> np.ndarray:
    """Least squares of t = design @ coefficients weighted by 1/t, so a latency-bound point counts as
    much as a bandwidth-bound one: the one alpha-beta fit."""
    a, y = np.asarray(design, dtype=np.float64), np.asarray(t, dtype=np.float64)
    w = 1 / y
    return np.linalg.lstsq(a * w[:, None], y * w, rcond=None)[0]


def per_op_seconds(round_ns_by_rank: list[list[int]], iters: int) -> np.ndarray:
    """Per round, the slowest rank's time / K (a summarised row keeps every round's slowest rank)."""
    return np.asarray(round_ns_by_rank, dtype=np.float64).max(axis=0) / iters / 1e9


def round_waits(waits_by_rank: list[list[int]], rounds: int) -> list[int]:
    """Each round's longest CPU wait over the ranks (ns); [] unless every rank measured every round."""
    if not waits_by_rank or any(len(w) != rounds for w in waits_by_rank):
        return []
    return [int(v) for v in np.asarray(waits_by_rank, dtype=np.int64).max(axis=0)]


def _waited(per_op_s: list[float], waits: list, iters: int) -> list[bool] | None:
    """Per round: did a rank wait for a CPU longer than UNDISTURBED_SHARE of it; None when the waits
    are not this launch's rounds."""
    if not waits or len(waits) != len(per_op_s) or iters <= 0:
        return None
    return [w > UNDISTURBED_SHARE * t * iters * 1e9 for t, w in zip(per_op_s, waits)]


def undisturbed(per_op_s: list[float], waits: list, iters: int) -> list[float]:
    """The per-op times a verdict judges: the undisturbed rounds when at least MIN_UNDISTURBED are,
    else all; a round spent off a core times the scheduler, not the library."""
    waited = _waited(per_op_s, waits, iters)
    if waited is None:
        return per_op_s
    kept = [t for t, w in zip(per_op_s, waited) if not w]
    return kept if len(kept) >= MIN_UNDISTURBED else per_op_s


def waited_rounds(per_op_s: list[float], waits: list, iters: int) -> tuple[int, int] | None:
    """(rounds a rank waited for a CPU in, rounds) of one launch; None when its waits are not its rounds'."""
    waited = _waited(per_op_s, waits, iters)
    return None if waited is None else (sum(waited), len(waited))


def median_seconds(round_ns_by_rank: list[list[int]], iters: int) -> float:
    return float(np.median(per_op_seconds(round_ns_by_rank, iters)))


def per_rank_median_seconds(round_ns_by_rank: list[list[int]], iters: int) -> np.ndarray:
    """Each rank's own median per-op time (for per-rank quantities such as a stage's bubble)."""
    return np.median(np.asarray(round_ns_by_rank, dtype=np.float64), axis=1) / iters / 1e9


def _number(value: float) -> int | float:
    """A round time as JSON writes it shortest: whole nanoseconds as an int."""
    return int(value) if float(value).is_integer() else float(value)


def rank_rounds(round_ns_by_rank: list[list[int]], places: dict | None = None,
                full_up_to: int = FULL_MATRIX_RANKS) -> dict:
    """The per-rank fields of a row: the whole matrix up to `full_up_to` ranks, else a summary per rank
    and the kept ranks' rounds; rank_places of the ranks a reader is shown."""
    m = np.asarray(round_ns_by_rank, dtype=np.float64)
    medians = np.median(m, axis=1)
    slowest = [int(r) for r in np.argsort(-medians, kind="stable")[:SLOWEST_KEPT]]
    out: dict = {"per_rank": "full", "round_ns_per_rank": round_ns_by_rank}
    if len(round_ns_by_rank) > full_up_to:
        kept = sorted(set(slowest) | {int(r) for r in np.argmax(m, axis=0)})
        q25, q75 = np.percentile(m, [25, 75], axis=1)
        out = {"per_rank": "summary", "kept_ranks": kept, "round_ns_per_rank": [round_ns_by_rank[r] for r in kept],
               "rank_summary": {"min": [_number(v) for v in m.min(axis=1)], "p25": [round(float(v)) for v in q25],
                                "median": [_number(v) for v in medians], "p75": [round(float(v)) for v in q75],
                                "max": [_number(v) for v in m.max(axis=1)]}}
    if places and len(round_ns_by_rank) > NAMED_RANKS_OVER:
        named = sorted(set(slowest) | set(out.get("kept_ranks", [])))
        out["rank_places"] = {str(r): list(places[r]) for r in named if r in places}
    return out


@dataclass
class RankView:
    """A row's per-rank data, either form."""
    form: str                           # "full" or "summary"
    nranks: int
    iters: int
    medians: np.ndarray                 # every rank's median round time (ns)
    kept: list[int]                     # the ranks whose rounds `rounds` holds, in its row order
    rounds: np.ndarray                  # kept ranks x rounds (ns)
    places: dict[int, tuple[str, int]]

    @classmethod
    def of(cls, row) -> RankView:
        """From a row (or anything with its fields); ValueError names what does not fit together."""
        rounds = np.asarray(row.round_ns_per_rank, dtype=np.float64)
        if rounds.ndim != 2 or rounds.size == 0:
            raise ValueError("round_ns_per_rank must be a non-empty rank x round matrix")
        try:
            places = {int(r): (str(p[0]), int(p[1])) for r, p in (row.rank_places or {}).items()}
        except (TypeError, ValueError, IndexError, KeyError):
            raise ValueError("rank_places must map a rank to [host, local rank]") from None
        iters = row.iters_per_round or 1
        if row.per_rank == "full":
            return cls("full", len(rounds), iters, np.median(rounds, axis=1), list(range(len(rounds))), rounds, places)
        if row.per_rank != "summary":
            raise ValueError(f"per_rank must be 'full' or 'summary', found {str(row.per_rank)[:20]!r}")
        summary = row.rank_summary or {}
        if set(summary) != set(RANK_QUANTILES) or len({len(v) for v in summary.values()}) != 1:
            raise ValueError(f"rank_summary must hold {', '.join(RANK_QUANTILES)}, one value per rank each")
        medians = np.asarray(summary["median"], dtype=np.float64)
        if len(medians) != row.nranks:
            raise ValueError(f"rank_summary holds {len(medians)} ranks, the row {row.nranks}")
        kept = [int(r) for r in row.kept_ranks]
        if len(kept) != len(rounds) or not all(0 <= r < len(medians) for r in kept):
            raise ValueError("kept_ranks must name one rank (< nranks) per row of round_ns_per_rank")
        return cls("summary", len(medians), iters, medians, kept, rounds, places)

    def round_max_ns(self) -> np.ndarray:
        """Per round, the slowest rank's time: what a round takes (both forms keep it whole)."""
        return self.rounds.max(axis=0)

    def slowest(self, n: int) -> list[int]:
        """The n ranks with the largest median round time, slowest first."""
        return [int(r) for r in np.argsort(-self.medians, kind="stable")[:n]]

    def median_us(self, rank: int) -> float:
        """A rank's median per-op time (us)."""
        return float(self.medians[rank]) / self.iters / 1e3

    @property
    def group_median_us(self) -> float:
        """The median over ranks of each rank's median per-op time (us)."""
        return float(np.median(self.medians)) / self.iters / 1e3

    def where(self, rank: int) -> str:
        """"host/local rank" of a rank, "?" where the row does not say."""
        place = self.places.get(rank)
        return f"{place[0]}/{place[1]}" if place else "?"


def _summary(t: np.ndarray, per_rank: np.ndarray) -> dict:
    q1, mid, q3 = quantiles(t, [25, 50, 75])
    mean = float(t.mean())
    out = {"time_us": float(mid) * 1e6, "min_us": float(t.min()) * 1e6, "max_us": float(t.max()) * 1e6,
           "mean_us": mean * 1e6, "iqr_us": float(q3 - q1) * 1e6,
           "cv": float(t.std(ddof=1) / mean) if t.size > 1 and mean > 0 else 0.0, "rounds": int(t.size),
           "rank_spread": float(per_rank.max() / per_rank.min() - 1) if per_rank.min() > 0 else 0.0}
    if t.size >= 20:
        out["p95_us"] = quantiles(t, [95])[0] * 1e6
    if t.size >= 100:
        out["p99_us"] = quantiles(t, [99])[0] * 1e6
    return out


def summarize(round_ns_by_rank: list[list[int]], iters: int) -> dict:
    """Median/min/max/mean/IQR/CV (p95, p99 with enough rounds); rank_spread = slowest rank's
    median / fastest rank's median - 1."""
    return _summary(per_op_seconds(round_ns_by_rank, iters), per_rank_median_seconds(round_ns_by_rank, iters))


def summarize_view(view: RankView) -> dict:
    """summarize() from a stored row of either form: the same numbers as from the whole matrix."""
    return _summary(view.round_max_ns() / view.iters / 1e9, view.medians / view.iters / 1e9)
