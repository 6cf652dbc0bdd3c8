"""The collective sweep, nccl-tests' kind: every (backend, algo, op, dtype, redop, in-place, size)
with its worker group or the reason it is skipped, its spec, its row and the nccl-tests table."""
from __future__ import annotations

import functools
import itertools
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import field, replace
from typing import Optional, cast

from collectives import algorithms, capabilities
from collectives.backends import BACKENDS, algo_label, info, oversubscribed
from collectives.backends.hccl import HCCL_FALLBACK_NOTE
from collectives.capabilities import DeviceFacts
from collectives.ops import ITEMSIZE, OPS, bandwidths
from collectives.ops.base import ENVIRONMENT, algo_id
from collectives.sizes import comm_buffers, format_size
from kinds.base import (
    Case,
    Kind,
    Ran,
    capability_skip,
    heads,
    inplace_choices,
    knob_suffix,
    launch_suffix,
    launches,
    no_dtype,
    placed,
    side_python,
    typed,
    values,
    wrong_text,
)
from kinds.options import Options
from schema import stats
from schema.group_key import GroupKey
from schema.kwonly import keyword_dataclass
from schema.results import Cell, CollectiveRow, knob_text, layout, link_class, metrics, side_role
from schema.stats import NAMED_RANKS_OVER, median
from schema.wire import CollectiveResult, CollectiveSpec


@keyword_dataclass
class CollectiveCase(Case):
    algo: str
    op: str
    dtype: str
    redop: str
    inplace: bool
    size: int                       # requested bytes
    count: int = 0                  # elements in the op's full buffer (nccl-tests' count)
    nbytes: int = 0                 # bytes actually moved per nccl-tests' S
    env: dict = field(default_factory=dict)         # the algorithm setting this op sees
    graph: bool = False             # --graph: rounds replayed from a captured device graph
    side_b: Optional[tuple] = None  # (setting, group env) on side B where its interpreter loads another library build

    @property
    def id(self) -> str:
        place = "ip" if self.inplace else "oop"
        red = f"-{self.redop}" if OPS[self.op].reduces else ""
        return (f"{self.backend}-{algo_id(self.algo)}-{self.op}-{self.dtype}{red}-{format_size(self.size)}-{place}"
                f"{'-graph' if self.graph else ''}{knob_suffix(self.knobs)}{launch_suffix(self.launch, self.side)}")


def environment_switch(backend: str, op: str, env) -> dict[str, str]:
    """The algorithm switches of `backend` that `env` already sets for `op` (per-op or global): the
    site's production setting, which the 'default' series measures under its own name."""
    if OPS[op].point_to_point:
        return {}
    names = {n.lower() for b in BACKENDS.values() for n in b.switch_names(op)}
    found = {}
    for var, value in env.items():
        for pattern in info(backend).switch_vars:
            m = re.fullmatch(pattern.replace(r"\w+", r"(\w+)"), var) if value else None
            if m and (not m.groups() or m.group(1).lower() in names) and algorithms.forced_for_op(var, value, OPS[op]):
                found[var] = value
    return dict(sorted(found.items()))


def environment_algo(op: str, forced: dict[str, str]) -> str:
    """The series name of what the environment forces on `op`, e.g. 'recexch (environment)' (Open MPI's
    numeric ids by their names)."""
    names = {k: v for b in BACKENDS.values() for k, v in b.value_names(op).items()}
    forced_values = (algorithms.forced_for_op(k, v, OPS[op]) for k, v in forced.items())
    return "; ".join(dict.fromkeys(names.get(v, v) if k.startswith("OMPI_MCA_") else v
                                   for k, v in zip(forced, forced_values))) + ENVIRONMENT


def _as_native(backend: str, algo: str) -> str:
    """'<backend>:VALUE' for a series the environment forces to one plain algorithm name (judged by the
    capability table as --algos would be), else `algo`."""
    value = algo[:-len(ENVIRONMENT)] if algo.endswith(ENVIRONMENT) else ""
    return f"{backend}:{value}" if value and re.fullmatch(r"[\w-]+", value) else algo


