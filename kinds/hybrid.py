"""The hybrid step (benches/test_hybrid.py): one training step of `--layers` MLP blocks on tp x pp x dp
ranks, timed with its parts and each against the repository's models; spec ->
(layers.hybrid_tasks.HybridRank) -> HybridRow. What each figure is: docs/layers.md (`test_hybrid`)."""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import ClassVar

import numpy as np

from collectives.backends import info
from collectives.ops import bandwidths
from kinds.base import (
    Bars,
    Case,
    KindOption,
    KindSettings,
    Panel,
    Ran,
    cell_label,
    heads,
    knob_suffix,
    launch_suffix,
    launches,
    typed,
    values,
    wrong_text,
)
from kinds.layer import LayoutKind, checked_fields, no_torch
from kinds.options import Options, bucket_size, checked, items, names_in
from layers import memory, schedules
from layers.mesh import ParallelDims, tp_placement
from schema import stats
from schema.group_key import GroupKey
from schema.kwonly import keyword_dataclass
from schema.results import MISSING, Cell, Measured, column, metric, metrics
from schema.wire import HybridResult, HybridSpec

SCHEDULES = ("gpipe", "1f1b", "interleaved1f1b")   # the zero-bubble ones split weight gradients out of autograd's hooks
PARTS = ("compute", "tp", "pp", "bubble", "dp")   # the step's parts each timed on every rank, min and max kept
ROUNDS = 8   # at most: a step of the default shape takes ~0.3 s on 2 CPU cores, and its check step warms it up


