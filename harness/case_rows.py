"""The driver half of each bench kind, one class each (CollectiveBench, OverheadBench, LayerBench,
TuningBench): `spec` turns a case into the schema.wire spec its ranks run (their half:
collectives.rank_tasks, layers.rank_tasks, layers.tuning_tasks), `row` turns the ranks' typed
results into the case's row, every derived metric (times, bandwidths, efficiency, bubble, memory)
computed here from the rank x round matrices. Each row keeps
the round matrix whole up to stats.FULL_MATRIX_RANKS ranks and summarised past it (stats.rank_rounds);
`places` (rank -> (host, local rank), as the ranks reported) names the slowest ranks of big groups."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from collectives.ops import bandwidths
from harness.cases import Case, LayerCase, TuningCase
from harness.options import Options
from layers import memory, schedules
from layers.mesh import ParallelDims, tp_placement
from schema import stats
from schema.results import CollectiveRow, LayerRow, Series, TuningRow, link_class
from schema.wire import (
    TASK_OF_BENCH,
    BucketResult,
    CollectiveResult,
    CollectiveSpec,
    CompressResult,
    LayerSpec,
    OverheadResult,
    OverheadSpec,
    OverlapResult,
    PipelineResult,
    TpResult,
    TuningSpec,
    result_from_json,
)


def identity(case: Case | LayerCase | TuningCase) -> dict:
    """The row fields that name the case's cell, computed once: the row builders below start from
    them and cell_key derives the cell from them, so the two cannot disagree."""
    common = {"backend": case.backend, "nranks": case.nranks, "knobs": case.knobs}
    if isinstance(case, Case):
        return {**common, "algo": case.algo, "op": case.op, "dtype": case.dtype, "redop": case.redop,
                "inplace": case.inplace, "bytes": case.nbytes, "graph": case.graph}
    if isinstance(case, TuningCase):
        overlap = {"op": case.op, "dtype": case.dtype, "bytes": case.nbytes, "count": case.count}
        return {**common, "bench": case.bench, **(overlap if case.bench == "overlap" else {"bytes": case.size}),
                **({"comm_dtype": case.comm_dtype} if case.bench == "compress" else {})}
    dims = {"tp": case.tp, "pp": case.pp, "dp": case.dp}
    if case.bench == "linear":
        return {**common, **dims, "bench": "linear", "layer": case.layer, "sequence_parallel": case.sp, "impl": case.impl}
    return {**common, **dims, "bench": "pipeline", "schedule": case.schedule, "microbatches": case.microbatches}


ROW_TYPES = ((Case, CollectiveRow), (TuningCase, TuningRow), (LayerCase, LayerRow))


def cell_key(case: Case | LayerCase | TuningCase) -> tuple[Series, int]:
    """The (series, size) the case's rows will have, by Series.of_fields, the one derivation Series.of uses."""
    fields = identity(case)
    row_type = next(row for kind, row in ROW_TYPES if isinstance(case, kind))
    return Series.of_fields(row_type, fields), fields.get("bytes", 0)


def _bandwidths(summary: dict, op: str, nbytes: int, nranks: int, algo: str) -> dict:
    algbw, busbw = bandwidths(op, nbytes, summary["time_us"] * 1e-6, nranks, algo)
    return {**summary, "algbw_gbps": algbw, "busbw_gbps": busbw}


def _typed(cls, results: list[dict]) -> list:
    """The ranks' results as `cls` (schema.wire), each checked: a reply missing a field is one line."""
    return [result_from_json(cls, r, f"rank {i}'s result") for i, r in enumerate(results)]


class CollectiveBench:
    """A collective op at one size: spec -> (collectives.rank_tasks.CollectiveRank) -> CollectiveRow."""

    @staticmethod
    def spec(case: Case, opts: Options) -> CollectiveSpec:
        plan = opts.plan()
        return CollectiveSpec(op=case.op, dtype=case.dtype, redop=case.redop, inplace=case.inplace, count=case.count,
                              plan={**plan, "graph": True} if case.graph else plan)

    @staticmethod
    def row(case: Case, results: list[dict], hosts: dict, places: dict | None = None) -> CollectiveRow:
        ranks: list[CollectiveResult] = _typed(CollectiveResult, results)
        k = ranks[0].iters
        matrix = [r.round_ns for r in ranks]
        assert case.group is not None
        return CollectiveRow(
            launch=case.launch, side=case.side, rounds_interleaved=case.partner is not None, **identity(case),
            size=case.size, count=case.count,
            **_bandwidths(stats.summarize(matrix, k), case.op, case.nbytes, case.nranks, case.algo),
            wrong=sum(r.wrong for r in ranks), wrong_per_rank=[r.wrong for r in ranks],
            iters_per_round=k, calibration=ranks[0].calibration, **stats.rank_rounds(matrix, places),
            algo_env=case.env, group_env=case.group.rank_env, hosts=hosts, link_class=link_class(hosts))


