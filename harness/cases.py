"""The sweep as a list of cases: every (backend, algo, op, dtype, redop, in-place, size) with
either its worker-group key, or the reason it is skipped. A case's spec and row are its bench
kind's (harness/case_rows.py: CollectiveBench, LayerBench, TuningBench)."""
from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from collectives import algorithms, capabilities
from collectives.backends import BACKENDS, info, oversubscribed
from collectives.capabilities import DeviceFacts
from collectives.ops import ITEMSIZE, OPS
from collectives.ops.base import ENVIRONMENT, algo_id
from collectives.sizes import format_size
from harness.group_key import GroupKey
from harness.options import Options


@dataclass
class Case:
    backend: str
    algo: str
    op: str
    dtype: str
    redop: str
    inplace: bool
    size: int                       # requested bytes
    nranks: int
    count: int = 0                  # elements in the op's full buffer (nccl-tests' count)
    nbytes: int = 0                 # bytes actually moved per nccl-tests' S
    env: dict = field(default_factory=dict)         # the algorithm setting this op sees
    group: GroupKey | None = None
    skip: str = ""
    launch: int = 0
    side: str = ""                  # --ab-env: "A" or "B"
    partner: GroupKey | None = None  # --ab-env: the other side's group (rounds alternate between them)
    knobs: dict = field(default_factory=dict)       # --knobs: this case's values (set in its group)
    graph: bool = False             # --graph: rounds replayed from a captured device graph
    side_b: tuple | None = None     # (setting, group env) on side B where its interpreter loads another library build

    @property
    def id(self) -> str:
        place = "ip" if self.inplace else "oop"
        red = f"-{self.redop}" if OPS[self.op].reduces else ""
        return (f"{self.backend}-{algo_id(self.algo)}-{self.op}-{self.dtype}{red}-{format_size(self.size)}-{place}"
                f"{'-graph' if self.graph else ''}{knob_suffix(self.knobs)}{launch_suffix(self.launch, self.side)}")


def environment_switch(backend: str, op: str, env) -> dict[str, str]:
    """The algorithm switches of `backend` (BackendInfo.switch_vars) that `env` already sets and
    that apply to `op`: a per-op variable (MPIR_CVAR_<OP>_INTRA_ALGORITHM, OMPI_MCA_coll_tuned_<op>_algorithm)
    when it names one of the op's switch names, a global one (NCCL_ALGO, HCCL_ALGO) for every collective.
    That is the site's production setting: the 'default' series measures it under its own name."""
    if OPS[op].point_to_point:
        return {}
    s = OPS[op].switches
    names = {n.lower() for n in (s.hccl_op, s.mpich_cvar, s.ompi_param) if n}
    found = {}
    for var, value in env.items():
        for pattern in info(backend).switch_vars:
            m = re.fullmatch(pattern.replace(r"\w+", r"(\w+)"), var) if value else None
            if m and (not m.groups() or m.group(1).lower() in names) and algorithms.forced_for_op(var, value, OPS[op]):
                found[var] = value
    return dict(sorted(found.items()))


def environment_algo(op: str, forced: dict[str, str]) -> str:
    """The series name of what the environment forces on `op`: its values, e.g. 'recexch (environment)'
    (Open MPI's numeric coll_tuned ids by their names: 'pairwise (environment)', not '2 (environment)')."""
    names = {str(i): name for name, i in OPS[op].switches.ompi_ids.items()}
    values = (algorithms.forced_for_op(k, v, OPS[op]) for k, v in forced.items())
    return "; ".join(dict.fromkeys(names.get(v, v) if k.startswith("OMPI_MCA_") else v
                                   for k, v in zip(forced, values))) + ENVIRONMENT


def _as_native(backend: str, algo: str) -> str:
    """'<backend>:VALUE' for a series forced by the environment with one plain algorithm name (so the
    capability table judges it as --algos would: NCCL_ALGO=PAT exported skips all_reduce), else `algo`."""
    value = algo[:-len(ENVIRONMENT)] if algo.endswith(ENVIRONMENT) else ""
    return f"{backend}:{value}" if value and re.fullmatch(r"[\w-]+", value) else algo


