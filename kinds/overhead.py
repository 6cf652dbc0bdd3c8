"""The harness's own cost (benches/test_overhead.py): its timed loop against a bare loop of the same
all_reduce, same buffers, same worker, rounds interleaved; spec -> (collectives.rank_tasks.OverheadRank)
-> OverheadRow, a session record (results.json's `overhead`), never a cell that is compared."""
from __future__ import annotations

from collectives.sizes import format_size
from kinds.base import Case, Kind, Ran, typed
from kinds.options import Options
from schema import stats
from schema.group_key import GroupKey
from schema.kwonly import keyword_dataclass
from schema.results import OverheadRow
from schema.wire import OverheadResult, OverheadSpec

SIZES = (8, 1 << 10, 64 << 10, 1 << 20, 4 << 20)


@keyword_dataclass
class OverheadCase(Case):
    size: int

    @property
    def count(self) -> int:
        return max(1, self.size // 4)

    @property
    def id(self) -> str:
        return f"{self.backend}-{self.size}B"


class OverheadKind(Kind[OverheadCase]):
    name = "overhead"
    title = "Harness overhead"
    case_type = OverheadCase
    row_type = OverheadRow
    spec_types = (OverheadSpec,)
    rank = ("collectives.rank_tasks", "OverheadRank")
    record_key = "overhead"
    cells = False

    def build(self, opts: Options) -> list[OverheadCase]:
        return [OverheadCase(backend=b, nranks=opts.nproc, size=s, group=GroupKey(b, opts.nproc, (), opts.launcher))
                for b in opts.backends for s in SIZES]

    def what(self, case: OverheadCase) -> str:
        return f"overhead all_reduce {case.size}B backend={case.backend}"

    def spec(self, case: OverheadCase, opts: Options) -> OverheadSpec:
        plan = opts.plan()
        if opts.benchmark:
            plan["rounds"] = max(plan["rounds"], 40)
        return OverheadSpec(count=case.count, plan=plan)

    def row(self, case: OverheadCase, opts: Options, ran: Ran) -> OverheadRow:
        ranks = typed(OverheadResult, ran.results)
        k = ranks[0].iters
        h_med = stats.median_seconds([r.round_ns for r in ranks], k)
        p_med = stats.median_seconds([r.plain_round_ns for r in ranks], k)
        return OverheadRow(backend=case.backend, bytes=case.count * 4, nranks=case.nranks, iters_per_round=k,
                           time_us=h_med * 1e6, plain_us=p_med * 1e6, ratio=h_med / p_med if p_med > 0 else float("inf"),
                           added_us=(h_med - p_med) * 1e6, round_ns_per_rank=[r.round_ns for r in ranks],
                           plain_round_ns_per_rank=[r.plain_round_ns for r in ranks])

    def table(self, rows: list[OverheadRow]) -> str:
        return "\n".join(["# harness overhead: harness loop vs a bare loop of the same call, same buffers, same worker",
                          f"#{'backend':>8} {'size':>10} {'harness(us)':>12} {'plain(us)':>10} {'ratio':>7} {'added(us)':>10}"]
                         + [f" {r.backend:>8} {format_size(r.bytes):>10} {r.time_us:>12.3f} {r.plain_us:>10.3f} "
                            f"{r.ratio:>7.3f} {r.added_us:>10.3f}" for r in rows])


KIND = OverheadKind()