@keyword_dataclass
class HybridRow(Measured):
    """One layout's training step: its time, its breakdown and each part against the model."""
    KIND: ClassVar[str] = "hybrid"
    BENCHES: ClassVar[tuple[str, ...]] = ("hybrid",)
    KEY: ClassVar[tuple[str, ...]] = ("bench", "backend", "nranks", "tp", "pp", "dp", "schedule", "microbatches", "hidden",
                                      "seq", "batch", "layers", "bucket_bytes", "dist_opt", "grad_reduce", "sp", "vpp")
    bench: str = column("text", MISSING)
    tp: int = column("count", 1)
    pp: int = column("count", 1)
    dp: int = column("count", 1)
    schedule: str = column("text", "")
    microbatches: int = column("count", 1)
    hidden: int = column("count", 1)
    seq: int = column("count", 1)
    batch: int = column("count", 1)
    layers: int = column("count", 1)
    bucket_bytes: int = column("whole", 0)
    dist_opt: bool = column("flag", False)
    grad_reduce: str = column("text", "float32")
    sp: bool = column("flag", False)
    vpp: int = column("whole", 0)
    step_us: float | None = metric("step(ms)", ".1f", "lower", ("table", "compare", "report"), scale=1e3)
    tokens_per_s: float | None = metric("tokens/s", ".0f", "higher", ("table", "compare", "report"))
    tokens_per_s_per_device: float | None = metric("tok/s/dev", ".0f", "higher", ("table", "report"))
    mfu: float | None = metric("MFU", ".4f", "higher", ("table", "report"), "ratio")
    # each part per step, the max over ranks (what Megatron's timers print beside the min)
    compute_min_us: float | None = metric("comp min", ".1f", "lower", ("table",), scale=1e3)
    compute_us: float | None = metric("comp max", ".1f", "lower", ("table",), scale=1e3)
    tp_min_us: float | None = metric("tp min", ".1f", "lower", ("table",), scale=1e3)
    tp_us: float | None = metric("tp max", ".1f", "lower", ("table",), scale=1e3)
    pp_min_us: float | None = metric("pp min", ".1f", "lower", ("table",), scale=1e3)
    pp_us: float | None = metric("pp max", ".1f", "lower", ("table",), scale=1e3)
    bubble_min_us: float | None = metric("bub min", ".1f", "lower", ("table",), scale=1e3)
    bubble_us: float | None = metric("bub max", ".1f", "lower", ("table",), scale=1e3)
    dp_min_us: float | None = metric("dp min", ".1f", "lower", ("table",), scale=1e3)
    dp_us: float | None = metric("dp max", ".1f", "lower", ("table",), scale=1e3)
    other_us: float | None = metric("other", ".1f", "lower", ("table",), "real", scale=1e3)   # a remainder: can be < 0
    timed_step_us: float | None = column("amount")    # the extra run's step, max over ranks
    tp_exposed_us: float | None = column("real")      # step without dp - the same without tp collectives
    dp_exposed_us: float | None = column("real")      # step - step without dp
    bubble: float | None = metric("bubble", ".3f", "lower", ("table", "report"), "real")   # mean over ranks of bubble / its step
    bubble_theory: float | None = metric("theory", ".3f", "lower", ("table",), "ratio")
    model_us: float | None = column("amount")        # (compute + tp + pp) / (1 - theory) + dp
    residual: float | None = metric("resid", ".3f", "lower", ("table",), "real")   # (step - model) / step
    busy_us: float | None = metric("busy(ms)", ".1f", "lower", ("table",), scale=1e3)   # crowded machines' CPU work per core
    peak_flops: float | None = column("amount")      # per device, what MFU is taken against
    peak_source: str = column("text", "")
    tp_bytes: int | None = column("whole")          # all-reduced per rank per step (the model's)
    tp_busbw_gbps: float | None = metric("tp busbw", ".3f", "higher", ("table",))
    dp_bytes: int | None = column("whole")          # gradient bytes each rank reduces per step, in grad_reduce
    pp_bytes: int | None = column("whole")          # sent + received by the pipeline per step, max over ranks
    buckets: int | None = column("whole")
    model_states_estimate_bytes: int | None = column("whole")
    peak_memory_bytes_per_rank: list = column("list", [])
    stages_per_rank: list = column("list", [])
    wrong_per_rank: list = column("list", [])
    checked: int | None = column("whole")
    err_to_tol: float | None = column("amount")
    placement_warnings: list = column("list", [])

    @staticmethod
    def series_label(s, algo_label) -> str:
        p = dict(s.params or ())
        return (f"hybrid {s.backend} {s.tp}x{s.pp}x{s.dp} (tp x pp x dp) {s.schedule if (s.pp or 1) > 1 else ''} "
                f"m={s.microbatches} h={p.get('hidden')} L={p.get('layers')}").replace("  ", " ")


def _layouts(text: str) -> list[tuple[int, int, int]]:
    """TPxPPxDP, comma separated ("": every layout of --nproc)."""
    out = []
    for item in items(text):
        parts = item.lower().split("x")
        if len(parts) == 4:
            raise ValueError("the hybrid step has no expert-parallel (MoE) blocks yet: give TPxPPxDP")
        if len(parts) != 3 or not all(p.isdigit() and int(p) >= 1 for p in parts):
            raise ValueError("give layouts as TPxPPxDP (whole numbers >= 1), comma separated, e.g. 1x2x1,2x1x1,1x1x2")
        out.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return out


# knob -> (distributed optimizer, gradient reduction dtype, sequence parallelism, virtual pipeline) and the
# layouts it applies to (tp, pp, dp); a knob runs on the layouts that have its dimension
KNOBS = {"plain": ((False, "float32", False, False), lambda tp, pp, dp: True),
         "sp": ((False, "float32", True, False), lambda tp, pp, dp: tp > 1),
         "distopt": ((True, "float32", False, False), lambda tp, pp, dp: dp > 1),
         "bf16grad": ((False, "bfloat16", False, False), lambda tp, pp, dp: dp > 1),
         "distopt+bf16grad": ((True, "bfloat16", False, False), lambda tp, pp, dp: dp > 1),
         "vpp": ((False, "float32", False, True), lambda tp, pp, dp: pp > 1)}


