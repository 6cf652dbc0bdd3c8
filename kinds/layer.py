"""What the two layer kinds share (kinds/linear.py: TP blocks, kinds/pipeline.py: pipeline steps): a
case on a tp x pp x dp layout, their Kind base, the model's spec fields and the row's measured common part."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from collectives.backends import BACKENDS, info
from kinds.base import Bars, C, Case, Kind, Panel, Ran, cell_label, launches, placed
from kinds.options import Options
from layers import memory
from layers.mesh import ParallelDims, tp_placement
from schema import stats
from schema.group_key import GroupKey
from schema.kwonly import keyword_dataclass
from schema.results import Cell, LayerRow
from schema.wire import Checked


@keyword_dataclass
class LayerCase(Case):
    tp: int
    pp: int

    @property
    def dp(self) -> int:
        return self.nranks // (self.tp * self.pp) if self.nranks % (self.tp * self.pp) == 0 else 0


L = TypeVar("L", bound=LayerCase)


class LayoutKind(Kind[C]):
    """A kind whose cases sit on a tp x pp x dp layout (the layer kinds, the hybrid step), named by it."""

    def what(self, case: Any) -> str:
        return f"{case.id} (tp={case.tp} pp={case.pp} dp={case.dp})"

    def identity(self, case: Any) -> dict:
        return {**super().identity(case), "tp": case.tp, "pp": case.pp, "dp": case.dp}


class LayerKind(LayoutKind[L]):
    """A layer kind: its own spec type and rank half, one LayerRow for both (the stored rows, told
    apart by their bench: the kind's name)."""
    row_type = LayerRow

    def build(self, opts: Options) -> list[L]:
        return launches(opts, lambda o: [case for backend in o.backends
                                         for case in self.cases(o, backend, GroupKey(backend, o.nproc, (), o.launcher))])

    def cases(self, opts: Options, backend: str, key: GroupKey) -> list[L]:
        """One launch's cases of `backend` (skipped ones with their reason)."""
        raise NotImplementedError

    def panels(self, cells: list[tuple[str, Cell]]) -> list[Panel]:
        """Each configuration's step (the pipeline kind adds its bubble)."""
        return [Bars("step time (us), log", [cell_label(n, c) for n, c in cells],
                     {"step": [c.pooled("step_us") or 0.0 for _, c in cells]}, log=True)] if cells else []

    def measured_row(self, case: L, opts: Options, ran: Ran, ranks: Sequence[Checked], **fields) -> LayerRow:
        """A TP block's or pipeline step's row: its common part and the kind's `fields`."""
        return LayerRow(
            **checked_fields(case, ran, ranks), **self.identity(case), hidden=opts.hidden, seq=opts.seq, batch=opts.batch,
            model_states_estimate_bytes=int(sum(memory.model_states(max(r.params_local for r in ranks), 1, 1))),
            placement_warnings=tp_placement(ParallelDims.fit(case.tp, case.pp, case.nranks), ran.rank_hosts), **fields)


def spec_fields(case: LayerCase, opts: Options) -> dict[str, Any]:
    """The spec fields of every layer case: its layout, the model's shape and the timing plan."""
    return {"tp": case.tp, "pp": case.pp, "hidden": opts.hidden, "seq": opts.seq, "batch": opts.batch,
            "plan": {**opts.plan(), "warmup": max(1, min(opts.warmup, 2))}}


def no_torch(backend: str) -> str:
    """Why `backend` cannot run a layer bench ('' if it can)."""
    if info(backend).layers:
        return ""
    layered = ", ".join(b for b, i in BACKENDS.items() if i.layers)
    return f"layer benches need torch.distributed ({layered}), not {info(backend).api}"


def checked_fields(case: Case, ran: Ran, ranks: Sequence[Checked]) -> dict:
    """The row fields of every case checked against a single-rank reference (layers.check): placement,
    round statistics and CPU waits, where it ran, and the check (wrong: elements past the tolerance)."""
    k = ranks[0].iters
    step = [r.round_ns for r in ranks]
    return {**placed(case), **stats.summarize(step, k), "iters_per_round": k, "calibration": ranks[0].calibration,
            "round_cpu_wait_ns": stats.round_waits([r.cpu_wait_ns for r in ranks], len(step[0])),
            **stats.rank_rounds(step, ran.places), "hosts": ran.hosts, "group_env": case.group.rank_env if case.group else {},
            "wrong": sum(r.wrong for r in ranks), "wrong_per_rank": [r.wrong for r in ranks],
            "checked": sum(r.checked for r in ranks), "err_to_tol": max(r.err_to_tol for r in ranks),
            "peak_memory_bytes_per_rank": [r.peak_memory_bytes for r in ranks]}