ONE_RANK_IN_PLACE = ("at one rank an in-place collective moves no data: NCCL enqueues nothing for it "
                     "(ncclLaunchOneRank copies only between two buffers), so its captured graph is empty")


def with_graph(cases: list[Case], modes: tuple[bool, ...], side_b: dict | None = None) -> list[Case]:
    """--graph: each case once per mode (eager, captured), side by side; a captured case where the
    backend cannot replay graphs with its group's environment (--knobs values included; with an A/B,
    either side's: `side_b` is --ab-env/--ab-source, and a pair runs both or neither) is skipped with
    the reason (collectives.device.graph_unsupported), and so is an in-place case at one rank on nccl
    (nothing to capture)."""
    if modes == (False,):
        return cases
    from collectives.device import graph_unsupported
    reasons: dict[tuple, str] = {}

    def reason(kind: str, env: dict) -> str:
        key = (kind, tuple(sorted(env.items())))
        if key not in reasons:
            reasons[key] = graph_unsupported(kind, env)
        return reasons[key]

    def captured_skip(case: Case) -> str:
        kind = info(case.backend).device_kind
        if kind == "cuda" and case.nranks == 1 and case.inplace:
            return ONE_RANK_IN_PLACE
        sides = [case.group.rank_env if case.group else {}]
        if side_b is not None:
            sides.append({**sides[0], **{k: v for k, v in side_b.items() if k != "HCCL_BENCH_PYTHON"}})
        for side in sides:
            env = dict(os.environ)
            for name, value in side.items():
                if value is None:   # the group unsets it
                    env.pop(name, None)
                else:
                    env[name] = value
            if why := reason(kind, env):
                return why
        return ""
    out = []
    for case in cases:
        for graph in modes:
            skip = case.skip or (captured_skip(case) if graph else "")
            out.append(replace(case, graph=graph, skip=skip, group=None if skip else case.group))
    return out


def _inplace_choices(backend: str, op: str, modes: tuple[str, ...]) -> list[tuple[bool, str]]:
    """(in-place?, skip reason) per requested mode; 'auto' prefers out-of-place where it exists."""
    have = info(backend).forms(op)
    lib = info(backend).api
    out = []
    for mode in modes:
        if mode == "auto":
            out.append((False not in have, ""))
        else:
            want = mode == "in"
            reason = "" if want in have else f"{lib} has no {'in-place' if want else 'out-of-place'} {op}"
            out.append((want, reason))
    return list(dict.fromkeys(out))


def launch_suffix(launch: int, side: str = "") -> str:
    return (f"-L{launch}" if launch else "") + (f"-{side}" if side else "")


def knob_suffix(knobs: dict) -> str:
    return "".join(f"-{k}={v}" for k, v in sorted(knobs.items()))


def with_knobs(templates: list, knobs: dict[str, list[str]]) -> list:
    """--knobs: every template once per combination of values, its group's environment extended
    by them (a worker group of its own, so the library reads them at start), as its own series."""
    if not knobs:
        return templates
    combos = [dict(zip(knobs, values)) for values in itertools.product(*knobs.values())]
    out = []
    for template in templates:
        for combo in combos:
            group = template.group and replace(template.group, env=tuple(sorted({**dict(template.group.env), **combo}.items())))
            out.append(replace(template, knobs=combo, group=group))
    return out