ONE_RANK_IN_PLACE = ("at one rank an in-place collective moves no data: NCCL enqueues nothing for it "
                     "(ncclLaunchOneRank copies only between two buffers), so its time is the call's overhead, not a "
                     "transfer, and its captured graph is empty")


def one_rank_in_place(backend: str, nranks: int, inplace: bool) -> str:
    """Why an in-place case at one rank on nccl is not timed or captured ('' where it is)."""
    return ONE_RANK_IN_PLACE if inplace and nranks == 1 and info(backend).device_kind == "cuda" else ""


def with_graph(cases: list[CollectiveCase], modes: tuple[bool, ...], side_b: dict | None = None) -> list[CollectiveCase]:
    """--graph: each case once per mode (eager, captured); a captured case is skipped with the reason
    where either side's environment (`side_b`: --ab-env) cannot replay graphs, or nothing is captured."""
    if modes == (False,):
        return cases
    from collectives.device import graph_unsupported

    @functools.cache
    def reason(kind: str, env: tuple) -> str:
        return graph_unsupported(kind, dict(env))

    def captured_skip(case: CollectiveCase) -> str:
        sides = [case.group.rank_env if case.group else {}]
        if side_b is not None:
            sides.append({**sides[0], **{k: v for k, v in side_b.items() if k != "HCCL_BENCH_PYTHON"}})
        # each side's environment, a variable the group sets to None left out
        envs = [tuple(sorted((k, v) for k, v in {**os.environ, **side}.items() if v is not None)) for side in sides]
        return (one_rank_in_place(case.backend, case.nranks, case.inplace)
                or next((why for env in envs if (why := reason(info(case.backend).device_kind, env))), ""))
    out = []
    for case in cases:
        for graph in modes:
            skip = case.skip or (captured_skip(case) if graph else "")
            out.append(replace(case, graph=graph, skip=skip, group=None if skip else case.group))
    return out


def build(opts: Options, facts: Iterable[DeviceFacts] = ()) -> list[CollectiveCase]:
    """The collective cases; `facts` stand in for devices this machine lacks (unit tests)."""
    given = {f.backend: f for f in facts}
    known = {b: given.get(b) or info(b).facts() for b in opts.backends}
    side_b = opts.ab_env if opts.two_sides else None
    return launches(opts, lambda o: list(_build_launch(o, known)), lambda templates: with_graph(templates, opts.graph, side_b),
                    top_up=True)


def _resolve(backend: str, algo: str, ops, library: str, target) -> tuple[dict, tuple[tuple[str, str], ...]]:
    """Each op's setting for `algo` under one library build, and the worker group's merged environment."""
    resolved = {op: algorithms.resolve(backend, algo, op, library, target) for op in ops}
    group_env = algorithms.merge_group_env([e for e in resolved.values() if isinstance(e, dict)])
    return resolved, tuple(sorted(group_env.items()))


def _measured_by(op: str, dtype: str, sizes: list[int], nproc: int) -> dict[int, int]:
    """Bytes a case moves -> the one size that measures them (small sizes of the gathering ops round up
    to one element a rank); the size that needs no rounding is kept."""
    out: dict[int, int] = {}
    for size in sizes:
        nbytes = OPS[op].count_for(size, ITEMSIZE[dtype], nproc) * ITEMSIZE[dtype]
        if nbytes not in out or size == nbytes:
            out[nbytes] = size
    return out