class LayerBench:
    """A TP block or a pipeline step: spec -> (layers.rank_tasks.LayerRank) -> LayerRow."""

    @staticmethod
    def spec(case: LayerCase, opts: Options) -> LayerSpec:
        plan = {**opts.plan(), "warmup": max(1, min(opts.warmup, 2))}
        common: dict[str, Any] = {"task": TASK_OF_BENCH[case.bench], "tp": case.tp, "pp": case.pp, "hidden": opts.hidden,
                                  "seq": opts.seq, "batch": opts.batch, "plan": plan}
        if case.bench == "linear":
            return LayerSpec(**common, layer=case.layer, sp=case.sp, impl=case.impl)
        return LayerSpec(**common, schedule=case.schedule, microbatches=case.microbatches, layers=opts.layers)

    @staticmethod
    def row(case: LayerCase, o: Options, results: list[dict], hosts: dict, rank_hosts: dict[int, str],
            places: dict | None = None) -> LayerRow:
        """A TP block's times, throughput and efficiency, or a pipeline step's time and bubble; wrong:
        the elements past the tolerance in the check against the single-rank reference (layers.check)."""
        ranks = _typed(TpResult if case.bench == "linear" else PipelineResult, results)
        k = ranks[0].iters
        step = [r.round_ns for r in ranks]
        row = LayerRow(
            launch=case.launch, side=case.side, rounds_interleaved=case.partner is not None, **identity(case),
            hidden=o.hidden, seq=o.seq, batch=o.batch, **stats.summarize(step, k),
            iters_per_round=k, calibration=ranks[0].calibration, **stats.rank_rounds(step, places), hosts=hosts,
            wrong=sum(r.wrong for r in ranks), wrong_per_rank=[r.wrong for r in ranks],
            checked=sum(r.checked for r in ranks), err_to_tol=max(r.err_to_tol for r in ranks),
            group_env=case.group.rank_env if case.group else {},
            peak_memory_bytes_per_rank=[r.peak_memory_bytes for r in ranks],
            model_states_estimate_bytes=int(sum(memory.model_states(max(r.params_local for r in ranks), 1, 1))),
            placement_warnings=tp_placement(ParallelDims.fit(case.tp, case.pp, case.nranks), rank_hosts))
        step_s = stats.median_seconds(step, k)
        if case.bench == "linear":
            tps: list[TpResult] = ranks
            fwd_s = stats.median_seconds([r.fwd_ns for r in tps], k)
            fb_s = stats.median_seconds([r.fwd_bwd_ns for r in tps], k)
            mm_s = stats.median_seconds([r.matmul_ns for r in tps], k)
            flops = tps[0].flops_per_iter
            shares = [r.comm_share for r in tps if r.comm_share is not None]
            share = sum(shares) / len(shares) if shares else None
            return replace(row, fwd_us=fwd_s * 1e6,
                           bwd_us=(fb_s - fwd_s) * 1e6, step_us=step_s * 1e6,
                           tokens_per_s=tps[0].tokens_per_iter / step_s, achieved_flops=flops / fb_s,
                           matmul_flops=flops / mm_s, efficiency=mm_s / fb_s,
                           comm_share=share, comm_exposed_us=share * fb_s * 1e6 if share is not None else None)
        pps: list[PipelineResult] = ranks
        m = case.microbatches
        # the step ends when its slowest rank does; each rank's own compute fills part of it
        compute = stats.per_rank_median_seconds([r.compute_ns for r in pps], k)
        bubbles = [float(1 - m * c / step_s) for c in compute]
        return replace(row, layers=o.layers, step_us=step_s * 1e6,
                       tokens_per_s=o.seq * o.batch / step_s, stage_compute_us_per_microbatch=[float(c) * 1e6 for c in compute],
                       bubble_measured=sum(bubbles) / len(bubbles), bubble_per_rank=bubbles,
                       bubble_theory=schedules.bubble_theory(case.schedule, case.pp, m),
                       stages_per_rank=[r.stages for r in pps])