def launches(opts: Options, build_one, per_knobs=lambda templates: templates) -> list:
    """Every launch repeats the whole selection in fresh groups, one launch after the other. With
    --ab-env both sides' groups stay alive and each case has an A item (the environment as it is)
    and a B item (plus --ab-env) side by side, A first in even launches and B first in odd ones;
    collectives and layers alternate single rounds between the two groups (harness/session.py), because this
    VM's speed flips 2x within seconds and only rounds milliseconds apart see the same machine."""
    sides = ("A", "B") if opts.two_sides else ("",)
    cases = []
    for launch in range(opts.repeat):
        order = sides if launch % 2 == 0 else sides[::-1]
        for template in per_knobs(with_knobs(build_one(opts), opts.knobs)):
            groups = {}
            for side in sides:
                extra = {k: v for k, v in opts.ab_env.items() if k != "HCCL_BENCH_PYTHON"} if side == "B" else {}
                # side B's interpreter loads another MPI build: its own algorithm variables, the knobs kept
                own = ({"env": tuple(sorted({**dict(template.side_b[1]), **getattr(template, "knobs", {})}.items()))}
                       if side == "B" and getattr(template, "side_b", None) else {})
                groups[side] = template.group and replace(template.group, launch=launch, side=side,
                                                          python=side_python(opts, side), side_env=tuple(sorted(extra.items())),
                                                          **own)
            for side in order:
                own = {"env": template.side_b[0]} if side == "B" and getattr(template, "side_b", None) else {}
                case = replace(template, launch=launch, side=side, group=groups[side], **own)
                if side and case.group is not None:
                    case.partner = groups["B" if side == "A" else "A"]
                cases.append(case)
    return cases


def side_python(opts: Options, side: str) -> str:
    """The interpreter a side's ranks run ("" = this one): side B's HCCL_BENCH_PYTHON in --ab-env/--ab-source."""
    return (opts.ab_env.get("HCCL_BENCH_PYTHON") or "") if side == "B" else ""


def build(opts: Options, facts: Iterable[DeviceFacts] = ()) -> list[Case]:
    """The collective cases. `facts` stand in for devices this machine lacks (unit tests); every
    backend without them is read from the device here (BackendInfo.read_facts)."""
    given = {f.backend: f for f in facts}
    known = {b: given.get(b) or info(b).facts() for b in opts.backends}
    side_b = opts.ab_env if opts.two_sides else None
    return launches(opts, lambda o: _build_launch(o, known), lambda templates: with_graph(templates, opts.graph, side_b))


def _capability_skip(target: capabilities.Target, algo: str, op: str, dtype: str, redop: str) -> str:
    """Why the capability table says this (op, dtype, redop) under `algo` cannot run here ('' if it can)."""
    backend = target.facts.backend
    return info(backend).skip_reason(target, algorithms.native_name(backend, algo), op, dtype, redop)


def _resolve(backend: str, algo: str, ops, library: str, target) -> tuple[dict, tuple[tuple[str, str], ...]]:
    """Each op's setting for `algo` under one library build, and the worker group's merged environment."""
    resolved = {op: algorithms.resolve(backend, algo, op, library, target) for op in ops}
    group_env = algorithms.merge_group_env([e for e in resolved.values() if isinstance(e, dict)])
    return resolved, tuple(sorted(group_env.items()))


def _measured_by(op: str, dtype: str, sizes: list[int], nproc: int) -> dict[int, int]:
    """Bytes a case moves -> the one size that measures them: small sizes of the gathering ops round
    up to one element a rank (8 B and 32 B are both 32 B at 8 ranks), and one workload measured
    twice would merge into one cell; the size that needs no rounding is kept."""
    out: dict[int, int] = {}
    for size in sizes:
        nbytes = OPS[op].count_for(size, ITEMSIZE[dtype], nproc) * ITEMSIZE[dtype]
        if nbytes not in out or size == nbytes:
            out[nbytes] = size
    return out


def _build_launch(opts: Options, facts: dict[str, DeviceFacts] | None = None) -> list[Case]:
    cases: list[Case] = []
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
                for dtype in opts.dtypes:
                    redops = opts.redops if OPS[op].reduces else ["none"]
                    for redop in redops:
                        for inplace, inplace_skip in _inplace_choices(backend, op, opts.inplace):
                            measured_by = _measured_by(op, dtype, opts.sizes, opts.nproc)
                            for size in opts.sizes:
                                case = Case(backend, series_algo, op, dtype, redop, inplace, size, opts.nproc)
                                case.count = OPS[op].count_for(size, ITEMSIZE[dtype], opts.nproc)
                                case.nbytes = case.count * ITEMSIZE[dtype]
                                if crowded:
                                    case.skip = crowded
                                elif isinstance(env, algorithms.Unsupported):
                                    case.skip = env.reason
                                elif isinstance(env_b, algorithms.Unsupported):
                                    case.skip = f"side B ({library_b}): {env_b.reason}"
                                elif dtype not in info(backend).dtypes:
                                    case.skip = f"{backend} has no {dtype} datatype (has {', '.join(info(backend).dtypes)})"
                                elif why := _capability_skip(target, _as_native(backend, series_algo), op, dtype, redop):
                                    case.skip = why
                                elif inplace_skip:
                                    case.skip = inplace_skip
                                elif opts.nproc < OPS[op].min_ranks:
                                    case.skip = f"{op} needs at least {OPS[op].min_ranks} ranks"
                                elif measured_by[case.nbytes] != size:   # one workload, one cell
                                    case.skip = (f"{format_size(size)} rounds to {format_size(case.nbytes)} at {opts.nproc} "
                                                 f"ranks: the {format_size(measured_by[case.nbytes])} case measures that")
                                else:
                                    case.env, case.group = env, key
                                    if resolved_b:
                                        case.side_b = (env_b, group_env_b)
                                cases.append(case)
    return cases