def _build_launch(opts: Options, facts: dict[str, DeviceFacts] | None = None) -> Iterator[CollectiveCase]:
    for backend in opts.backends:
        device = (facts or {}).get(backend) or info(backend).facts()
        target = capabilities.Target.of(device, opts.nproc, opts.launcher)
        crowded = oversubscribed(backend, opts.nproc, device.devices, opts.launcher)
        forced = any(a != "default" for a in opts.algos)
        # the library build is read per side: side B's interpreter may load another MPI than this one
        library = info(backend).variant() if forced else ""
        library_b = info(backend).variant(side_python(opts, "B")) if forced and side_python(opts, "B") else library
        for algo in opts.algos:
            resolved, group_env = _resolve(backend, algo, opts.ops, library, target)
            resolved_b, group_env_b = _resolve(backend, algo, opts.ops, library_b, target) if library_b != library else ({}, ())
            inherited = {op: environment_switch(backend, op, os.environ) for op in opts.ops} if algo == "default" else {}
            if any(inherited.values()):   # recorded with the group, so the night it appears is another stack
                group_env = tuple(sorted({**dict(group_env), **{k: v for e in inherited.values() for k, v in e.items()}}.items()))
            key = GroupKey(backend, opts.nproc, group_env, opts.launcher)
            for op in opts.ops:
                env = inherited.get(op) or resolved[op]
                env_b = resolved_b.get(op, env)
                series_algo = environment_algo(op, inherited[op]) if inherited.get(op) else algo
                native = _as_native(backend, series_algo)
                redops = opts.redops if OPS[op].reduces else ["none"]
                choices = inplace_choices(backend, op, opts.inplace)
                for dtype, redop, (inplace, inplace_skip) in itertools.product(opts.dtypes, redops, choices):
                    measured_by = _measured_by(op, dtype, opts.sizes, opts.nproc)
                    for size in opts.sizes:
                        count = OPS[op].count_for(size, ITEMSIZE[dtype], opts.nproc)
                        case = CollectiveCase(backend=backend, algo=series_algo, op=op, dtype=dtype, redop=redop, inplace=inplace,
                                              size=size, nranks=opts.nproc, count=count, nbytes=count * ITEMSIZE[dtype])
                        if crowded:
                            case.skip = crowded
                        elif isinstance(env, algorithms.Unsupported):
                            case.skip = env.reason
                        elif isinstance(env_b, algorithms.Unsupported):
                            case.skip = f"side B ({library_b}): {env_b.reason}"
                        # timed, an in-place case at one rank is no transfer; the smoke run still checks the call
                        elif why := (no_dtype(backend, dtype)
                                     or capability_skip(target, native, op, dtype, redop) or inplace_skip
                                     or (one_rank_in_place(backend, opts.nproc, inplace) if opts.benchmark else "")):
                            case.skip = why
                        elif opts.nproc < OPS[op].min_ranks:
                            case.skip = f"{op} needs at least {OPS[op].min_ranks} ranks"
                        elif measured_by[case.nbytes] != size:   # one workload, one cell
                            case.skip = (f"{format_size(size)} rounds to {format_size(case.nbytes)} at {opts.nproc} "
                                         f"ranks: the {format_size(measured_by[case.nbytes])} case measures that")
                        else:
                            case.env, case.group = env, key
                            if resolved_b:
                                case.side_b = (env_b, group_env_b)
                        yield case


