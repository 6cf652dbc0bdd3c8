"""Gradient bucketing (benches/test_tuning.py::test_bucket): the layer benches' MLP stack's gradients
all_reduced one per tensor and in buckets of each size (flatten, all_reduce, unflatten, as DDP does);
spec -> (layers.tuning_tasks.TuningRank) -> TuningRow with the step, the calls and how full buckets are."""
from __future__ import annotations

from collectives.sizes import format_size
from kinds import tuning
from kinds.base import Case, Lines, Panel, Ran, heads, knob_suffix, launch_suffix, launches, typed, values
from kinds.options import Options
from schema.kwonly import keyword_dataclass
from schema.results import Cell, TuningRow, metrics
from schema.wire import BucketResult, TuningSpec


@keyword_dataclass
class BucketCase(Case):
    bucket_bytes: int               # the bucket cap; 0: one all_reduce per tensor

    @property
    def id(self) -> str:
        what = format_size(self.bucket_bytes) if self.bucket_bytes else "per-tensor"
        return f"{self.backend}-bucket-{what}{knob_suffix(self.knobs)}{launch_suffix(self.launch, self.side)}"


class BucketKind(tuning.TuningKind[BucketCase]):
    name = "bucket"
    title = "Gradient buckets"
    case_type = BucketCase

    def build(self, opts: Options) -> list[BucketCase]:
        """Every --buckets cap; a cap that makes the same buckets as a smaller one is skipped with the reason."""
        return launches(opts, _build_launch)

    def identity(self, case: BucketCase) -> dict:
        return {**super().identity(case), "bytes": case.bucket_bytes}

    def spec(self, case: BucketCase, opts: Options) -> TuningSpec:
        return self.tuning_spec(opts, bucket_bytes=case.bucket_bytes)

    def row(self, case: BucketCase, opts: Options, ran: Ran) -> TuningRow:
        """The step time, calls per step and how full the buckets are (gradient bytes / (calls x cap));
        DDP closes a bucket once it holds the cap, so a bucket can pass it: fill > 1 is an overshoot."""
        ranks = typed(BucketResult, ran.results)
        fill = ranks[0].model_bytes / (ranks[0].calls * case.bucket_bytes) if case.bucket_bytes else None
        return self.measured(case, ran, ranks, **tuning.gradient_fields(ranks), bucket_bytes=case.bucket_bytes,
                             bucket_fill=fill)

    def panels(self, cells: list[tuple[str, Cell]]) -> list[Panel]:
        """The gradient step against bucket size; one all_reduce per tensor (size 0) as a dashed level."""
        return [Lines("gradient step (us, pooled), log", "bucket size (dashed: one all_reduce per tensor)",
                      tuning.lines(cells, "step_us"), log=True)] if cells else []

    def table(self, rows: list[TuningRow]) -> str:
        """Per bucket size, with the best and its gain over one all_reduce per tensor."""
        shown = metrics(TuningRow, "table", "bucket")
        out: list[str] = []
        for where, block in tuning.blocks(rows):
            out += ["", f"# gradient bucketing: {block[0].tensors} gradient tensors, {format_size(block[0].model_bytes or 0)} "
                        f"float32, DDP-style flatten, all_reduce, x 1/world, unflatten  {where}",
                    f"#{'bucket':>12}" + heads(shown) + tuning.TAIL]
            out += [f" {format_size(r.bytes) if r.bytes else 'per-tensor':>12}" + values(r, shown) + tuning.tail(r)
                    for r in sorted(block, key=lambda r: (r.bytes, r.launch))]
            out.append(_best(block))
        return "\n".join(out)


def _best(rows: list[TuningRow]) -> str:
    sizes = sorted({r.bytes for r in rows})
    steps = {s: tuning.pooled_step(rows, size=s) for s in sizes}
    best = min((s for s in sizes if steps[s]), key=lambda s: steps[s] or 0.0)
    best_step, per_tensor = steps[best] or 0.0, steps.get(0)
    gain = f", {per_tensor / best_step:.2f}x faster than one all_reduce per tensor" if per_tensor and best else ""
    what = f"{format_size(best)} buckets" if best else "one all_reduce per tensor"
    return f"# best: {what} ({best_step:.1f} us per step){gain}"


def _build_launch(opts: Options) -> list[BucketCase]:
    from layers.memory import bucket_plan
    sizes = tuning.gradient_sizes(opts)
    out: list[BucketCase] = []
    for where in tuning.groups(opts):
        seen: dict[int, int] = {}
        for cap in opts.buckets:
            case = BucketCase(**where, bucket_bytes=cap)
            n = len(bucket_plan([4 * s for s in sizes], cap))
            if cap and n in seen:
                case.skip = (f"the same {n} bucket{'s' if n > 1 else ''} as {format_size(seen[n])} for the "
                             f"{format_size(4 * sum(sizes))} of gradients")
            seen.setdefault(n, cap)
            out.append(case)
    return out


KIND = BucketKind()