TP_BLOCKS = (("linear", False), ("mlp", False), ("mlp", True))   # (layer, sequence parallel)
IMPLS = ("manual", "dtensor")


@dataclass
class LayerCase:
    """A tensor-parallel block bench (pp == 1) or a pipeline-step bench (pp > 1)."""
    backend: str
    bench: str                       # "linear" (a TP block) or "pipeline" (a pipeline step), as in its row
    tp: int
    pp: int
    nranks: int
    layer: str = ""
    sp: bool = False
    impl: str = ""
    schedule: str = ""
    microbatches: int = 0
    group: GroupKey | None = None
    skip: str = ""
    launch: int = 0
    side: str = ""                  # --ab-env: "A" or "B"
    partner: GroupKey | None = None  # --ab-env: the other side's group (rounds alternate between them)
    knobs: dict = field(default_factory=dict)

    @property
    def dp(self) -> int:
        return self.nranks // (self.tp * self.pp) if self.nranks % (self.tp * self.pp) == 0 else 0

    @property
    def id(self) -> str:
        if self.bench == "linear":
            name = f"{self.backend}-linear-tp{self.tp}-{self.layer}{'-sp' if self.sp else ''}-{self.impl}"
        else:
            name = f"{self.backend}-pipeline-tp{self.tp}-pp{self.pp}-{self.schedule}-m{self.microbatches}"
        return name + knob_suffix(self.knobs) + launch_suffix(self.launch, self.side)


def build_layers(opts: Options) -> list[LayerCase]:
    """TP blocks for every tp; pipeline steps for every (tp, pp > 1), schedule and microbatch count.
    Pairs whose tp x pp does not divide the world size are listed as skipped with the reason."""
    return launches(opts, _build_layer_launch)


def _build_layer_launch(opts: Options) -> list[LayerCase]:
    from layers import support  # what the installed torch lacks (imports torch: only when layer benches are collected)
    out: list[LayerCase] = []
    for backend in opts.backends:
        key = GroupKey(backend, opts.nproc, (), opts.launcher)
        layered = ", ".join(b for b, i in BACKENDS.items() if i.layers)
        not_torch = "" if info(backend).layers else f"layer benches need torch.distributed ({layered}), not {info(backend).api}"
        for tp in opts.tp:
            for layer, sp in TP_BLOCKS:
                for impl in IMPLS:
                    case = LayerCase(backend, "linear", tp, 1, opts.nproc, layer=layer, sp=sp, impl=impl, group=key)
                    case.skip = not_torch or ("" if opts.nproc % tp == 0 else
                                              f"tp {tp} does not divide the world size {opts.nproc}")
                    case.skip = case.skip or support.missing("tp_bench", impl=impl)
                    out.append(case)
        for tp in opts.tp:
            for pp in opts.pp:
                for schedule in opts.schedules:
                    for m in opts.microbatches:
                        case = LayerCase(backend, "pipeline", tp, pp, opts.nproc, schedule=schedule, microbatches=m, group=key)
                        if not_torch:
                            case.skip = not_torch
                        elif opts.nproc % (tp * pp):
                            case.skip = f"tp x pp = {tp} x {pp} = {tp * pp} does not divide the world size {opts.nproc}"
                        elif pp == 1:
                            case.skip = f"pp=1 has no pipeline: tp={tp} is measured by the linear benches"
                        else:
                            case.skip = support.missing("pp_bench", schedule=schedule)
                        out.append(case)
    return out


