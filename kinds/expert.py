"""Expert parallelism (benches/test_expert.py; the model and dispatchers: docs/layers.md): spec ->
(layers.expert_tasks.ExpertRank) -> ExpertRow: dispatch and combine time, bytes moved, load
imbalance and dropped tokens. The kind is this module: case, row, options and table."""
from __future__ import annotations

import contextlib
import itertools
import math
import os
from collections.abc import Callable, Iterator
from statistics import fmean
from typing import Any, ClassVar

from collectives.backends import info
from collectives.backends.hccl import hccl_product
from collectives.device import DeviceUnavailable
from collectives.sizes import format_size
from kinds.base import (
    Bars,
    Case,
    Kind,
    KindOption,
    KindSettings,
    Lines,
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
from kinds.layer import checked_fields, no_torch
from kinds.options import Options, items, names_in, number
from layers import fused_moe
from schema import stats
from schema.group_key import GroupKey
from schema.kwonly import keyword_dataclass
from schema.results import MISSING, Cell, Measured, column, metric, metrics
from schema.wire import ExpertResult, ExpertSpec

IMPLS = ("alltoallv", "allgather", "fused")   # layers.expert_tasks.DISPATCHERS
DROP_POLICIES = ("group", "probs", "position")   # layers.expert.DROP_POLICIES (the driver loads no torch)
DTYPES = ("float32", "bfloat16", "float16")
REPEATING_ROUTINGS = ("skewed",)   # can give a token one expert twice (file: the ranks judge the replayed ids)
FUSED_NEEDS = "torch_npu's npu_moe_distribute_dispatch/combine (Atlas A2/A3, hccl)"


# ---- the row (the wire's spec and result are schema/wire.py's) ----

@keyword_dataclass
class ExpertRow(Measured):
    """One expert-parallel case: the step (fwd+bwd) and its dispatch/expert/combine parts, what moved,
    how unevenly the router loaded experts and ranks, and what it dropped."""
    KIND: ClassVar[str] = "expert"
    BENCHES: ClassVar[tuple[str, ...]] = ("expert",)
    KEY: ClassVar[tuple[str, ...]] = ("bench", "backend", "nranks", "ep", "experts", "topk", "routing", "capacity_factor",
                                      "impl", "tokens", "hidden", "dtype", "drop_policy")
    bench: str = column("text", MISSING)
    ep: int = column("count", 1)
    experts: int = column("count", 1)
    topk: int = column("count", 1)
    routing: str = column("text", "uniform")
    capacity_factor: float = column("amount", 0.0)
    drop_policy: str = column("text", "group")
    impl: str = column("text", MISSING)
    tokens: int = column("count", 1)
    hidden: int = column("count", 1)
    dtype: str = column("text", "float32")
    ffn: int | None = column("count")
    step_us: float | None = metric("step(us)", ".1f", "lower", ("table", "report"))
    dispatch_us: float | None = metric("dispatch(us)", ".1f", "lower", ("table", "compare", "report"))
    expert_us: float | None = metric("experts(us)", ".1f", "lower", ("table",))
    combine_us: float | None = metric("combine(us)", ".1f", "lower", ("table", "compare", "report"))
    comm_share: float | None = metric("comm", ".2f", "lower", ("table", "report"), "ratio")
    sent_bytes_per_rank: int | None = column("whole")
    dispatch_gbps: float | None = metric("disp(GB/s)", ".3f", "higher", ("table", "compare", "report"))
    dispatch_remote_gbps: float | None = metric("disp-nl", ".3f", "higher", ("table", "compare"))
    combine_gbps: float | None = metric("comb(GB/s)", ".3f", "higher", ("table", "compare", "report"))
    combine_remote_gbps: float | None = metric("comb-nl", ".3f", "higher", ("table", "compare"))
    dispatch_gbps_per_rank: list = column("list", [])
    combine_gbps_per_rank: list = column("list", [])
    recv_bytes_per_rank: list = column("list", [])
    expert_imbalance: float | None = metric("imb(exp)", ".2f", "lower", ("table", "report"))
    rank_imbalance: float | None = metric("imb(rank)", ".2f", "lower", ("table", "report"))
    dropped: int | None = metric("dropped", "d", "lower", ("table",), "whole")
    masked: int | None = column("whole")
    tokens_per_expert: list = column("list", [])
    tokens_per_rank: list = column("list", [])
    wrong_per_rank: list = column("list", [])
    checked: int | None = column("whole")
    err_to_tol: float | None = column("amount")
    peak_memory_bytes_per_rank: list = column("list", [])
    placement_warnings: list = column("list", [])

    @staticmethod
    def series_label(s, algo_label) -> str:
        p = dict(s.params or ())
        return (f"expert {s.backend} ep={p.get('ep')} E={p.get('experts')} top{p.get('topk')} {p.get('routing')} {s.impl}"
                + (f" cf={p.get('capacity_factor'):g}" if p.get("capacity_factor") else ""))


# ---- options, each with its converter ----

def _counts(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]   # unstripped: int's message quotes the item as given
    if not values or min(values) < 1:
        raise ValueError("give whole numbers >= 1, comma separated")
    return values


def _topk(text: str) -> list[int]:
    values = _counts(text)
    if max(values) > 8:
        raise ValueError("top-k is 1 to 8")
    return values


def _routing(text: str) -> list[str]:
    """uniform, skewed:SHARE (0 < SHARE < 1: the hot expert's share of routed slots), file:PATH."""
    out = []
    for item in items(text):
        name, _, arg = item.partition(":")
        if name in ("uniform", "random") and not arg:
            out.append(item)
        elif name in ("skewed", "hotrank", "masked", "uneven") and 0 < number(arg) < 1:
            out.append(f"{name}:{number(arg):g}")
        elif name == "file" and arg:
            read_expert_ids(arg)
            out.append(item)
        else:
            raise ValueError("allowed uniform, random, skewed:SHARE, hotrank:SHARE, masked:SHARE, uneven:SPREAD (0 < x < 1), "
                             "file:PATH (expert ids, whitespace separated)")
    if not out:
        raise ValueError("give at least one routing profile")
    return out


def _names(allowed: tuple[str, ...], auto: bool = False) -> Callable[[str], list[str]]:
    """The converter of a comma list of `allowed` names; with `auto`, "auto" alone gives []."""
    listed = names_in(allowed, f"allowed {'auto or a comma list of ' if auto else ''}{', '.join(allowed)}")
    return lambda text: [] if auto and items(text) == ["auto"] else listed(text)


def _capacity(text: str) -> list[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    if not values or any(not (v == 0 or 0 < v < math.inf) for v in values):
        raise ValueError("give factors > 0 (0: no capacity limit), comma separated")
    return values


def read_expert_ids(path: str) -> list[int]:
    """A routing file: expert ids (whole numbers >= 0) separated by whitespace or commas."""
    try:
        with open(path) as f:
            ids = [int(v) for v in f.read().replace(",", " ").split()]
    except OSError as exc:
        raise ValueError(f"cannot read the routing file: {exc.strerror}") from None
    except ValueError:
        raise ValueError("the routing file must hold expert ids (whole numbers), whitespace separated") from None
    if not ids or min(ids) < 0:
        raise ValueError("the routing file holds no expert ids (or a negative one)")
    return ids


# ---- the case and the kind ----

@keyword_dataclass
class ExpertCase(Case):
    ep: int
    experts: int
    topk: int
    routing: str                    # uniform, random, skewed:SHARE, hotrank:SHARE, masked:SHARE, uneven:SPREAD, file:PATH
    capacity_factor: float
    impl: str
    tokens: int
    hidden: int
    dtype: str = "float32"
    drop_policy: str = "group"

    @property
    def id(self) -> str:
        routing = self.routing.replace("/", "_")
        cf = f"-cf{self.capacity_factor:g}" if self.capacity_factor else ""
        cf += f"-{self.drop_policy}" if self.capacity_factor and self.drop_policy != "group" else ""
        dtype = "" if self.dtype == "float32" else f"-{self.dtype}"
        tokens = "" if self.tokens == 256 else f"-t{self.tokens}"
        return (f"{self.backend}-expert-ep{self.ep}-e{self.experts}-top{self.topk}-{routing}-{self.impl}{cf}{dtype}{tokens}"
                f"{knob_suffix(self.knobs)}{launch_suffix(self.launch, self.side)}")


@keyword_dataclass
class ExpertSettings(KindSettings):
    """The expert bench's own options (--ep, --topk, ...), converted; their defaults are the flags'."""
    ep: list[int]                   # [] : the world size
    experts: int
    topk: list[int]
    routing: list[str]
    capacity_factor: list[float]
    drop_policy: list[str]
    moe_impl: list[str]
    tokens: list[int]
    moe_dtype: list[str]            # [] : auto (float32, bfloat16 for fused)
    flags = (
        KindOption("--ep", "", "expert-parallel group sizes (default: the world size); the rest are data-parallel replicas",
                   lambda t: _counts(t) if t else []),
        KindOption("--experts", "8", "total experts E (a multiple of each ep)", lambda t: _counts(t)[0]),
        KindOption("--topk", "2", "experts per token, 1-8, comma list", _topk),
        KindOption("--routing", "uniform,random,skewed:0.5,hotrank:0.5,masked:0.25,uneven:0.5",
                   "routing profiles: uniform, random (k distinct experts a token, seeded), skewed:SHARE (one hot "
                   "expert takes SHARE of the slots), hotrank:SHARE (ep rank 0's experts weighted to SHARE of the "
                   "draws, distinct a token), masked:SHARE (random, SHARE of the selections masked: sent nowhere), "
                   "uneven:SPREAD (random; ep ranks send (1 - SPREAD) to (1 + SPREAD) x --tokens, alltoallv and fused), "
                   "file:PATH (your router's expert ids, replayed)", _routing),
        KindOption("--capacity-factor", "0", "expert capacity factors (0: none; else slots past it are dropped, counted)",
                   _capacity),
        KindOption("--drop-policy", "group", "where capacity drops, comma list: group (each expert keeps the group's first "
                   "ceil(cf x tokens x ep x k / E) slots), probs / position (Megatron's: each rank drops before dispatch, "
                   "an expert keeping ceil(cf x tokens x k / E) of its highest-probability / first selections)",
                   _names(DROP_POLICIES)),
        KindOption("--moe-impl", "alltoallv,allgather,fused",
                   f"dispatchers: alltoallv (counts, then AlltoAllV), allgather (Megatron's), fused ({FUSED_NEEDS})",
                   _names(IMPLS)),
        KindOption("--tokens", "256", "tokens per rank, comma list: a few (e.g. 256,8) add decode-sized low-latency cases "
                   "beside the prefill-sized ones (DeepEP's low-latency test sends 128 a rank)", _counts),
        KindOption("--moe-dtype", "auto", "token and weight dtypes: float32, bfloat16, float16, comma list; auto: float32, "
                   "and bfloat16 for fused (its ops take bfloat16/float16 only)", _names(DTYPES, auto=True)),
    )


class ExpertKind(Kind[ExpertCase]):
    name = "expert"
    title = "Expert parallelism"
    case_type = ExpertCase
    row_type = ExpertRow
    spec_types = (ExpertSpec,)
    rank = ("layers.expert_tasks", "ExpertRank")
    settings = ExpertSettings

    def build(self, opts: Options) -> list[ExpertCase]:
        """Every ep x top-k x routing x capacity x dispatcher; a layout the world size or E cannot hold,
        and a dispatcher the backend lacks, is skipped with the reason."""
        return launches(opts, lambda o: list(_build_launch(o)))

    def what(self, case: ExpertCase) -> str:
        return f"{case.id} (ep={case.ep} dp={case.nranks // case.ep if case.nranks % case.ep == 0 else '?'})"

    def identity(self, case: ExpertCase) -> dict:
        own = ExpertRow.KEY[ExpertRow.KEY.index("ep"):]   # the case's own fields, as the row names them
        return {**super().identity(case), **{f: getattr(case, f) for f in own}}

    def spec(self, case: ExpertCase, opts: Options) -> ExpertSpec:
        name, _, arg = case.routing.partition(":")
        share = float(arg) if name in ("skewed", "hotrank", "masked", "uneven") else 0.0
        return ExpertSpec(ep=case.ep, experts=case.experts, topk=case.topk, hidden=case.hidden, ffn=2 * case.hidden,
                          tokens=case.tokens, routing=name, hot_share=share,
                          expert_ids=read_expert_ids(arg) if name == "file" else [], capacity_factor=case.capacity_factor,
                          impl=case.impl, dtype=case.dtype, drop_policy=case.drop_policy,
                          plan={**opts.plan(), "warmup": max(1, min(opts.warmup, 2))})

    def row(self, case: ExpertCase, opts: Options, ran: Ran) -> ExpertRow:
        """Times are medians of the slowest rank per round; GB/s are DeepEP's per-rank figures (the table's
        header, _bandwidths); imbalance is max / mean tokens."""
        ranks = typed(ExpertResult, ran.results)
        k = ranks[0].iters
        per_expert, per_rank = ranks[0].tokens_per_expert, ranks[0].tokens_per_rank
        times: dict[str, Any] = {f"{part}_us": stats.median_seconds([getattr(r, f"{part}_ns") for r in ranks], k) * 1e6
                                 for part in ("dispatch", "expert", "combine")}
        return ExpertRow(
            **checked_fields(case, ran, ranks), **self.identity(case), ffn=2 * case.hidden,
            tokens_per_expert=per_expert, tokens_per_rank=per_rank, dropped=sum(r.dropped for r in ranks),
            masked=sum(r.masked for r in ranks[:case.ep]), sent_bytes_per_rank=max(r.sent_bytes for r in ranks),
            placement_warnings=ep_placement(case.ep, ran.rank_hosts),
            step_us=stats.median_seconds([r.round_ns for r in ranks], k) * 1e6, **times,
            comm_share=sum(r.comm_share for r in ranks) / len(ranks), **_bandwidths(ranks, k),
            expert_imbalance=_imbalance(per_expert), rank_imbalance=_imbalance(per_rank))

    def panels(self, cells: list[tuple[str, Cell]]) -> list[Panel]:
        """Each case's step as its parts (dispatch, experts, combine, the rest: backward and the
        router), and dispatch + combine time against the load imbalance it was routed with."""
        if not cells:
            return []
        parts = {name: [c.pooled(f) or 0.0 for _, c in cells]
                 for name, f in (("dispatch", "dispatch_us"), ("experts", "expert_us"), ("combine", "combine_us"))}
        rest = [max(0.0, (c.pooled("step_us") or 0.0) - sum(p[i] for p in parts.values())) for i, (_, c) in enumerate(cells)]
        against: dict[str, list[tuple[float, float]]] = {}
        for n, c in cells:
            imbalance, dispatch, combine = c.pooled("expert_imbalance"), c.pooled("dispatch_us"), c.pooled("combine_us")
            if imbalance is not None and dispatch is not None and combine is not None:
                p = dict(c.series.params or ())
                against.setdefault(f"{c.series.backend} ep={p.get('ep')} {c.series.impl} [{n}]", []).append(
                    (imbalance, dispatch + combine))
        return [Bars("step (us); rest: backward, router", [cell_label(n, c) for n, c in cells],
                     {**parts, "rest": rest}, stacked=True),
                Lines("dispatch + combine (us)", "imbalance (max / mean tokens per expert)",
                      {k: sorted(v) for k, v in against.items()}, x_is_size=False)]

    def table(self, rows: list[ExpertRow]) -> str:
        """Per case its step and parts; per skewed or replayed routing, what the imbalance costs:
        its step over the same shape's uniformly routed one."""
        if not rows:
            return ""
        shown = metrics(ExpertRow, "table")
        step = ("step: forward and backward (impl fused: forward only, its ops have no backward)"
                if any(r.impl == "fused" for r in rows) else "step: forward and backward")
        out = [f"# expert parallelism ({step}; times: median of the slowest rank per step)",
               "# disp/comb(GB/s): DeepEP's count, the rows dispatch hands a rank (and combine sends back) x hidden x",
               "# element size, its own included, over its dispatch/combine time, mean over ranks; -nl: without the",
               "# rank's own rows; min@r/max@r: the slowest and fastest rank (NCCL ep_bench); imb: max / mean tokens",
               f"#{'backend':>8} {'ep':>3} {'E':>4} {'k':>2} {'routing':>12} {'impl':>9} {'dtype':>8} {'cf':>10} {'tokens':>6}"
               + heads(shown) + f" {'disp min@r/max@r':>22} {'comb min@r/max@r':>22} {'#wrong':>7}"]
        for r in rows:
            cf = f"{r.capacity_factor:g}" + (f"/{r.drop_policy}" if r.capacity_factor and r.drop_policy != "group" else "")
            out.append(f" {r.backend:>8} {r.ep:>3} {r.experts:>4} {r.topk:>2} {r.routing[:12]:>12} {r.impl:>9} "
                       f"{r.dtype:>8} {cf:>10} {r.tokens:>6}" + values(r, shown)
                       + f" {spread_text(r.dispatch_gbps_per_rank):>22} {spread_text(r.combine_gbps_per_rank):>22}"
                       + f" {wrong_text(r.wrong):>7}")
        out += imbalance_cost_lines(rows)
        sent = [r for r in rows if r.sent_bytes_per_rank]
        if sent:
            worst = max(sent, key=lambda r: r.sent_bytes_per_rank or 0)
            out.append(f"# most moved: {format_size(worst.sent_bytes_per_rank or 0)} per rank per step "
                       f"({worst.routing}, {worst.impl})")
        warned = dict.fromkeys(w for r in rows for w in r.placement_warnings)
        return "\n".join(out + [f"# WARNING: {w}" for w in warned])


KIND = ExpertKind()


def _bandwidths(ranks: list[ExpertResult], k: int) -> dict:
    """Each rank's dispatch and combine GB/s (its bytes over its own median time), their mean over
    ranks, and the mean without each rank's own rows."""
    out: dict = {}
    for part in ("dispatch", "combine"):
        seconds = stats.per_rank_median_seconds([getattr(r, f"{part}_ns") for r in ranks], k)
        per_rank = [r.recv_bytes / s / 1e9 if s > 0 else 0.0 for r, s in zip(ranks, seconds)]
        remote = [(r.recv_bytes - r.local_bytes) / s / 1e9 if s > 0 else 0.0 for r, s in zip(ranks, seconds)]
        out |= {f"{part}_gbps": fmean(per_rank), f"{part}_remote_gbps": fmean(remote),
                f"{part}_gbps_per_rank": per_rank}
    return {**out, "recv_bytes_per_rank": [r.recv_bytes for r in ranks]}


def spread_text(per_rank: list[float]) -> str:
    """min@rank/max@rank (NCCL's ep_bench prints the slowest and fastest rank with its id)."""
    if not per_rank:
        return "-"
    lo = min(range(len(per_rank)), key=per_rank.__getitem__)
    hi = max(range(len(per_rank)), key=per_rank.__getitem__)
    return f"{per_rank[lo]:.3g}@r{lo}/{per_rank[hi]:.3g}@r{hi}"


def _imbalance(counts: list[int]) -> float | None:
    """max / mean: 1.0 is perfectly even; None without counts."""
    return max(counts) / (sum(counts) / len(counts)) if counts and sum(counts) else None


def imbalance_cost_lines(rows: list[ExpertRow]) -> list[str]:
    """The step of each non-uniform routing over the uniform one of the same shape (medians over launches)."""
    steps: dict[tuple, dict[str, list[float]]] = {}
    for r in rows:
        if r.step_us:
            shape = (r.backend, r.ep, r.experts, r.topk, r.capacity_factor, r.drop_policy, r.impl, r.tokens, r.hidden, r.side)
            steps.setdefault(shape, {}).setdefault(r.routing, []).append(r.step_us)
    return [f"# imbalance cost: {routing} takes {stats.median(times) / stats.median(by_routing['uniform']):.2f}x the uniform "
            f"step (ep={key[1]} E={key[2]} top{key[3]} {key[6]})"
            for key, by_routing in steps.items() if "uniform" in by_routing
            for routing, times in by_routing.items() if routing != "uniform"]


def ep_placement(ep: int, rank_hosts: dict[int, str]) -> list[str]:
    """An ep group spanning hosts sends its AlltoAllV over the inter-host links (RoCE), not inside one (HCCS/NVLink)."""
    spans = sorted({g for g in range(len(rank_hosts) // ep or 1)
                    if len({rank_hosts.get(r) for r in range(g * ep, (g + 1) * ep)} - {None}) > 1})
    return [f"ep={ep}: {len(spans)} expert-parallel group(s) span hosts, so dispatch and combine cross the inter-host "
            "links; keep ep within a host (ep <= ranks per host) where the model allows"] if spans else []


def _build_launch(opts: Options) -> Iterator[ExpertCase]:
    o = ExpertSettings.of(opts)
    # (capacity factor, drop policy): each policy once per factor > 0 (factor 0 drops nothing: one case)
    capacities = [(cf, drop) for cf in o.capacity_factor for drop in (o.drop_policy if cf else ["group"])]
    for backend in opts.backends:
        key = GroupKey(backend, opts.nproc, (), opts.launcher)
        # the fused ops' limits differ per Atlas product (collectives.backends.hccl): read the chip once;
        # '' where not hccl or its devices cannot be read here (the ranks judge)
        chip = ""
        if backend == "hccl" and "fused" in o.moe_impl:
            with contextlib.suppress(DeviceUnavailable):
                chip = hccl_product(info(backend).facts().name)
        for ep, topk, routing, tokens, (cf, drop), impl in itertools.product(
                o.ep or [opts.nproc], o.topk, o.routing, o.tokens, capacities, o.moe_impl):
            for dtype in o.moe_dtype or ["bfloat16" if impl == "fused" else "float32"]:
                case = ExpertCase(backend=backend, nranks=opts.nproc, ep=ep, experts=o.experts, topk=topk,
                                  routing=routing, capacity_factor=cf, impl=impl, tokens=tokens, hidden=opts.hidden,
                                  dtype=dtype, drop_policy=drop, group=key)
                case.skip = _skip(case, backend, chip)
                yield case


def _skip(case: ExpertCase, backend: str, chip: str = "") -> str:
    if why := no_torch(backend):
        return why
    if case.nranks % case.ep:
        return f"ep {case.ep} does not divide the world size {case.nranks}"
    if case.experts % case.ep:
        return f"E={case.experts} experts do not spread evenly over ep={case.ep} ranks"
    if case.topk > case.experts:
        return f"top-{case.topk} of {case.experts} experts"
    if case.routing.startswith("uneven") and case.impl == "allgather":
        return "routing uneven: the all-gather dispatcher gathers equal shapes (Megatron's pads or splits them)"
    if case.routing.startswith("hotrank") and case.ep < 2:
        return f"hotrank loads one ep rank's experts against the others': ep={case.ep} has no others"
    if case.impl != "fused":
        return ""
    if backend != "hccl":
        return f"the fused dispatcher is {FUSED_NEEDS}; {info(backend).api} has none"
    # op-plugin's documented limits of the fused ops on `chip` ('' not known: what holds on both A2 and A3;
    # the ranks judge the rest), HCCL_BUFFSIZE as the case's group will set it
    buffsize = fused_moe.buffsize_mb({**os.environ, **{k: str(v) for k, v in case.knobs.items()}}) if chip else None
    name, _, arg = case.routing.partition(":")
    most = case.tokens + round(float(arg) * case.tokens) if name == "uneven" else case.tokens   # layers.expert.tokens_of
    return fused_moe.refusal(chip, ep=case.ep, experts=case.experts, topk=case.topk, hidden=case.hidden,
                             tokens=most, dtype=case.dtype, distinct=name not in REPEATING_ROUTINGS,
                             masked=name == "masked", capacity_factor=case.capacity_factor, buffsize=buffsize)