def knob_names(dist_opt: bool, grad_reduce: str, sp: bool, vpp: int) -> list[str]:
    """The knobs a case or row has on, as the table and case ids name them."""
    return (["sp"] * sp + ["distopt"] * dist_opt + ["bf16grad"] * (grad_reduce == "bfloat16")
            + ([f"vpp{vpp}"] if vpp else []))


_schedule = checked(str, lambda s: s in SCHEDULES, f"allowed {', '.join(SCHEDULES)}")
_knobs = names_in(KNOBS, f"give a comma separated list of {', '.join(KNOBS)}")
_vpp = checked(lambda text: int(text) if text.isdigit() else 0, lambda v: v >= 2,
                "give the virtual pipeline size, a whole number >= 2 (model chunks per pp rank)")
_peak = checked(lambda text: float(text) * 1e12, lambda v: not v < 0,   # in FLOP/s; nan passes, as it always did
                 "give the device's peak in TFLOP/s, a number >= 0 (0: known per device, measured on a CPU)")


# dense bfloat16 peaks per device name, torchtitan's get_peak_flops, first match wins (whatever --dtype: docs/layers.md)
KNOWN_PEAKS = (("H100 NVL", 835e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("A100", 312e12),
               ("B200", 2.25e15))


def every_layout(nranks: int) -> list[tuple[int, int, int]]:
    """Every tp x pp x dp of `nranks` ranks."""
    return [(tp, pp, nranks // (tp * pp)) for tp, pp in itertools.product(range(1, nranks + 1), repeat=2)
            if nranks % (tp * pp) == 0]


@keyword_dataclass
class HybridCase(Case):
    tp: int
    pp: int
    dp: int
    microbatches: int
    schedule: str
    bucket_bytes: int
    dist_opt: bool = False
    grad_reduce: str = "float32"
    sp: bool = False
    vpp: int = 0

    @property
    def id(self) -> str:
        sched = f"-{self.schedule}" if self.pp > 1 else ""
        knobs = "".join(f"-{k}" for k in knob_names(self.dist_opt, self.grad_reduce, self.sp, self.vpp))
        return (f"{self.backend}-hybrid-{self.tp}x{self.pp}x{self.dp}{sched}-m{self.microbatches}{knobs}"
                f"{knob_suffix(self.knobs)}{launch_suffix(self.launch, self.side)}")


@keyword_dataclass
class HybridSettings(KindSettings):
    """The hybrid bench's own options (--layouts, --hybrid-knobs, ...), converted; their defaults are the flags'."""
    layouts: list[tuple[int, int, int]]   # [] : every layout of --nproc
    hybrid_schedule: str
    hybrid_bucket: int
    hybrid_knobs: list[str]
    hybrid_vpp: int
    peak_tflops: float
    flags = (
        KindOption("--layouts", "", "hybrid step layouts TPxPPxDP, comma separated (default: every layout of --nproc)",
                   _layouts),
        KindOption("--hybrid-schedule", "1f1b", f"the hybrid step's pipeline schedule at pp > 1: {', '.join(SCHEDULES)}",
                   _schedule),
        KindOption("--hybrid-bucket", "4M", "the hybrid step's dp gradient bucket cap (DDP's bucket_cap_mb; 0: a bucket "
                   "per gradient)", bucket_size),
        KindOption("--hybrid-knobs", "plain,sp,distopt,bf16grad,vpp", "each layout once per knob that applies to it: "
                   "plain, sp (sequence parallelism, tp > 1), distopt (dp reduce_scatter + all_gather, Megatron's "
                   "distributed optimizer), bf16grad (dp gradients reduced in bfloat16), distopt+bf16grad (dp > 1), "
                   "vpp (pp > 1: interleaved1f1b with --hybrid-vpp chunks per rank)", _knobs),
        KindOption("--hybrid-vpp", "2", "the virtual pipeline size of the vpp knob (model chunks per pp rank)", _vpp),
        KindOption("--peak-tflops", "0", "the device's peak TFLOP/s that MFU is taken against (0: known per device name, "
                   "on a CPU the block's matmul rate measured on the ranks)", _peak),
    )


class HybridKind(LayoutKind[HybridCase]):
    name = "hybrid"
    title = "Hybrid training step"
    case_type = HybridCase
    row_type = HybridRow
    spec_types = (HybridSpec,)
    rank = ("layers.hybrid_tasks", "HybridRank")
    settings = HybridSettings

    def build(self, opts: Options) -> list[HybridCase]:
        """Every layout x --microbatches; one the world size, the shape or the torch cannot run is skipped with the reason."""
        return launches(opts, lambda o: list(_build_launch(self, o)))

    def identity(self, case: HybridCase) -> dict:
        return {**super().identity(case), "schedule": case.schedule if case.pp > 1 else "", "microbatches": case.microbatches,
                "bucket_bytes": case.bucket_bytes, "dist_opt": case.dist_opt, "grad_reduce": case.grad_reduce,
                "sp": case.sp, "vpp": case.vpp}

    def spec(self, case: HybridCase, opts: Options) -> HybridSpec:
        return HybridSpec(tp=case.tp, pp=case.pp, dp=case.dp, hidden=opts.hidden, seq=opts.seq, batch=opts.batch,
                          layers=opts.layers, microbatches=case.microbatches, schedule=case.schedule,
                          bucket_bytes=case.bucket_bytes, distributed_optimizer=case.dist_opt,
                          grad_reduce=case.grad_reduce, sequence_parallel=case.sp, vpp=case.vpp,
                          plan={**opts.plan(), "warmup": 1, "rounds": min(opts.rounds, ROUNDS)})

    def row(self, case: HybridCase, opts: Options, ran: Ran) -> HybridRow:
        """The breakdown of the module docstring, from the ranks' loops and their extra timed run."""
        ranks = typed(HybridResult, ran.results)
        k = ranks[0].iters
        step, nodp, notp = (stats.median_seconds([getattr(r, f) for r in ranks], k) for f in ("round_ns", "nodp_ns", "notp_ns"))
        parts = rank_parts(ranks, k)
        tp_inside = float(parts["tp"].mean())
        theory = schedules.bubble_theory(case.schedule, case.pp, case.microbatches, case.vpp) if case.pp > 1 else 0.0
        share, busy = machine_work(ranks)
        compute = float(parts["compute"].mean())
        tp, pp, dp = (float(parts[p].max()) for p in ("tp", "pp", "dp"))
        model = max((compute * share + tp + pp) / (1 - (theory or 0.0)), (busy or 0.0) + tp) + dp
        tp_bytes = 2 * opts.layers // case.pp * opts.batch * opts.seq * opts.hidden * 4 if case.tp > 1 else 0
        params = sum(memory.mlp_gradient_sizes(opts.hidden, opts.layers))
        tokens = case.dp * opts.batch * opts.seq
        peak, source = peak_flops(case, opts, ranks)
        flops = model_flops(opts.hidden, opts.layers, tokens)
        lo, hi = ({p: float(f(v)) * 1e6 for p, v in parts.items()} for f in (np.min, np.max))
        minmax: dict = {**{f"{p}_min_us": lo[p] for p in PARTS}, **{f"{p}_us": hi[p] for p in (*PARTS, "other")}}
        return HybridRow(
            **checked_fields(case, ran, ranks), **self.identity(case), **minmax, hidden=opts.hidden, seq=opts.seq,
            batch=opts.batch, layers=opts.layers, stages_per_rank=[r.stages for r in ranks],
            buckets=ranks[0].buckets, dp_bytes=max(r.dp_bytes for r in ranks), tp_bytes=tp_bytes,
            pp_bytes=max(r.p2p_bytes for r in ranks),
            model_states_estimate_bytes=int(sum(memory.model_states(
                params, case.tp, case.pp, case.dp, **memory.sgd_states(case.dist_opt, "float32", case.grad_reduce)))),
            placement_warnings=(tp_placement(ParallelDims(case.tp, case.pp, case.dp, case.nranks), ran.rank_hosts)
                                + _crowded(case, machines_cores(ranks))),
            step_us=step * 1e6, tokens_per_s=tokens / step, tokens_per_s_per_device=tokens / step / case.nranks,
            mfu=flops / step / (case.nranks * peak) if peak else None, peak_flops=peak or None, peak_source=source,
            timed_step_us=max(r.timed_step_ns for r in ranks) / 1e3,
            tp_exposed_us=(nodp - notp) * 1e6, dp_exposed_us=(step - nodp) * 1e6,
            bubble=float((parts["bubble"] / parts["step"]).mean()), bubble_theory=theory,
            model_us=model * 1e6, residual=(step - model) / step, busy_us=busy * 1e6 if busy is not None else None,
            tp_busbw_gbps=bandwidths("all_reduce", tp_bytes, tp_inside, case.tp)[1] if tp_bytes and tp_inside > 0 else None)

    def panels(self, cells: list[tuple[str, Cell]]) -> list[Panel]:
        """Each layout's step as its parts (stacked), and its tokens/s."""
        if not cells:
            return []
        labels = [cell_label(n, c) for n, c in cells]
        parts = {part: [c.pooled(f"{part}_us") or 0.0 for _, c in cells] for part in PARTS}
        return [Bars("step parts (us, the slowest rank's each): compute, tp, pp send/recv, pipeline bubble, dp", labels,
                     parts, stacked=True),
                Bars("tokens/s (higher is better)", labels, {"tokens/s": [c.pooled("tokens_per_s") or 0.0 for _, c in cells]})]

    def table(self, rows: list[HybridRow]) -> str:
        """Per layout its step and breakdown; per world size and shape, the best layout by tokens/s."""
        if not rows:
            return ""
        shown = metrics(HybridRow, "table")
        out = ["# hybrid step (per step, ms; each part timed on its own on every rank, min and max over ranks as",
               "# Megatron's timers print them: comp = compute alone, tp = inside the tp collectives, pp = the pipeline's",
               "# sends/recvs at the rate of a ring exchange with every stage ready, bub = the rest of the time inside",
               "# them (waiting for a neighbour stage), dp = the wait for the dp buckets (+ the distributed optimizer's",
               "# all_gather), other = the rank's step - all of these (max; below 0 where the parts, each timed on its",
               "# own, add up to more than the step); bubble = bub / the rank's step, mean over",
               "# ranks; resid = (step - model) / step, model = max((comp x share + tp + pp) / (1 - theory), busy + tp)",
               "# + dp; tokens/s = dp x batch x seq / step, tok/s/dev = tokens/s / ranks, MFU = Megatron's model",
               "# FLOPs / step / (ranks x peak); knobs: sp = sequence parallelism, distopt = dp reduce_scatter +",
               "# all_gather, bf16grad = dp gradients reduced in bfloat16, vppN = interleaved, N chunks per rank;",
               "# no ep (MoE) blocks yet: docs/layers.md says why)",
               f"#{'backend':>8} {'tp':>3} {'pp':>3} {'dp':>3} {'schedule':>16} {'m':>3} {'knobs':>16}" + heads(shown)
               + f" {'#wrong':>7}"]
        for r in rows:
            out.append(f" {r.backend:>8} {r.tp:>3} {r.pp:>3} {r.dp:>3} {r.schedule or '-':>16} {r.microbatches:>3}"
                       f" {knobs_text(r):>16}" + values(r, shown) + f" {wrong_text(r.wrong):>7}")
        out += best_layout_lines(rows) + peak_lines(rows)
        warned = dict.fromkeys(w for r in rows for w in r.placement_warnings)
        return "\n".join(out + [f"# WARNING: {w}" for w in warned])


KIND = HybridKind()


def knobs_text(row: HybridRow) -> str:
    """The row's knobs as the table prints them ('-': none)."""
    return "+".join(knob_names(row.dist_opt, row.grad_reduce, row.sp, row.vpp)) or "-"


def rank_parts(ranks: list[HybridResult], k: int) -> dict[str, np.ndarray]:
    """Each part of the step per rank, seconds (docs/layers.md, What each figure is)."""
    compute = stats.per_rank_median_seconds([r.compute_ns for r in ranks], k)
    p2p = np.array([r.p2p_ns for r in ranks]) / 1e9
    rate = [r.exchange_ns / 1e9 / (2 * r.exchange_bytes) if r.exchange_bytes else 0.0 for r in ranks]
    pp = np.minimum(np.array([r.p2p_bytes * per_byte for r, per_byte in zip(ranks, rate)]), p2p)
    out = {"compute": compute, "tp": np.array([r.tp_ns for r in ranks]) / 1e9, "pp": pp, "bubble": p2p - pp,
           "dp": np.array([r.dp_ns for r in ranks]) / 1e9, "step": np.array([r.timed_step_ns for r in ranks]) / 1e9}
    out["other"] = out["step"] - compute - out["tp"] - p2p - out["dp"]
    return out


def model_flops(hidden: int, layers: int, tokens: int) -> float:
    """A step's model FLOPs as Megatron-LM's num_floating_point_operations counts its MLP (docs/layers.md)."""
    return 3 * 2 * 2 * tokens * layers * hidden * 4 * hidden


CPU_PEAK = "CPU: the block's float32 matmul measured on the ranks"


def peak_lines(rows) -> list[str]:
    """What MFU was taken against, once: the CPU's measured rates as one range (each case measures its own)."""
    measured = [r.peak_flops for r in rows if r.peak_source.startswith(CPU_PEAK) and r.peak_flops]
    out = [f"# MFU peak: {s}" for s in dict.fromkeys(r.peak_source for r in rows
                                                    if r.peak_source and not r.peak_source.startswith(CPU_PEAK))]
    if len(measured) > 1:
        out.append(f"# MFU peak: {CPU_PEAK}, each case at its own: {min(measured) / 1e9:.1f}-{max(measured) / 1e9:.1f} GFLOP/s")
    elif measured:
        out.append(f"# MFU peak: {CPU_PEAK} at {measured[0] / 1e9:.1f} GFLOP/s")
    return out


def peak_flops(case: HybridCase, opts: Options, ranks: list[HybridResult]) -> tuple[float, str]:
    """The per-device peak MFU is taken against, and what it is: --peak-tflops, else the device name's
    (KNOWN_PEAKS), else on CPU the fastest rank's measured matmul rate, else none (MFU left empty)."""
    given = HybridSettings.of(opts).peak_tflops
    if given:
        return given, f"--peak-tflops {given / 1e12:g}"
    name = ranks[0].device_name
    for key, value in KNOWN_PEAKS:
        if key in name:
            return value, f"{name}: dense bf16 {value / 1e12:g} TFLOP/s (torchtitan)"
    if info(case.backend).device_kind == "cpu":
        best = max(r.matmul_flops for r in ranks)
        return best, f"{CPU_PEAK} at {best / 1e9:.1f} GFLOP/s"
    return 0.0, f"{name}: no known peak, give --peak-tflops"


def machines_cores(ranks: list[HybridResult]) -> dict[str, tuple[list[int], int]]:
    """Per machine (its kernel's boot id; emulated hosts share one), the indices of its ranks and the
    cores they may use between them (the union of their affinities)."""
    idx = {m: [i for i, r in enumerate(ranks) if r.machine == m] for m in dict.fromkeys(r.machine for r in ranks)}
    return {m: (mine, max(len(set().union(*(ranks[i].cpus for i in mine))), 1)) for m, mine in idx.items()}


def machine_work(ranks: list[HybridResult]) -> tuple[float, float | None]:
    """(share, busy) of machines with more ranks than cores: cores / ranks gives a rank's compute back,
    and the step is at least the machine's CPU work spread over its cores (seconds); (1.0, None): none."""
    share, busy = 1.0, None
    for idx, cores in machines_cores(ranks).values():
        if len(idx) > cores:
            share = min(share, cores / len(idx))
            work = sum(ranks[i].cpu_notp_ns for i in idx) / 1e9 / cores
            busy = work if busy is None else max(busy, work)
    return share, busy


def _crowded(case: HybridCase, machines: dict[str, tuple[list[int], int]]) -> list[str]:
    """The warning for a pipeline on a CPU machine with more ranks than cores, where the bubble formula fails."""
    crowded = [(len(idx), cores) for idx, cores in machines.values() if len(idx) > cores]
    if case.pp == 1 or info(case.backend).device_kind != "cpu" or not crowded:
        return []
    ranks, cores = max(crowded)
    return [f"{ranks} ranks share {cores} cores on a machine: a pipeline stage's idle time runs other ranks' compute, "
            "so the bubble of pp > 1 layouts says how this CPU shares its cores, not what one device per rank would do; "
            "the model bounds the step by the machine's CPU work (busy)"]


def best_layout_lines(rows: list[HybridRow]) -> list[str]:
    """Per (backend, ranks, shape, side), the layout with the most tokens/s (median over launches) and the others against it."""
    by: dict[tuple, dict[str, list[float]]] = {}
    for r in rows:
        if r.tokens_per_s:
            shape = (r.backend, r.nranks, r.hidden, r.seq, r.batch, r.layers, r.microbatches, r.side)
            name = f"{r.tp}x{r.pp}x{r.dp} {knobs_text(r)}".removesuffix(" -")
            by.setdefault(shape, {}).setdefault(name, []).append(r.tokens_per_s)
    out = []
    for (backend, n, *_), layouts in by.items():
        rate = {name: stats.median(v) for name, v in layouts.items()}
        best = max(rate, key=lambda name: rate[name])
        others = ", ".join(f"{name} {rate[name] / rate[best]:.2f}x" for name in sorted(rate) if name != best)
        out.append(f"# best layout for {n} ranks ({backend}): {best} (tp x pp x dp) at {rate[best]:.0f} tokens/s"
                   + (f"; {others}" if others else ""))
    return out


def _build_launch(kind: HybridKind, opts: Options) -> Iterator[HybridCase]:
    from layers import support  # these import torch: only when the bench is collected
    from layers.hybrid_tasks import refusal
    o = HybridSettings.of(opts)
    for backend in opts.backends:
        key = GroupKey(backend, opts.nproc, (), opts.launcher)
        for tp, pp, dp in o.layouts or every_layout(opts.nproc):
            knobs = [k for k in o.hybrid_knobs if KNOBS[k][1](tp, pp, dp)]
            for m, knob in itertools.product(opts.microbatches, knobs):
                dist_opt, grad_reduce, sp, vpp = KNOBS[knob][0]
                case = HybridCase(backend=backend, nranks=opts.nproc, tp=tp, pp=pp, dp=dp, microbatches=m,
                                  schedule="interleaved1f1b" if vpp else o.hybrid_schedule,
                                  bucket_bytes=o.hybrid_bucket, dist_opt=dist_opt, grad_reduce=grad_reduce,
                                  sp=sp, vpp=o.hybrid_vpp if vpp else 0, group=key)
                case.skip = (no_torch(backend) or refusal(kind.spec(case, opts), opts.nproc)
                             or support.missing("linear", "manual")
                             or (support.missing("pipeline", schedule=case.schedule) if pp > 1 else "")
                             or ("the mpi backend reduces through numpy, which has no bfloat16"
                                 if grad_reduce == "bfloat16" and backend == "mpi" else ""))
                yield case

