"""Pipeline steps (benches/test_layers.py::test_pipeline): torch.distributed.pipelining schedules at
every (tp, pp > 1), schedule and microbatch count; spec -> (layers.rank_tasks.PipelineRank) -> LayerRow
with the step time and the measured bubble against the schedule's theory."""
from __future__ import annotations

import itertools

from kinds.base import Bars, Panel, Ran, cell_label, heads, knob_suffix, launch_suffix, typed, values
from kinds.layer import LayerCase, LayerKind, no_torch, spec_fields
from kinds.options import Options
from layers import schedules
from schema import stats
from schema.group_key import GroupKey
from schema.kwonly import keyword_dataclass
from schema.results import Cell, LayerRow, metrics
from schema.wire import PipelineResult, PipelineSpec


@keyword_dataclass
class PipelineCase(LayerCase):
    schedule: str
    microbatches: int

    @property
    def id(self) -> str:
        name = f"{self.backend}-pipeline-tp{self.tp}-pp{self.pp}-{self.schedule}-m{self.microbatches}"
        return name + knob_suffix(self.knobs) + launch_suffix(self.launch, self.side)


class PipelineKind(LayerKind[PipelineCase]):
    name = "pipeline"
    title = "Pipeline steps"
    case_type = PipelineCase
    spec_types = (PipelineSpec,)
    rank = ("layers.rank_tasks", "PipelineRank")

    def cases(self, opts: Options, backend: str, key: GroupKey) -> list[PipelineCase]:
        """Every (tp, pp > 1), schedule and microbatch count; layouts whose tp x pp does not divide
        the world size are skipped with the reason."""
        from layers import support  # what the installed torch lacks (imports torch: only when layer benches are collected)
        return [PipelineCase(backend=backend, tp=tp, pp=pp, nranks=opts.nproc, schedule=schedule, microbatches=m, group=key,
                             skip=(no_torch(backend)
                                   or (f"tp x pp = {tp} x {pp} = {tp * pp} does not divide the world size {opts.nproc}"
                                       if opts.nproc % (tp * pp) else "")
                                   or (f"pp=1 has no pipeline: tp={tp} is measured by the linear benches" if pp == 1 else "")
                                   or support.missing("pipeline", schedule=schedule)))
                for tp, pp, schedule, m in itertools.product(opts.tp, opts.pp, opts.schedules, opts.microbatches)]

    def identity(self, case: PipelineCase) -> dict:
        return {**super().identity(case), "schedule": case.schedule, "microbatches": case.microbatches}

    def spec(self, case: PipelineCase, opts: Options) -> PipelineSpec:
        return PipelineSpec(**spec_fields(case, opts), schedule=case.schedule, microbatches=case.microbatches,
                            layers=opts.layers)

    def row(self, case: PipelineCase, opts: Options, ran: Ran) -> LayerRow:
        """The step ends when its slowest rank does; each rank's own compute fills part of it:
        bubble = 1 - microbatches x compute / step, per rank, against the schedule's theory."""
        ranks = typed(PipelineResult, ran.results)
        k = ranks[0].iters
        step_s = stats.median_seconds([r.round_ns for r in ranks], k)
        m = case.microbatches
        compute = stats.per_rank_median_seconds([r.compute_ns for r in ranks], k)
        bubbles = [float(1 - m * c / step_s) for c in compute]
        return self.measured_row(case, opts, ran, ranks, layers=opts.layers, step_us=step_s * 1e6,
                                 tokens_per_s=opts.seq * opts.batch / step_s,
                                 stage_compute_us_per_microbatch=[float(c) * 1e6 for c in compute],
                                 bubble_measured=sum(bubbles) / len(bubbles), bubble_per_rank=bubbles,
                                 bubble_theory=schedules.bubble_theory(case.schedule, case.pp, m),
                                 stages_per_rank=[r.stages for r in ranks])

    def panels(self, cells: list[tuple[str, Cell]]) -> list[Panel]:
        """The step per configuration, and its measured bubble against the schedule's theory."""
        return [*super().panels(cells), Bars("pipeline bubble (share of the step)", [cell_label(n, c) for n, c in cells],
                                             {"measured": [c.pooled("bubble_measured") or 0.0 for _, c in cells],
                                              "theory": [c.pooled("bubble_theory") or 0.0 for _, c in cells]})] if cells else []

    def table(self, rows: list[LayerRow]) -> str:
        """Step time and bubble; the measured columns are the row's table metrics for this bench."""
        if not rows:
            return ""
        shown = metrics(LayerRow, "table", "pipeline")
        out = ["# pipeline steps (bubble measured = 1 - microbatches x stage compute alone / step time;",
               "# theory (p-1)/(m+p-1), interleaved (p-1)/(v*m+p-1), zero-bubble -)",
               f"#{'backend':>8} {'tp':>3} {'pp':>3} {'dp':>3} {'schedule':>16} {'m':>3}" + heads(shown)]
        out += [f" {r.backend:>8} {r.tp:>3} {r.pp:>3} {r.dp:>3} {r.schedule:>16} {r.microbatches:>3}" + values(r, shown)
                for r in rows]
        return "\n".join(out)


KIND = PipelineKind()