OVERLAP_OPS = tuple(name for name, op in OPS.items() if op.has_async)   # the ones with an asynchronous form everywhere


@dataclass
class TuningCase:
    """A tuning bench case: overlap at a message size, bucketing at a bucket size, or one
    communication dtype of the gradients (benches/test_tuning.py)."""
    backend: str
    bench: str                      # "overlap", "bucket" or "compress"
    nranks: int
    size: int = 0                   # overlap: message bytes; bucket: bucket bytes (0: per tensor); compress: gradients
    op: str = ""
    dtype: str = "float32"
    redop: str = "sum"
    inplace: bool = False
    count: int = 0
    nbytes: int = 0
    comm_dtype: str = ""
    group: GroupKey | None = None
    skip: str = ""
    launch: int = 0
    side: str = ""
    partner: GroupKey | None = None
    knobs: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        what = {"overlap": f"{self.op}-{self.dtype}-{format_size(self.size)}",
                "bucket": f"{format_size(self.size) if self.size else 'per-tensor'}",
                "compress": self.comm_dtype}[self.bench]
        return f"{self.backend}-{self.bench}-{what}{knob_suffix(self.knobs)}{launch_suffix(self.launch, self.side)}"


def build_tuning(opts: Options, facts: Iterable[DeviceFacts] = ()) -> list[TuningCase]:
    known = {f.backend: f for f in facts}
    return launches(opts, lambda o: _build_tuning_launch(o, known))


def _build_tuning_launch(opts: Options, facts: dict[str, DeviceFacts] | None = None) -> list[TuningCase]:
    from layers.memory import bucket_plan, mlp_gradient_sizes
    sizes = mlp_gradient_sizes(opts.hidden, opts.layers)
    model = 4 * sum(sizes)
    out: list[TuningCase] = []
    for backend in opts.backends:
        key = GroupKey(backend, opts.nproc, (), opts.launcher)
        device = (facts or {}).get(backend) or info(backend).facts()
        target = capabilities.Target.of(device, opts.nproc, opts.launcher)   # the same table as the sweep's cases
        for op in (op for op in opts.ops if op in OVERLAP_OPS):
            for dtype in opts.dtypes:
                inplace, inplace_skip = _inplace_choices(backend, op, ("auto",))[0]
                for size in opts.sizes:
                    case = TuningCase(backend, "overlap", opts.nproc, size, op, dtype, inplace=inplace, group=key)
                    case.count = OPS[op].count_for(size, ITEMSIZE[dtype], opts.nproc)
                    case.nbytes = case.count * ITEMSIZE[dtype]
                    if dtype not in info(backend).dtypes:
                        case.skip = f"{backend} has no {dtype} datatype (has {', '.join(info(backend).dtypes)})"
                    elif why := _capability_skip(target, "default", op, dtype, "sum" if OPS[op].reduces else "none"):
                        case.skip = why
                    out.append(case)
        seen: dict[int, int] = {}
        for cap in opts.buckets:
            case = TuningCase(backend, "bucket", opts.nproc, cap, group=key)
            n = len(bucket_plan([4 * s for s in sizes], cap))
            if cap and n in seen:
                case.skip = (f"the same {n} bucket{'s' if n > 1 else ''} as {format_size(seen[n])} for the "
                             f"{format_size(model)} of gradients")
            seen.setdefault(n, cap)
            out.append(case)
        for comm_dtype in opts.comm_dtypes:
            case = TuningCase(backend, "compress", opts.nproc, model, comm_dtype=comm_dtype, group=key)
            if comm_dtype not in info(backend).dtypes:
                case.skip = (f"{info(backend).library} has no {comm_dtype} datatype to sum in "
                             f"({info(backend).api}: {', '.join(info(backend).dtypes)})")
            elif why := _capability_skip(target, "default", "all_reduce", comm_dtype, "sum"):
                case.skip = why
            out.append(case)
    return out