class CollectiveKind(Kind[CollectiveCase]):
    """A collective op at one size: spec -> (collectives.rank_tasks.CollectiveRank) -> CollectiveRow."""
    name = "collective"
    title = "Collectives"
    case_type = CollectiveCase
    row_type = CollectiveRow
    spec_types = (CollectiveSpec,)
    rank = ("collectives.rank_tasks", "CollectiveRank")

    def build(self, opts: Options) -> list[CollectiveCase]:
        return build(opts)

    def identity(self, case: CollectiveCase) -> dict:
        return {**super().identity(case), "algo": case.algo, "op": case.op, "dtype": case.dtype, "redop": case.redop,
                "inplace": case.inplace, "bytes": case.nbytes, "graph": case.graph}

    def spec(self, case: CollectiveCase, opts: Options) -> CollectiveSpec:
        plan = opts.plan()
        return CollectiveSpec(op=case.op, dtype=case.dtype, redop=case.redop, inplace=case.inplace, count=case.count,
                              plan={**plan, "graph": True} if case.graph else plan)

    def topic(self, case: CollectiveCase) -> str:
        return case.op

    def what(self, case: CollectiveCase) -> str:
        side = f" side {case.side}" if case.side else ""
        return (f"{case.op} {format_size(case.size)} {case.dtype} algo={case.algo} "
                f"backend={case.backend} nranks={case.nranks}{side}")

    def row(self, case: CollectiveCase, opts: Options, ran: Ran) -> CollectiveRow:
        ranks = typed(CollectiveResult, ran.results)
        k = ranks[0].iters
        matrix = [r.round_ns for r in ranks]
        summary = stats.summarize(matrix, k)
        algbw, busbw = bandwidths(case.op, case.nbytes, summary["time_us"] * 1e-6, case.nranks, case.algo)
        assert case.group is not None
        reader = info(case.backend).algo_ran   # e.g. NCCL_DEBUG_SUBSYS=TUNING: what NCCL says ran
        return CollectiveRow(
            **placed(case), **self.identity(case), size=case.size, count=case.count,
            **summary, algbw_gbps=algbw, busbw_gbps=busbw,
            wrong=sum(r.wrong for r in ranks), wrong_per_rank=[r.wrong for r in ranks],
            iters_per_round=k, calibration=ranks[0].calibration, cores_rt_ns=ranks[0].cores_rt_ns,
            round_cpu_wait_ns=stats.round_waits([r.cpu_wait_ns for r in ranks], len(matrix[0])),
            **stats.rank_rounds(matrix, ran.places),
            algo_env=case.env, group_env=case.group.rank_env, hosts=ran.hosts, link_class=link_class(ran.hosts),
            algo_ran=reader(ran.rank0_log(), case.op, case.nbytes, case.nranks) if reader else None)

    def table(self, rows: list[CollectiveRow]) -> str:
        return render(rows)

    def closing_lines(self, rows: list[CollectiveRow]) -> list[str]:
        return peak_lines(rows)

    def launch_rows(self, cell: Cell, side: str) -> list[CollectiveRow]:
        out = []
        for launch, times in sorted(cell.launches.items()):
            row, t = cast(CollectiveRow, cell.rows.get(launch, cell.row)), median(times)
            algbw, busbw = bandwidths(row.op, cell.size, t, row.nranks, row.algo)
            out.append(replace(row, launch=launch, side=side, time_us=t * 1e6, algbw_gbps=algbw, busbw_gbps=busbw))
        return out

    def case_id(self, row: CollectiveRow, size: int) -> str:
        red = f"-{row.redop}" if row.redop not in ("none", "") else ""
        return (f"{row.backend}-{algo_id(row.algo)}-{row.op}-{row.dtype}{red}-{format_size(row.size or row.bytes)}-"
                f"{'ip' if row.inplace else 'oop'}{'-graph' if row.graph else ''}{knob_suffix(row.knobs)}")


KIND = CollectiveKind()


# ---- the table ----

HEADER = (f"#{'size':>12} {'count':>12} {'type':>9} {'redop':>6} {'place':>5} "
          f"{'time(us)':>10} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'#wrong':>7}")
EXTRA = metrics(CollectiveRow, "table")   # columns after nccl-tests' own, in the row's field order


