"""Compute/communication overlap (benches/test_tuning.py::test_overlap): an async collective
(async_op=True, MPI_I*) started, a matmul sized to take about as long, then the wait; against each
alone, per message size; spec -> (layers.tuning_tasks.TuningRank) -> TuningRow."""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

from collectives.capabilities import DeviceFacts
from collectives.ops import ITEMSIZE, OPS
from collectives.sizes import format_size
from kinds import tuning
from kinds.base import (
    Case,
    Lines,
    Panel,
    Ran,
    capability_skip,
    heads,
    inplace_choices,
    knob_suffix,
    launch_suffix,
    launches,
    no_dtype,
    typed,
    values,
)
from kinds.options import Options
from schema import stats
from schema.kwonly import keyword_dataclass
from schema.results import Cell, TuningRow, metrics
from schema.wire import OverlapResult, TuningSpec

OPS_WITH_ASYNC = tuple(name for name, op in OPS.items() if op.has_async)   # the ones with an asynchronous form everywhere


@keyword_dataclass
class OverlapCase(Case):
    op: str
    dtype: str
    size: int                       # message bytes asked for
    redop: str = "sum"
    inplace: bool = False
    count: int = 0
    nbytes: int = 0

    @property
    def id(self) -> str:
        what = f"{self.op}-{self.dtype}-{format_size(self.size)}"
        return f"{self.backend}-overlap-{what}{knob_suffix(self.knobs)}{launch_suffix(self.launch, self.side)}"


class OverlapKind(tuning.TuningKind[OverlapCase]):
    name = "overlap"
    title = "Compute/communication overlap"
    case_type = OverlapCase

    def build(self, opts: Options) -> list[OverlapCase]:
        return build(opts)

    def identity(self, case: OverlapCase) -> dict:
        return {**super().identity(case), "op": case.op, "dtype": case.dtype, "bytes": case.nbytes, "count": case.count}

    def spec(self, case: OverlapCase, opts: Options) -> TuningSpec:
        return self.tuning_spec(opts, op=case.op, dtype=case.dtype, redop=case.redop, count=case.count,
                                inplace=case.inplace)

    def row(self, case: OverlapCase, opts: Options, ran: Ran) -> TuningRow:
        """Each loop's median per-iteration time (slowest rank per round) and the efficiency
        (t_comm + t_comp - t_both) / min(t_comm, t_comp), clipped to [0, 1] with the raw value kept."""
        ranks = typed(OverlapResult, ran.results)
        k = ranks[0].iters
        both = stats.median_seconds([r.round_ns for r in ranks], k)
        comm = stats.median_seconds([r.comm_round_ns for r in ranks], k)
        comp = stats.median_seconds([r.comp_round_ns for r in ranks], k)
        raw = (comm + comp - both) / min(comm, comp)
        return self.measured(case, ran, ranks, t_comm_us=comm * 1e6, t_comp_us=comp * 1e6, t_both_us=both * 1e6,
                             overlap_efficiency=min(1.0, max(0.0, raw)), overlap_efficiency_raw=raw,
                             matmul_n=ranks[0].matmul_n)

    def panels(self, cells: list[tuple[str, Cell]]) -> list[Panel]:
        """Overlap efficiency against message size, a line per run, backend, op and knob value."""
        return [Lines("overlap efficiency (pooled)", "message size", tuning.lines(cells, "overlap_efficiency"))] if cells else []

    def table(self, rows: list[TuningRow]) -> str:
        shown = metrics(TuningRow, "table", "overlap")
        out: list[str] = []
        for where, block in tuning.blocks(rows):
            r0 = block[0]
            out += ["", f"# overlap: {r0.op} {r0.dtype} started async, a matmul sized to match, then wait  {where}",
                    "#   efficiency = (comm + comp - both) / min(comm, comp), clipped to [0, 1] (raw in brackets)",
                    f"#{'size':>12} {'matmul n':>9}" + heads(shown) + tuning.TAIL]
            out += [f" {r.bytes:>12} {r.matmul_n or 0:>9}" + values(r, shown) + tuning.tail(r)
                    for r in sorted(block, key=lambda r: (r.bytes, r.launch))]
        return "\n".join(out)


def build(opts: Options, facts: Iterable[DeviceFacts] = ()) -> list[OverlapCase]:
    """`facts` stand in for devices this machine lacks (unit tests)."""
    known = tuple(facts)
    return launches(opts, lambda o: list(_build_launch(o, known)))


def _build_launch(opts: Options, facts: Iterable[DeviceFacts]) -> Iterator[OverlapCase]:
    for where, target in zip(tuning.groups(opts), tuning.targets(opts, facts)):
        backend = where["backend"]
        asynchronous = [op for op in opts.ops if op in OPS_WITH_ASYNC]
        for op, dtype, size in itertools.product(asynchronous, opts.dtypes, opts.sizes):
            count = OPS[op].count_for(size, ITEMSIZE[dtype], opts.nproc)
            case = OverlapCase(**where, op=op, dtype=dtype, size=size, inplace=inplace_choices(backend, op, ("auto",))[0][0],
                               count=count, nbytes=count * ITEMSIZE[dtype])
            case.skip = no_dtype(backend, dtype) or capability_skip(
                target, "default", op, dtype, "sum" if OPS[op].reduces else "none")
            yield case


KIND = OverlapKind()
