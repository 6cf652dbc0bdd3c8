"""Compressed gradients (benches/test_tuning.py::test_compress): the layer benches' MLP gradients
all_reduced in float32, bfloat16, float16 and int8, each with its error against the exact mean;
spec -> (layers.tuning_tasks.TuningRank) -> TuningRow with the step, the speed-up and the error."""
from __future__ import annotations

from collections.abc import Iterable, Iterator

from collectives.backends import info
from collectives.capabilities import DeviceFacts
from collectives.sizes import format_size
from kinds import tuning
from kinds.base import Case, Ran, capability_skip, heads, knob_suffix, launch_suffix, launches, typed, values
from kinds.options import Options
from schema.kwonly import keyword_dataclass
from schema.results import TuningRow, metrics
from schema.wire import CompressResult, TuningSpec


@keyword_dataclass
class CompressCase(Case):
    comm_dtype: str
    gradient_bytes: int             # the float32 gradients, all_reduced in one bucket

    @property
    def id(self) -> str:
        return f"{self.backend}-compress-{self.comm_dtype}{knob_suffix(self.knobs)}{launch_suffix(self.launch, self.side)}"


class CompressKind(tuning.TuningKind[CompressCase]):
    name = "compress"
    title = "Compressed gradients"
    case_type = CompressCase

    def build(self, opts: Options) -> list[CompressCase]:
        return build(opts)

    def identity(self, case: CompressCase) -> dict:
        return {**super().identity(case), "bytes": case.gradient_bytes, "comm_dtype": case.comm_dtype}

    def spec(self, case: CompressCase, opts: Options) -> TuningSpec:
        return self.tuning_spec(opts, bucket_bytes=case.gradient_bytes, comm_dtype=case.comm_dtype)

    def row(self, case: CompressCase, opts: Options, ran: Ran) -> TuningRow:
        """The step time, calls per step and the error against the exact mean with its bound."""
        ranks = typed(CompressResult, ran.results)
        first = ranks[0]
        return self.measured(case, ran, ranks, **tuning.gradient_fields(ranks), bucket_bytes=first.bucket_bytes,
                             max_rel_error=first.max_rel_error, mean_rel_error=first.mean_rel_error,
                             error_bound=first.error_bound)

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
                out.append(f" {r.comm_dtype:>12} {speedup:>9}" + values(r, shown) + tuning.tail(r))
        return "\n".join(out)


def build(opts: Options, facts: Iterable[DeviceFacts] = ()) -> list[CompressCase]:
    """`facts` stand in for devices this machine lacks (unit tests)."""
    known = tuple(facts)
    return launches(opts, lambda o: list(_build_launch(o, known)))


def _build_launch(opts: Options, facts: Iterable[DeviceFacts]) -> Iterator[CompressCase]:
    model = 4 * sum(tuning.gradient_sizes(opts))
    for where, target in zip(tuning.groups(opts), tuning.targets(opts, facts)):
        lib = info(where["backend"])
        for comm_dtype in opts.comm_dtypes:
            case = CompressCase(**where, comm_dtype=comm_dtype, gradient_bytes=model)
            if comm_dtype not in lib.dtypes:
                case.skip = (f"{lib.library} has no {comm_dtype} datatype to sum in "
                             f"({lib.api}: {', '.join(lib.dtypes)})")
            else:
                case.skip = capability_skip(target, "default", "all_reduce", comm_dtype, "sum")
            yield case


KIND = CompressKind()