def render(rows: list[CollectiveRow]) -> str:
    """The nccl-tests table; rows of an --ab-env run get a block per side, a launch column and B/A ratios."""
    blocks: dict[tuple, list[CollectiveRow]] = {}
    for r in rows:
        blocks.setdefault((r.backend, r.algo, r.op, r.dtype, r.nranks, r.side, layout(r.hosts), knob_text(r.knobs),
                           r.graph), []).append(r)
    launches = len({r.launch for r in rows}) > 1
    out = ["# hccl-bench results. time(us): median over rounds of the slowest rank's per-op time;",
           "# algbw = size/time, busbw = algbw x factor (nccl-tests); GB/s = 1e9 bytes/s"]
    for (backend, algo, op, dtype, nranks, side, hosts, knobs, graph), block in blocks.items():
        where = f" ({hosts}, {link_class(block[0].hosts)})" if block[0].hosts else ""
        out += ["", f"# {op}  backend={backend}  algo={algo_label(backend, algo)}  dtype={dtype}  nranks={nranks}{where}  "
                    f"busbw factor={OPS[op].bus_factor(nranks, algo):.3f}" + ("  graph-captured" if graph else "")
                    + (f"  {side_role(side)}" if side else "")]
        if algo_label(backend, algo) != algo:
            out.append(f"# note: {HCCL_FALLBACK_NOTE}")
        if knobs:
            out.append(f"# knobs: {knobs}" + hbm_text(block[0].knobs, communicators=1))
        out.append(HEADER + heads(EXTRA) + (f" {'launch':>6}" if launches else ""))
        for r in sorted(block, key=lambda r: (r.bytes, r.redop, r.inplace, r.launch)):
            out.append(f" {r.bytes:>12} {r.count:>12} {r.dtype:>9} {r.redop:>6} {'ip' if r.inplace else 'oop':>5} "
                       f"{r.time_us or 0:>10.2f} {r.algbw_gbps or 0:>12.3f} {r.busbw_gbps or 0:>12.3f} "
                       f"{wrong_text(r.wrong):>7}{values(r, EXTRA)}" + (f" {r.launch:>6}" if launches else ""))
        peak = max(block, key=peak_order)
        out.append(f"# peak busbw: {peak.busbw_gbps or 0:.3f} GB/s at {format_size(peak.bytes)}" if peak.busbw_gbps else
                   f"# peak busbw: 0 (busbw factor 0 at {peak.nranks} rank); peak algbw {peak.algbw_gbps or 0:.3f} GB/s "
                   f"at {format_size(peak.bytes)}")
    return "\n".join(out + _ab_ratios(rows) + host_cost_lines(rows) + slowest_rank_lines(rows))


SLOWEST_SHOWN = 2   # ranks named per case in the table, within 120 columns (the report names more)


def slowest_rank_lines(rows: list[CollectiveRow]) -> list[str]:
    """Groups of more than NAMED_RANKS_OVER ranks: per case, its slowest ranks, where they ran, their
    median and how much slower than the group's median rank."""
    out: list[str] = []
    for r in sorted(rows, key=lambda r: (r.backend, r.algo, r.op, r.dtype, r.side, r.bytes, r.launch)):
        if r.nranks <= NAMED_RANKS_OVER or not r.round_ns_per_rank:
            continue
        try:
            view = r.ranks()
        except ValueError:
            continue
        group = view.group_median_us
        named = "; ".join(f"{rank} {view.where(rank)} {view.median_us(rank):.2f}"
                          + (f" {view.median_us(rank) / group:.2f}x" if group > 0 else "")
                          for rank in view.slowest(SLOWEST_SHOWN))
        out.append(f" {r.op:>14} {r.backend[:5]:>5} {format_size(r.bytes):>7} {'ip' if r.inplace else 'oop':>5} "
                   f"{r.launch:>3} {group:>9.2f}  {named}" + (f"  {r.side}" if r.side else ""))
    return _titled(out, f"# slowest ranks (groups of more than {NAMED_RANKS_OVER} ranks): rank host/local-rank, "
                        "median per-op time (us), x the group's median",
                   f"#{'op':>14} {'back':>5} {'size':>7} {'place':>5} {'L':>3} {'group(us)':>9}  slowest")


def _titled(lines: list[str], *header: str) -> list[str]:
    """A section of the table: a blank line and `header` above `lines`, or nothing where there are none."""
    return ["", *header, *lines] if lines else []


HOST_COST_MAX_BYTES = 1 << 20   # "small sizes": where a call's host launch cost can be most of an eager round


def host_cost_lines(rows: list[CollectiveRow]) -> list[str]:
    """--graph both: per small size, eager time - graph-captured time, the host's cost of one call."""
    times: dict[tuple, dict[bool, list[float]]] = {}
    for r in rows:
        if r.time_us is not None and r.bytes <= HOST_COST_MAX_BYTES:
            key = (r.backend, r.algo, r.op, r.dtype, r.redop, r.inplace, r.nranks, r.side, knob_text(r.knobs), r.bytes)
            times.setdefault(key, {}).setdefault(r.graph, []).append(r.time_us)
    out: list[str] = []
    for key, by_mode in sorted(times.items(), key=lambda kv: (str(kv[0][:-1]), kv[0][-1])):
        if not (by_mode.get(False) and by_mode.get(True)):
            continue
        backend, _, op, dtype, _, inplace, _, side, _, size = key
        eager, graph = median(by_mode[False]), median(by_mode[True])
        out.append(f" {op:>14} {backend:>8} {dtype:>9} {format_size(size):>10} {'ip' if inplace else 'oop':>5} "
                   f"{eager:>10.2f} {graph:>10.2f} {eager - graph:>9.2f}" + (f"  {side_role(side)}" if side else ""))
    return _titled(out, "# host cost per call: eager time - graph-captured time (the same call replayed from a device graph)",
                   f"#{'op':>14} {'backend':>8} {'dtype':>9} {'size':>10} {'place':>5} {'eager(us)':>10} "
                   f"{'graph(us)':>10} {'host(us)':>9}")


