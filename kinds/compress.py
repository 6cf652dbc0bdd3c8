"""Compressed gradients (benches/test_tuning.py::test_compress): the layer benches' MLP gradients
all_reduced in float32, bfloat16, float16 and int8, each with its error against the exact mean;
spec -> (layers.tuning_tasks.TuningRank) -> TuningRow with the step, the speed-up and the error."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from collectives import capabilities
from collectives.backends import info
from collectives.capabilities import DeviceFacts
from collectives.sizes import format_size
from kinds import tuning
from kinds.base import Case, Kind, Ran, capability_skip, heads, knob_suffix, launch_suffix, launches, typed, values, wrong_text
from schema import stats
from schema.group_key import GroupKey
from schema.kwonly import keyword_dataclass
from schema.results import TuningRow, metrics
from schema.wire import CompressResult, TuningSpec

if TYPE_CHECKING:
    from kinds.options import Options


@keyword_dataclass
class CompressCase(Case):
    comm_dtype: str
    gradient_bytes: int             # the float32 gradients, all_reduced in one bucket

    @property
    def id(self) -> str:
        return f"{self.backend}-compress-{self.comm_dtype}{knob_suffix(self.knobs)}{launch_suffix(self.launch, self.side)}"


class CompressKind(Kind[CompressCase]):
    name = "compress"
    title = "Compressed gradients"
    fixture = "compress_case"
    case_type = CompressCase
    row_type = TuningRow
    spec_types = (TuningSpec,)
    rank = ("layers.tuning_tasks", "TuningRank")

    def build(self, opts: Options) -> list[CompressCase]:
        return build(opts)

    def identity(self, case: CompressCase) -> dict:
        return {**super().identity(case), "bench": "compress", "bytes": case.gradient_bytes, "comm_dtype": case.comm_dtype}

    def spec(self, case: CompressCase, opts: Options) -> TuningSpec:
        return TuningSpec(**tuning.spec_fields("compress", opts), bucket_bytes=case.gradient_bytes, comm_dtype=case.comm_dtype)

    def row(self, case: CompressCase, opts: Options, ran: Ran) -> TuningRow:
        """The step time, calls per step and the error against the exact mean with its bound."""
        ranks = typed(CompressResult, ran.results)
        first = ranks[0]
        return replace(tuning.measured_row(case, self.identity(case), ran, ranks),
                       step_us=stats.median_seconds([r.round_ns for r in ranks], first.iters) * 1e6, calls=first.calls,
                       tensors=first.tensors, model_bytes=first.model_bytes, bucket_bytes=first.bucket_bytes,
                       max_rel_error=first.max_rel_error, mean_rel_error=first.mean_rel_error, error_bound=first.error_bound)

    def table(self, rows: list[TuningRow]) -> str:
        """Per dtype, its speed-up over float32 and its error."""
        shown = metrics(TuningRow, "table", "compress")
        out: list[str] = []
        for where, block in tuning.blocks(rows):
            base = tuning.pooled_step(block, "float32")
            out += ["", f"# compressed gradients: {format_size(block[0].model_bytes or 0)} float32 in "
                        f"{format_size(block[0].bucket_bytes or 0)} buckets  {where}",
                    "#   against the exact mean: max |err| / max |exact|, mean |err| / mean |exact|; bound: what the",
                    "#   type's rounding allows, relative to max |exact| (layers/tuning_tasks.error_bound)",
                    f"#{'comm dtype':>12} {'speed-up':>9}" + heads(shown) + tuning.TAIL]
            for r in sorted(block, key=lambda r: (str(r.comm_dtype), r.launch)):
                speedup = f"{base / r.step_us:.2f}x" if base and r.step_us else "-"
                out.append(f" {r.comm_dtype:>12} {speedup:>9}" + values(r, shown) + f" {wrong_text(r.wrong):>7} {r.launch:>6}")
        return "\n".join(out)


def build(opts: Options, facts: Iterable[DeviceFacts] = ()) -> list[CompressCase]:
    """`facts` stand in for devices this machine lacks (unit tests)."""
    known = {f.backend: f for f in facts}
    return launches(opts, lambda o: _build_launch(o, known))


def _build_launch(opts: Options, facts: dict[str, DeviceFacts]) -> list[CompressCase]:
    model = 4 * sum(tuning.gradient_sizes(opts))
    out: list[CompressCase] = []
    for backend in opts.backends:
        key = GroupKey(backend, opts.nproc, (), opts.launcher)
        target = capabilities.Target.of(facts.get(backend) or info(backend).facts(), opts.nproc, opts.launcher)
        for comm_dtype in opts.comm_dtypes:
            case = CompressCase(backend=backend, nranks=opts.nproc, comm_dtype=comm_dtype, gradient_bytes=model, group=key)
            if comm_dtype not in info(backend).dtypes:
                case.skip = (f"{info(backend).library} has no {comm_dtype} datatype to sum in "
                             f"({info(backend).api}: {', '.join(info(backend).dtypes)})")
            else:
                case.skip = capability_skip(target, "default", "all_reduce", comm_dtype, "sum")
            out.append(case)
    return out


KIND = CompressKind()