TUNING_RESULTS = {"overlap": OverlapResult, "bucket": BucketResult, "compress": CompressResult}


class TuningBench:
    """Overlap, bucketing or compression: spec -> (layers.tuning_tasks.TuningRank) -> TuningRow."""

    @staticmethod
    def spec(case: TuningCase, opts: Options) -> TuningSpec:
        common: dict[str, Any] = {"bench": case.bench, "hidden": opts.hidden, "layers": opts.layers, "plan": opts.plan()}
        if case.bench == "overlap":
            return TuningSpec(**common, op=case.op, dtype=case.dtype, redop=case.redop, count=case.count, inplace=case.inplace)
        return TuningSpec(**common, bucket_bytes=case.size, comm_dtype=case.comm_dtype)

    @staticmethod
    def row(case: TuningCase, results: list[dict], hosts: dict, places: dict | None = None) -> TuningRow:
        """Overlap: each loop's median per-iteration time (slowest rank per round) and the efficiency
        (t_comm + t_comp - t_both) / min(t_comm, t_comp), clipped to [0, 1] with the raw value kept.
        Bucketing and compression: the step time, calls per step, for bucketing how full the buckets
        are (gradient bytes / (calls x cap)), for compression the error."""
        ranks = _typed(TUNING_RESULTS[case.bench], results)
        k = ranks[0].iters
        step = [r.round_ns for r in ranks]
        first = ranks[0]
        row = TuningRow(
            launch=case.launch, side=case.side, rounds_interleaved=case.partner is not None, **identity(case),
            **stats.summarize(step, k), iters_per_round=k, calibration=first.calibration,
            **stats.rank_rounds(step, places), hosts=hosts, group_env=case.group.rank_env if case.group else {},
            wrong=sum(r.wrong for r in ranks))
        if isinstance(first, OverlapResult):
            both = stats.median_seconds(step, k)
            comm = stats.median_seconds([r.comm_round_ns for r in ranks], k)
            comp = stats.median_seconds([r.comp_round_ns for r in ranks], k)
            raw = (comm + comp - both) / min(comm, comp)
            return replace(row, t_comm_us=comm * 1e6, t_comp_us=comp * 1e6, t_both_us=both * 1e6,
                           overlap_efficiency=min(1.0, max(0.0, raw)), overlap_efficiency_raw=raw, matmul_n=first.matmul_n)
        common = {"step_us": stats.median_seconds(step, k) * 1e6, "calls": first.calls,
                  "tensors": first.tensors, "model_bytes": first.model_bytes}
        if not isinstance(first, CompressResult):
            # DDP closes a bucket once it holds the cap, so a bucket can pass it: fill > 1 is an overshoot
            fill = first.model_bytes / (first.calls * case.size) if case.size else None
            return replace(row, **common, bucket_bytes=case.size, bucket_fill=fill)
        return replace(row, **common, bucket_bytes=first.bucket_bytes, max_rel_error=first.max_rel_error,
                       mean_rel_error=first.mean_rel_error, error_bound=first.error_bound)


class OverheadBench:
    """The harness loop against a bare loop of the same call: the harness's own cost per op
    (collectives.rank_tasks.OverheadRank); its row is the session's `overhead` record."""

    @staticmethod
    def spec(count: int, plan: dict) -> OverheadSpec:
        return OverheadSpec(count=count, plan=plan)

    @staticmethod
    def row(backend: str, nranks: int, count: int, results: list[dict]) -> dict:
        ranks: list[OverheadResult] = _typed(OverheadResult, results)
        k = ranks[0].iters
        h_med = stats.median_seconds([r.round_ns for r in ranks], k)
        p_med = stats.median_seconds([r.plain_round_ns for r in ranks], k)
        return {"backend": backend, "op": "all_reduce", "dtype": "float32", "bytes": count * 4, "nranks": nranks,
                "iters_per_round": k, "time_us": h_med * 1e6, "plain_us": p_med * 1e6,
                "ratio": h_med / p_med if p_med > 0 else float("inf"), "added_us": (h_med - p_med) * 1e6,
                "round_ns_per_rank": [r.round_ns for r in ranks],
                "plain_round_ns_per_rank": [r.plain_round_ns for r in ranks]}


BENCHES = {Case: CollectiveBench, LayerCase: LayerBench, TuningCase: TuningBench}   # case type -> its driver half
collective_row, layer_row, tuning_row, overhead_row = CollectiveBench.row, LayerBench.row, TuningBench.row, OverheadBench.row