def _ab_ratios(rows: list[CollectiveRow]) -> list[str]:
    """Per size, time B / time A of each interleaved pair (same launch), and their median."""
    pairs: dict[tuple, dict] = {}
    for r in rows:
        if r.side in ("A", "B"):
            key = (r.backend, r.algo, r.op, r.dtype, r.redop, r.inplace, r.graph, r.bytes)
            pairs.setdefault(key, {}).setdefault(r.launch, {})[r.side] = r.time_us
    out: list[str] = []
    for key, by_launch in sorted(pairs.items(), key=lambda kv: (str(kv[0][:-1]), kv[0][-1])):
        ratios = [p["B"] / p["A"] for p in by_launch.values() if p.get("A") and p.get("B")]
        if ratios:
            backend, algo, op, _, _, inplace, graph, size = key
            algo = f"{algo[:6]}+g" if graph else algo
            each = " ".join(f"{x:.2f}" for x in ratios[:8]) + (" ..." if len(ratios) > 8 else "")
            out.append(f" {op:>14} {backend:>8} {algo[:8]:>8} {format_size(size):>10} {'ip' if inplace else 'oop':>5} "
                       f"{median(ratios):>7.3f}  {each}")
    return _titled(out, "# A/B: time B (candidate) / time A (baseline) per interleaved pair (launch), median; > 1: B slower",
                   f"#{'op':>14} {'backend':>8} {'algo':>8} {'size':>10} {'place':>5} {'median':>7}  per pair")


def peak_order(row: CollectiveRow) -> tuple[float, float]:
    """What a peak is the most of: busbw, then algbw (busbw's factor is 0 at one rank for most ops)."""
    return (row.busbw_gbps or 0, row.algbw_gbps or 0)


def peak_lines(rows: list[CollectiveRow]) -> list[str]:
    """One line per op: the peak busbw of each backend (and side), for the closing summary."""
    best: dict[str, dict[str, CollectiveRow]] = {}
    for r in rows:
        who = (r.backend + (f"/{r.algo}" if r.algo != "default" else "") + (" graph" if r.graph else "")
               + (f" {r.side}" if r.side else ""))
        held = best.setdefault(r.op, {}).get(who)
        if held is None or peak_order(r) > peak_order(held):
            best[r.op][who] = r
    return [f"# peak busbw {op}: " + ", ".join(f"{who} {r.busbw_gbps or 0:.3f} GB/s at {format_size(r.bytes)}" if r.busbw_gbps
                                               else f"{who} 0 at {r.nranks} rank (algbw {r.algbw_gbps or 0:.3f} GB/s at "
                                                    f"{format_size(r.bytes)})"
                                               for who, r in sorted(by.items()))
            for op, by in best.items()]


def hbm_text(knobs: dict, communicators: int) -> str:
    """HCCL_BUFFSIZE is not free: HCCL allocates it twice (in and out) per communicator, in HBM."""
    value = knobs.get("HCCL_BUFFSIZE")
    try:
        mb = float(value) if value is not None else None
    except ValueError:
        return f"  (HCCL_BUFFSIZE={value!r} is not a number of MB)"
    if mb is None:
        return ""
    total = comm_buffers(communicators, mb) / 1e6
    return (f"  HBM for HCCL buffers: 2 x {mb:g} MB x {communicators} communicator{'s' if communicators > 1 else ''}"
            f" = {total:g} MB per rank")
