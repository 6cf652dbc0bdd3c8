"""Tensor-parallel blocks (benches/test_layers.py::test_linear): a column-parallel linear, a TP MLP
block and its sequence-parallel form, hand-written and through DTensor, at every tp; spec ->
(layers.rank_tasks.LinearRank) -> LayerRow with times, throughput and efficiency against plain GEMMs."""
from __future__ import annotations

import itertools

from collectives.backends import info
from kinds.base import Ran, heads, knob_suffix, launch_suffix, typed, values
from kinds.layer import LayerCase, LayerKind, no_torch, spec_fields
from kinds.options import Options
from schema import stats
from schema.group_key import GroupKey
from schema.kwonly import keyword_dataclass
from schema.results import LayerRow, metrics
from schema.wire import LinearSpec, TpResult

BLOCKS = (("linear", False), ("mlp", False), ("mlp", True))   # (layer, sequence parallel)
IMPLS = ("manual", "dtensor")


@keyword_dataclass
class LinearCase(LayerCase):
    layer: str
    sp: bool = False
    impl: str = ""

    @property
    def id(self) -> str:
        name = f"{self.backend}-linear-tp{self.tp}-{self.layer}{'-sp' if self.sp else ''}-{self.impl}"
        return name + knob_suffix(self.knobs) + launch_suffix(self.launch, self.side)


class LinearKind(LayerKind[LinearCase]):
    name = "linear"
    title = "Tensor-parallel blocks"
    case_type = LinearCase
    spec_types = (LinearSpec,)
    rank = ("layers.rank_tasks", "LinearRank")

    def cases(self, opts: Options, backend: str, key: GroupKey) -> list[LinearCase]:
        """TP blocks for every tp; a tp that does not divide the world size is skipped with the reason."""
        from layers import support  # what the installed torch lacks (imports torch: only when layer benches are collected)
        return [LinearCase(backend=backend, tp=tp, pp=1, nranks=opts.nproc, layer=layer, sp=sp, impl=impl, group=key,
                           skip=(no_torch(backend) or (f"tp {tp} does not divide the world size {opts.nproc}"
                                                       if opts.nproc % tp else "")
                                 or support.missing("linear", impl=impl) or _no_dtensor(backend, impl)))
                for tp, (layer, sp), impl in itertools.product(opts.tp, BLOCKS, IMPLS)]

    def identity(self, case: LinearCase) -> dict:
        return {**super().identity(case), "layer": case.layer, "sequence_parallel": case.sp, "impl": case.impl}

    def spec(self, case: LinearCase, opts: Options) -> LinearSpec:
        return LinearSpec(**spec_fields(case, opts), layer=case.layer, sp=case.sp, impl=case.impl)

    def row(self, case: LinearCase, opts: Options, ran: Ran) -> LayerRow:
        """A TP block's times, throughput and efficiency (plain-GEMM time over fwd+bwd time)."""
        ranks = typed(TpResult, ran.results)
        step_s, fwd_s, fb_s, mm_s = (stats.median_seconds([getattr(r, f) for r in ranks], ranks[0].iters)
                                     for f in ("round_ns", "fwd_ns", "fwd_bwd_ns", "matmul_ns"))
        flops = ranks[0].flops_per_iter
        shares = [r.comm_share for r in ranks if r.comm_share is not None]
        share = sum(shares) / len(shares) if shares else None
        return self.measured_row(case, opts, ran, ranks, fwd_us=fwd_s * 1e6, bwd_us=(fb_s - fwd_s) * 1e6, step_us=step_s * 1e6,
                                 tokens_per_s=ranks[0].tokens_per_iter / step_s, achieved_flops=flops / fb_s,
                                 matmul_flops=flops / mm_s, efficiency=mm_s / fb_s, comm_share=share,
                                 comm_exposed_us=share * fb_s * 1e6 if share is not None else None)

    def table(self, rows: list[LayerRow]) -> str:
        """Times, throughput and efficiency vs a plain matmul; the measured columns are the row's
        table metrics for this bench (schema.results.LayerRow)."""
        if not rows:
            return ""
        shown = metrics(LayerRow, "table", "linear")
        out = ["# tensor-parallel blocks (times: median of the slowest rank; eff = plain-matmul time of the same",
               "# GEMMs / fwd+bwd time; comm = share of fwd+bwd inside the block's collectives, exposed: that time)",
               f"#{'backend':>8} {'tp':>3} {'dp':>3} {'block':>7} {'impl':>8}" + heads(shown)]
        for r in rows:
            block = f"{r.layer}{'+sp' if r.sequence_parallel else ''}"
            out.append(f" {r.backend:>8} {r.tp:>3} {r.dp:>3} {block:>7} {r.impl:>8}" + values(r, shown))
        warned = dict.fromkeys(w for r in rows for w in r.placement_warnings)
        return "\n".join(out + [f"# WARNING: {w}" for w in warned])


def _no_dtensor(backend: str, impl: str) -> str:
    if impl != "dtensor" or info(backend).dtensor:
        return ""
    return (f"DTensor's functional collectives need a per-device c10d backend; {backend}'s torch.distributed "
            "group is a Python process group (collectives/backends/mpi_torch.py), so only the manual TP runs")


KIND = LinearKind()
