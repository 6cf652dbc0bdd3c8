"""What the three tuning kinds share (kinds/overlap.py, bucket.py, compress.py): the gradients of the
layer benches' MLP stack they move, the kind's row, spec and rank half, the row's measured part and
the table's blocks."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from collectives import capabilities
from collectives.backends import info
from collectives.capabilities import DeviceFacts
from kinds.base import C, Kind, Ran, placed, wrong_text
from kinds.options import Options
from schema import stats
from schema.group_key import GroupKey
from schema.results import Cell, TuningRow, knob_text, side_role
from schema.wire import Timed, TuningSpec


class TuningKind(Kind[C]):
    """A tuning kind: a TuningRow from layers.tuning_tasks.TuningRank's results for a TuningSpec."""
    row_type: ClassVar[type] = TuningRow
    spec_types: ClassVar[tuple[type[TuningSpec], ...]] = (TuningSpec,)
    rank: ClassVar[tuple[str, str]] = ("layers.tuning_tasks", "TuningRank")

    def tuning_spec(self, opts: Options, **fields: Any) -> TuningSpec:
        return TuningSpec(bench=self.name, hidden=opts.hidden, layers=opts.layers, plan=opts.plan(), **fields)

    def measured(self, case: C, ran: Ran, ranks: Sequence[Timed], **fields: Any) -> TuningRow:
        """The row's common part (time_us is the step each bench times) and this bench's `fields`."""
        k = ranks[0].iters
        step = [r.round_ns for r in ranks]
        row = TuningRow(**placed(case), **self.identity(case), **stats.summarize(step, k), iters_per_round=k,
                        calibration=ranks[0].calibration, **stats.rank_rounds(step, ran.places), hosts=ran.hosts,
                        group_env=case.group.rank_env if case.group else {}, wrong=sum(r.wrong for r in ranks))
        return replace(row, **fields)


def gradient_sizes(opts: Options) -> list[int]:
    """Elements of each gradient tensor of the layer benches' MLP stack (layers.memory)."""
    from layers.memory import mlp_gradient_sizes
    return mlp_gradient_sizes(opts.hidden, opts.layers)


def gradient_fields(ranks: Sequence[Any]) -> dict[str, Any]:
    """The step, calls per step and gradients that the bucket and compress benches report alike."""
    first = ranks[0]
    return {"step_us": stats.median_seconds([r.round_ns for r in ranks], first.iters) * 1e6, "calls": first.calls,
            "tensors": first.tensors, "model_bytes": first.model_bytes}


def groups(opts: Options) -> list[dict[str, Any]]:
    """Per backend, the fields that place a case in its group."""
    return [{"backend": b, "nranks": opts.nproc, "group": GroupKey(b, opts.nproc, (), opts.launcher)} for b in opts.backends]


def targets(opts: Options, facts: Iterable[DeviceFacts] = ()) -> list[capabilities.Target]:
    """Per backend, the devices it runs on (`facts` stand in for devices this machine lacks: unit tests)."""
    known = {f.backend: f for f in facts}
    return [capabilities.Target.of(known.get(b) or info(b).facts(), opts.nproc, opts.launcher) for b in opts.backends]


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


def tail(r: TuningRow) -> str:
    """A table line's TAIL columns."""
    return f" {wrong_text(r.wrong):>7} {r.launch:>6}"


def lines(cells: list[tuple[str, Cell]], metric: str) -> dict[str, list[tuple[float, float]]]:
    """A line per series and run: (size, the metric pooled over launches) at each size it has."""
    out: dict[str, list[tuple[float, float]]] = {}
    for name, c in cells:
        if (value := c.pooled(metric)) is not None:
            out.setdefault(f"{c.series.label()} [{name}]", []).append((c.size, value))
    return {label: sorted(points) for label, points in out.items()}
