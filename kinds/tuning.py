"""What the three tuning kinds share (kinds/overlap.py, bucket.py, compress.py): the gradients of the
layer benches' MLP stack they move, the spec fields, the row's measured part and the table's blocks."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kinds.base import Case, Ran, placed
from schema import stats
from schema.results import Cell, TuningRow, knob_text, side_role
from schema.wire import Timed

if TYPE_CHECKING:
    from kinds.options import Options


def spec_fields(bench: str, opts: Options) -> dict[str, Any]:
    return {"bench": bench, "hidden": opts.hidden, "layers": opts.layers, "plan": opts.plan()}


def gradient_sizes(opts: Options) -> list[int]:
    """Elements of each gradient tensor of the layer benches' MLP stack (layers.memory)."""
    from layers.memory import mlp_gradient_sizes
    return mlp_gradient_sizes(opts.hidden, opts.layers)


def measured_row(case: Case, identity: dict, ran: Ran, ranks: Sequence[Timed]) -> TuningRow:
    """The row's common part: time_us is the step each bench times."""
    k = ranks[0].iters
    step = [r.round_ns for r in ranks]
    return TuningRow(**placed(case), **identity, **stats.summarize(step, k), iters_per_round=k,
                     calibration=ranks[0].calibration, **stats.rank_rounds(step, ran.places), hosts=ran.hosts,
                     group_env=case.group.rank_env if case.group else {}, wrong=sum(r.wrong for r in ranks))


def blocks(rows: list[TuningRow]) -> list[tuple[str, list[TuningRow]]]:
    """The rows per (backend, op, dtype, ranks, side, knobs), each with the line that says where it ran."""
    groups: dict[tuple, list[TuningRow]] = {}
    for r in rows:
        groups.setdefault((r.backend, r.op, r.dtype, r.nranks, r.side, knob_text(r.knobs)), []).append(r)
    return [(f"backend={backend}  nranks={nranks}" + (f"  {side_role(side)}" if side else "") + (f"  [{knobs}]" if knobs else ""),
             block) for (backend, _, _, nranks, side, knobs), block in groups.items()]


def pooled_step(rows: list[TuningRow], comm_dtype: str | None = None, size: int | None = None) -> float | None:
    """The median step time over launches of the rows with this dtype or size."""
    steps = [r.step_us for r in rows if r.step_us and (comm_dtype is None or r.comm_dtype == comm_dtype)
             and (size is None or r.bytes == size)]
    return float(stats.median(steps)) if steps else None


TAIL = f" {'#wrong':>7} {'launch':>6}"


def lines(cells: list[tuple[str, Cell]], metric: str) -> dict[str, list[tuple[float, float]]]:
    """A line per series and run: (size, the metric pooled over launches) at each size it has."""
    out: dict[str, list[tuple[float, float]]] = {}
    for name, c in cells:
        if (value := c.pooled(metric)) is not None:
            out.setdefault(f"{c.series.label()} [{name}]", []).append((c.size, value))
    return {label: sorted(points) for label, points in out.items()}
