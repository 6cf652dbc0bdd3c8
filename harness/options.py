"""Command-line options of the benches, parsed and validated once before any rank starts.

Two steps: `parse` turns the option values into `Options` and nothing else (no torch, no shell,
no environment change), so it can be tested and reused anywhere; `prepare` then asks this machine
what the options leave to it (which backends `auto` means, the device count, a device backend's
probe, the environment an --ab-source script sets) and exports what ranks inherit. Every problem in
either step becomes one `OptionError` line saying what is wrong and what is allowed; the plugin
turns it into pytest's usage error (exit code 4).
"""
from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field

from collectives import algorithms
from collectives.backends import BACKENDS, info, oversubscribed
from collectives.capabilities import ALL as TORCH_BACKEND_DTYPES
from collectives.device import DeviceUnavailable, device_count
from collectives.ops import OPS, REDOPS
from collectives.sizes import SizeError, parse_size, parse_sizes
from collectives.timing import MAX_GRAPH_ITERS, SMOKE, Plan
from harness import files
from harness.launchers import validate_template
from harness.provenance import numpy_torch_problem
from kinds import KINDS
from kinds.base import KindOption
from reports.estimators import DEFAULT_ESTIMATOR, DEFAULT_MIN_EFFECT, ESTIMATORS

BENCH_SIZES = "8:32M:4"
SMOKE_SIZES = "8,4K,64K"
MPI_THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")
COMM_DTYPES = ("float32", "bfloat16", "float16", "int8")
BUCKETS = "0,1M,4M,16M,64M,256M"   # the bucketing bench's default bucket sizes (0: one all_reduce per tensor)
GRAPH_MODES = {"off": (False,), "on": (True,), "both": (False, True)}   # --graph: eager and/or captured rounds
INPLACE_MODES = {"auto": ("auto",), "0": ("out",), "out": ("out",), "1": ("in",), "in": ("in",), "both": ("out", "in")}


class OptionError(ValueError):
    pass


@dataclass
class Options:
    benchmark: bool = False
    backends: list[str] = field(default_factory=list)
    nproc: int = 2
    launcher: str = ""
    ops: list[str] = field(default_factory=lambda: list(OPS))
    sizes: list[int] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=lambda: ["float32"])
    redops: list[str] = field(default_factory=lambda: ["sum"])
    algos: list[str] = field(default_factory=lambda: ["default"])
    inplace: tuple[str, ...] = ("auto",)
    graph: tuple[bool, ...] = (False,)   # --graph: which of eager (False) and graph-captured (True) rounds to time
    iters: int = 0
    warmup: int = Plan.warmup
    rounds: int = Plan.rounds
    round_time_s: float = Plan.round_time_s
    timeout_s: float = 300.0
    repeat: int = 1
    baseline: str = ""
    history: bool = False
    previous_stack: str = ""          # --previous-stack: the night before's stack, A/B-tested against this one the same night
    previous_is_python: bool = False  # ... given as its python interpreter (else a shell script to source)
    previous_differs: bool = False    # ... and it is another stack than this one: the A/B measures every cell (else none runs)
    invocation: list[str] = field(default_factory=list)   # pytest's arguments (set by the plugin): the same-night A/B reruns them
    ab_env: dict = field(default_factory=dict)
    ab_source: str = ""              # --ab-source: the script side B's environment is sourced from
    only_cases: list = field(default_factory=list)   # --cases: the case ids to run (none: all)
    ab_until_decided: bool = False   # sequential A/B: --repeat is the budget (--max-repeat), undecided cells rerun
    inconclusive: str = "fail"       # the gate on cells without enough evidence: "fail" (exit 6) or "pass"
    estimator: str = DEFAULT_ESTIMATOR   # each launch's statistic of its rounds that verdicts rest on (reports/estimators.py)
    min_effect: float = DEFAULT_MIN_EFFECT   # the smallest change a verdict counts (reports/compare.py assign_verdicts)
    labels: dict = field(default_factory=dict)   # side -> what to call it ("A": "mpich 4.2.3")
    knobs: dict = field(default_factory=dict)    # --knobs: variable -> values, each value a series in its own group
    buckets: list[int] = field(default_factory=lambda: [0 if b == "0" else parse_size(b) for b in BUCKETS.split(",")])
    comm_dtypes: list[str] = field(default_factory=lambda: list(COMM_DTYPES))
    mpi_thread_level: str = ""   # "" = mpi4py's default (multiple)
    results: str = "results"
    driver_host: str = "127.0.0.1"
    # layer benches
    tp: list[int] = field(default_factory=lambda: [1, 2])
    pp: list[int] = field(default_factory=lambda: [1, 2])
    microbatches: list[int] = field(default_factory=lambda: [4])
    schedules: list[str] = field(default_factory=lambda: ["gpipe", "1f1b", "interleaved1f1b"])
    hidden: int = 256
    seq: int = 128
    batch: int = 8
    layers: int = 8
    kind_options: dict = field(default_factory=dict)   # each bench kind's own options (kinds.base.KindOption), converted

    def plan(self) -> dict:
        return {"warmup": self.warmup, "rounds": self.rounds, "iters": self.iters, "round_time_s": self.round_time_s}

    @property
    def two_sides(self) -> bool:
        """An A/B session: --ab-env or --ab-source, even one that changes nothing here (an A/A then)."""
        return bool(self.ab_env or self.ab_source)


def add_options(parser) -> None:
    g = parser.getgroup("hccl-bench", "collective and layer benchmarks")
    g.addoption("--benchmark", action="store_true", default=False,
                help="run the full timed sweep (without it: a quick correctness smoke on a few small sizes)")
    g.addoption("--backend", default="auto",
                help="gloo, mpi, nccl, hccl, comma list, or auto (hccl/nccl when their device exists, else gloo and mpi)")
    g.addoption("--nproc", default=None, help="ranks per group (default 2 on CPU, the device count on GPU/NPU)")
    g.addoption("--launcher", default="", help="cluster launcher template with {nproc}, e.g. 'mpirun -np {nproc} -hostfile h'")
    g.addoption("--ops", default=",".join(OPS), help=f"comma list of: {', '.join(OPS)}")
    g.addoption("--sizes", default=None,
                help=f"min:max:factor or a list, K/M/G = 2^10/2^20/2^30 (default {BENCH_SIZES}; smoke {SMOKE_SIZES})")
    g.addoption("--dtypes", default="float32", help=f"comma list of: {', '.join(TORCH_BACKEND_DTYPES)}")
    g.addoption("--redops", default="sum", help=f"comma list of: {', '.join(REDOPS)}")
    g.addoption("--algos", default="default",
                help="default, ring, tree, or BACKEND:NATIVE (mpi:recursive_doubling, hccl:NHR, nccl:CollnetDirect)")
    g.addoption("--inplace", default="auto", help="auto (out-of-place where the library has it), 0/out, 1/in, both")
    g.addoption("--graph", default="off",
                help="device backends: time each round as one replay of its K iterations captured in a CUDA graph "
                     "(nccl) or NPUGraph (hccl): off, on, or both (eager and captured as separate series)")
    g.addoption("--iters", default="0", help="iterations per round (0: chosen so a round lasts --round-time)")
    g.addoption("--warmup", default=None, help=f"warm-up iterations (default {Plan.warmup}; smoke {SMOKE.warmup})")
    g.addoption("--rounds", default=None, help=f"timed rounds per case (default {Plan.rounds}; smoke {SMOKE.rounds})")
    g.addoption("--round-time", default=None,
                help=f"target seconds per round when choosing iterations (default {Plan.round_time_s:g}; "
                     f"smoke {SMOKE.round_time_s:g})")
    g.addoption("--timeout", default="300", help="seconds before a case counts as hung")
    g.addoption("--results", default="results", help="folder for results/<timestamp>/")
    g.addoption("--repeat", default="1", help="run the whole selection N times, each launch in fresh worker groups")
    g.addoption("--driver-host", default="127.0.0.1", help="address ranks use to reach the driver")
    g.addoption("--mpi-thread-level", default="", help="the MPI thread level the mpi backend asks for: "
                                                       f"{', '.join(MPI_THREAD_LEVELS)} (default: mpi4py's, multiple); "
                                                       "it changes results, and compare keeps levels apart")
    g.addoption("--benchmark-tables", action="store_true", default=False,
                help="also print pytest-benchmark's own per-case tables (off: they are long and wide; the JSON is the same)")
    g.addoption("--harness-benches", action="store_true", default=False,
                help="also run the harness's own speed checks (benches marked harness_bench, e.g. comparing 10,000 cells)")
    g.addoption("--knobs", action="append", default=[],
                help="NAME=v1,v2,... (repeatable): run each selected case once per value, in its own worker group with "
                     "the variable set, as its own series (HCCL_BUFFSIZE=100,200,400, NCCL_PROTO=LL,Simple, MPIR_CVAR_*)")
    g.addoption("--buckets", default=BUCKETS,
                help="gradient bucket sizes of the bucketing bench (0: one all_reduce per tensor)")
    g.addoption("--comm-dtypes", default=",".join(COMM_DTYPES),
                help=f"gradient communication types of the compression bench: {', '.join(COMM_DTYPES)}")
    _add_verdict_options(parser.getgroup("hccl-bench A/B and verdicts", "comparing stacks and judging changes"))
    _add_layer_options(parser.getgroup("hccl-bench layers", "tensor- and pipeline-parallel layer benches"))
    for kind in KINDS:
        if kind.options:
            group = parser.getgroup(f"hccl-bench {kind.name}", f"the {kind.name} benches")
            for option in kind.options:
                group.addoption(option.flag, default=option.default, help=option.help)


def _add_verdict_options(g) -> None:
    g.addoption("--ab-env", default="", help="interleaved A/B: each launch runs as is (A) and with these "
                                             "variables set (B), e.g. 'HCCL_ALGO=level0:NA;level1:ring,HCCL_BUFFSIZE=400'")
    g.addoption("--ab-source", default="", help="interleaved A/B against another installed stack: side B gets the "
                                                "environment a shell has after sourcing this file (e.g. another CANN's "
                                                "set_env.sh); HCCL_BENCH_PYTHON=PATH in it or --ab-env picks B's interpreter")
    g.addoption("--ab-until-decided", action="store_true", default=False,
                help="sequential A/B: add interleaved launches, only for the cells still undecided, until every cell "
                     "is a regression, an improvement or no change, or --max-repeat launches are spent")
    g.addoption("--max-repeat", default="12", help="the launch budget of --ab-until-decided (default 12)")
    g.addoption("--inconclusive", default="fail", help="the gate on cells without enough evidence to say 'no change' "
                                                       "(--baseline, --ab-until-decided): fail (exit 6) or pass")
    g.addoption("--estimator", default=DEFAULT_ESTIMATOR,
                help=f"the statistic of each launch's rounds that the --baseline, --ab-until-decided and --history "
                     f"verdicts rest on: {', '.join(ESTIMATORS)} (default {DEFAULT_ESTIMATOR}; tables show medians)")
    g.addoption("--min-effect", default=str(DEFAULT_MIN_EFFECT),
                help=f"the smallest change (a fraction) the --baseline, --ab-until-decided and --history verdicts count "
                     f"(default {DEFAULT_MIN_EFFECT:g}; below it a confirmed change is 'no change'); recorded with the run")
    g.addoption("--label", action="append", default=[],
                help="SIDE=NAME, repeatable: what to call side A (the baseline: the stack as started) and side B "
                     "(the candidate: with --ab-env/--ab-source) in tables, reports and verdicts")
    g.addoption("--baseline", default="", help="compare with a stored result at the end: PATH or 'auto' "
                                               "(the latest baseline saved for this platform)")
    g.addoption("--history", action="store_true", help="nightly guard at the end: judge this run against the earlier "
                                                       "runs in its --results folder; a new confirmed regression fails")
    g.addoption("--cases", default="", help="run only these cases: a file of case ids, one per line, as the tables "
                                            "name them without their -L<launch>/-A/-B ends (the same-night A/B's child gets one)")
    g.addoption("--previous-stack", default="", help="with --history: the stack of the night before (its env script to "
                                                     "source, CANN's set_env.sh, or its python); when it differs from this "
                                                     "one, every cell is settled the same night by a sequential interleaved "
                                                     "A/B against it; when it is this one, none runs and the night records "
                                                     "that it kept its stack")


def _add_layer_options(g) -> None:
    g.addoption("--tp", default="1,2", help="tensor-parallel degrees for the layer benches (dp = nproc / (tp x pp))")
    g.addoption("--pp", default="1,2", help="pipeline-parallel degrees for the layer benches")
    g.addoption("--microbatches", default="4", help="microbatch counts for the pipeline benches")
    g.addoption("--schedules", default="gpipe,1f1b,interleaved1f1b",
                help="pipeline schedules: gpipe, 1f1b, interleaved1f1b, interleavedzb, zbv")
    g.addoption("--hidden", default="256", help="hidden size of the layer benches' MLP blocks (ffn = 4 x hidden)")
    g.addoption("--seq", default="128", help="sequence length")
    g.addoption("--batch", default="8", help="global batch per data-parallel replica (split into microbatches)")
    g.addoption("--layers", default="8", help="MLP blocks in the pipelined model (split evenly over stages)")


def _list(text: str, allowed, what: str) -> list[str]:
    items = [s.strip() for s in str(text).split(",") if s.strip()]
    if not items:
        raise OptionError(f"--{what} is empty: allowed {', '.join(allowed)}")
    for item in items:
        if item not in allowed:
            raise OptionError(f"unknown {what[:-1] if what.endswith('s') else what} {item!r}: allowed {', '.join(allowed)}")
    return list(dict.fromkeys(items))


def _int(text, name: str, minimum: int) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise OptionError(f"--{name} must be an integer >= {minimum}, got {text!r}") from None
    if value < minimum:
        raise OptionError(f"--{name} must be >= {minimum}, got {value}")
    return value


def _float(text, name: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise OptionError(f"--{name} must be a positive number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise OptionError(f"--{name} must be a finite positive number of seconds, got {text!r}")
    return value


def _kind_option(option: KindOption, text) -> object:
    """A kind's option through the converter declared beside it; its ValueError is the one line."""
    try:
        return option.convert(str(text))
    except ValueError as exc:
        raise OptionError(f"{option.flag} {str(text)!r}: {exc}") from None


def auto_backends() -> list[str]:
    """hccl where torch_npu is installed, nccl where an NVIDIA driver is, else gloo (+ mpi if installed)."""
    if importlib.util.find_spec("torch_npu") is not None:
        return ["hccl"]
    if os.path.exists("/proc/driver/nvidia/version"):
        return ["nccl"]
    return ["gloo"] + (["mpi"] if importlib.util.find_spec("mpi4py") is not None else [])


def parse(getoption) -> Options:
    """Build Options from pytest's config.getoption; raise OptionError on the first problem. What
    only the machine can say is left for `prepare`: `backends` is empty for --backend auto, `nproc`
    0 without --nproc, and --ab-source's variables are not in `ab_env` yet."""
    o = Options()
    o.benchmark = bool(getoption("benchmark"))
    backend = str(getoption("backend")).strip()
    o.backends = [] if backend == "auto" else _list(backend, list(BACKENDS), "backend")
    o.launcher = str(getoption("launcher") or "")
    if o.launcher and (err := validate_template(o.launcher)):
        raise OptionError(err)
    nproc = getoption("nproc")
    o.nproc = _int(nproc, "nproc", 1) if nproc is not None else 0
    o.ops = _list(getoption("ops"), list(OPS), "ops")
    sizes = getoption("sizes")
    if sizes is not None and not str(sizes).strip():
        raise OptionError(f"--sizes is empty: give min:max:factor (e.g. {BENCH_SIZES}) or a list (e.g. {SMOKE_SIZES})")
    sizes = sizes or (BENCH_SIZES if o.benchmark else SMOKE_SIZES)
    try:
        o.sizes = parse_sizes(str(sizes))
    except SizeError as exc:
        raise OptionError(str(exc)) from None
    o.dtypes = _list(getoption("dtypes"), TORCH_BACKEND_DTYPES, "dtypes")
    o.redops = _list(getoption("redops"), REDOPS, "redops")
    o.algos = [a.strip() for a in str(getoption("algos")).split(",") if a.strip()]
    if not o.algos:
        raise OptionError("--algos is empty: use default, ring, tree or BACKEND:NATIVE")
    for algo in o.algos:
        if err := algorithms.validate(algo):
            raise OptionError(err)
    inplace = str(getoption("inplace")).strip()
    if inplace not in INPLACE_MODES:
        raise OptionError(f"--inplace {inplace!r}: allowed auto, 0, 1, out, in, both")
    o.inplace = INPLACE_MODES[inplace]
    graph = str(getoption("graph")).strip()
    if graph not in GRAPH_MODES:
        raise OptionError(f"--graph {graph!r}: allowed off, on, both")
    o.graph = GRAPH_MODES[graph]
    o.iters = _int(getoption("iters"), "iters", 0)
    if True in o.graph and o.iters > MAX_GRAPH_ITERS:
        raise OptionError(f"--iters {o.iters} with --graph: a captured round holds at most {MAX_GRAPH_ITERS} iterations")
    plan = Plan() if o.benchmark else SMOKE
    o.warmup = _int(getoption("warmup") if getoption("warmup") is not None else plan.warmup, "warmup", 0)
    o.rounds = _int(getoption("rounds") if getoption("rounds") is not None else plan.rounds, "rounds", 1)
    round_time = getoption("round_time")
    o.round_time_s = _float(round_time if round_time is not None else plan.round_time_s, "round-time")
    o.timeout_s = _float(getoption("timeout"), "timeout")
    o.results = str(getoption("results"))
    if not o.results.strip():
        raise OptionError("--results is empty: give a folder for results/<timestamp>/")
    try:
        files.check_creatable(o.results)
    except files.ResultsFolderError as exc:
        raise OptionError(str(exc)) from None
    o.repeat = _int(getoption("repeat"), "repeat", 1)
    o.baseline = str(getoption("baseline") or "")
    o.history = bool(getoption("history"))
    o.ab_env = _env_list(str(getoption("ab_env") or ""))
    o.ab_source = str(getoption("ab_source") or "")
    two_sides = o.two_sides
    o.ab_until_decided = bool(getoption("ab_until_decided"))
    if o.ab_until_decided:
        if not two_sides:
            raise OptionError("--ab-until-decided needs two sides: add --ab-env VAR=VALUE or --ab-source FILE")
        if o.repeat > 1:
            raise OptionError("--ab-until-decided chooses the launches itself: give its budget as --max-repeat, "
                              "not --repeat")
        o.repeat = _int(getoption("max_repeat"), "max-repeat", 3)
    o.inconclusive = str(getoption("inconclusive")).strip()
    if o.inconclusive not in ("fail", "pass"):
        raise OptionError(f"--inconclusive {o.inconclusive!r}: allowed fail, pass")
    o.estimator = str(getoption("estimator")).strip()
    if o.estimator not in ESTIMATORS:
        raise OptionError(f"--estimator {o.estimator!r}: allowed {', '.join(ESTIMATORS)}")
    try:
        o.min_effect = float(getoption("min_effect"))
    except (TypeError, ValueError):
        o.min_effect = float("nan")
    if not 0 < o.min_effect < 1:
        raise OptionError(f"--min-effect {getoption('min_effect')!r}: give a fraction above 0 and below 1 (0.05 = 5%)")
    o.labels = parse_labels(getoption("label") or [])
    o.knobs = parse_knobs(getoption("knobs") or [])
    if both := sorted(set(o.knobs) & set(o.ab_env)):
        raise OptionError(f"{both[0]} is both a --knobs variable and an --ab-env one: give it in one place "
                          "(--knobs sweeps it on both sides, --ab-env sets it for side B)")
    o.comm_dtypes = _list(getoption("comm_dtypes"), COMM_DTYPES, "comm-dtypes")
    buckets = str(getoption("buckets")).split(",")
    try:
        o.buckets = sorted({0 if b.strip() == "0" else parse_size(b.strip()) for b in buckets if b.strip()})
    except SizeError as exc:
        raise OptionError(f"--buckets: {exc}") from None
    if not o.buckets:
        raise OptionError("--buckets is empty: give sizes like 0,1M,4M,16M (0: one all_reduce per tensor)")
    if o.history and two_sides:
        raise OptionError("--history judges single-stack nightly runs; an --ab-env/--ab-source run has two sides "
                          "(compare them with hccl-bench compare RUN --ab, or give it to hccl-bench history --ab)")
    if o.baseline and two_sides:
        raise OptionError("--baseline compares a single-stack run with a stored one; an --ab-env/--ab-source run has "
                          "two sides, judged against each other (--ab-until-decided, or hccl-bench compare RUN --ab)")
    o.only_cases = _case_ids(str(getoption("cases") or ""))
    o.previous_stack = str(getoption("previous_stack") or "")
    if o.previous_stack:
        if not o.history:
            raise OptionError("--previous-stack settles a --history suspicion: add --history")
        o.previous_is_python = previous_stack_kind(o.previous_stack) == "python"
        o.previous_stack = os.path.abspath(o.previous_stack)   # recorded with the run; symlinks kept (a venv's python)
        o.previous_differs = (o.previous_stack != os.path.abspath(sys.executable) if o.previous_is_python
                              else bool(sourced_env(o.previous_stack, "--previous-stack")))
    if o.baseline not in ("", "auto") and not os.path.exists(o.baseline):
        raise OptionError(f"--baseline {o.baseline!r} does not exist: give a results.json (or its folder) or 'auto'")
    o.driver_host = str(getoption("driver_host"))
    o.mpi_thread_level = str(getoption("mpi_thread_level") or "")
    if o.mpi_thread_level:
        if o.mpi_thread_level not in MPI_THREAD_LEVELS:
            raise OptionError(f"--mpi-thread-level {o.mpi_thread_level!r}: allowed {', '.join(MPI_THREAD_LEVELS)}")
    _parse_layer_options(o, getoption)
    o.kind_options = {opt.dest: _kind_option(opt, getoption(opt.dest)) for kind in KINDS for opt in kind.options}
    if o.nproc:
        check_world(o)
    return o


def prepare(o: Options, getoption) -> Options:
    """The machine's part, after `parse`: resolve --backend auto and the default --nproc, probe each
    backend's device, merge --ab-source's environment under --ab-env's, and export the MPI thread
    level; raise OptionError on the first problem (the same lines as before the split)."""
    resolved_world = not o.nproc
    o.backends = o.backends or auto_backends()
    if any(info(b).family == "torch" for b in o.backends) and (abi := numpy_torch_problem()):
        raise OptionError(abi)
    for name in o.backends:
        try:
            info(name).probe()
        except DeviceUnavailable as exc:
            raise OptionError(str(exc)) from None
    o.nproc = o.nproc or _default_nproc(o.backends)
    for name in (b for b in o.backends if info(b).one_rank_per_device):   # one line here, not NCCL's duplicate-GPU error
        if crowded := oversubscribed(name, o.nproc, device_count(info(name).device_kind), o.launcher):
            raise OptionError(crowded)
    if resolved_world:
        check_world(o)
    o.ab_env = {**sourced_env(o.ab_source), **o.ab_env}
    python = o.ab_env.get("HCCL_BENCH_PYTHON")
    if python and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise OptionError(f"HCCL_BENCH_PYTHON={python!r} is not an executable file: give side B's python interpreter")
    if o.mpi_thread_level:
        os.environ["HCCL_BENCH_MPI_THREAD_LEVEL"] = o.mpi_thread_level   # every rank inherits it, under any launcher
    return o


def parse_knobs(items: list[str]) -> dict[str, list[str]]:
    """['HCCL_BUFFSIZE=100,200'] -> {"HCCL_BUFFSIZE": ["100", "200"]}; OptionError on anything else."""
    knobs: dict[str, list[str]] = {}
    for item in items:
        name, sep, values = str(item).partition("=")
        name = name.strip()
        chosen = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name or not name.replace("_", "").isalnum() or not chosen:
            raise OptionError(f"--knobs {item!r}: use NAME=value1,value2,... (an environment variable and its values)")
        if name in knobs:
            raise OptionError(f"--knobs {name} is given twice: put every value in one list")
        knobs[name] = list(dict.fromkeys(chosen))
    return knobs


def parse_labels(items: list[str]) -> dict[str, str]:
    """['A=mpich 4.2.3', 'B=mpich 5.0'] -> {"A": ..., "B": ...}; OptionError on anything else."""
    labels = {}
    for item in items:
        side, sep, name = str(item).partition("=")
        if not sep or side.strip() not in ("A", "B") or not name.strip():
            raise OptionError(f"--label {item!r}: use A=NAME or B=NAME (A the baseline, B the candidate)")
        labels[side.strip()] = name.strip()
    return labels


BASH_OWN = {"_", "SHLVL", "PWD", "OLDPWD", "COLUMNS", "LINES"}   # set by the shell itself, never by the script


def sourced_env(path: str, option: str = "--ab-source") -> dict[str, str | None]:
    """What sourcing a stack's env script (CANN's set_env.sh, a module file wrapper) changes, as
    NAME -> VALUE, and NAME -> None for what it unsets (else `unset HCCL_ALGO` in the previous
    stack's script left the variable on both sides: an A/A read as the change). Run once in a
    throwaway bash, its environment read before and after, so its shell logic ($PATH appends) works
    and bash's own variables (SHLVL, PWD) never count."""
    if not path:
        return {}
    if not os.path.isfile(path):
        raise OptionError(f"{option} {path!r} is not a file: give a shell script to source (e.g. set_env.sh)")
    shell = 'env -0; printf "\\1\\0"; source "$1" >/dev/null 2>&1 || exit 97; env -0; printf "\\2\\0"'
    try:
        proc = subprocess.run(["bash", "-c", shell, "ab-source", path], capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise OptionError(f"{option} {path!r}: sourcing it did not return within 60 s in bash "
                          "(does it wait for input?)") from None
    if proc.returncode:
        raise OptionError(f"{option} {path!r}: sourcing it failed (exit {proc.returncode}) in bash")
    before, _, after = proc.stdout.decode(errors="replace").partition("\1\0")
    if not after.endswith("\2\0"):   # `exit` in the script ended the shell: nothing after it is known
        raise OptionError(f"{option} {path!r} ended the shell (exit) while being sourced: give a script that "
                          "returns, as set_env.sh does")

    def parsed(text: str) -> dict[str, str]:
        pairs = (item.split("=", 1) for item in text.split("\0") if "=" in item)
        return {k: v for k, v in pairs if k not in BASH_OWN}
    was, now = parsed(before), parsed(after)
    return {**{k: v for k, v in now.items() if not _same_value(was.get(k), v)}, **{k: None for k in was if k not in now}}


def _same_value(was: str | None, now: str) -> bool:
    """Equal, or the same path list once repeated entries are dropped: CANN's set_env.sh sourced again
    where it was sourced already prepends its paths to PATH and LD_LIBRARY_PATH a second time, and
    that stack is this one."""
    if was is None or was == now:
        return was == now
    entries = lambda value: list(dict.fromkeys(value.split(":")))  # noqa: E731
    return ":" in now and entries(was) == entries(now)


def previous_stack_kind(path: str) -> str:
    """'script' (a text file, sourced in bash like --ab-source) or 'python' (an executable binary
    named python*, run like HCCL_BENCH_PYTHON); OptionError for anything else."""
    what = f"--previous-stack {path!r}"
    if not os.path.isfile(path):
        raise OptionError(f"{what} is not a file: give the previous stack's env script (set_env.sh) or its python interpreter")
    try:
        with open(path, "rb") as f:
            head = f.read(8192)
    except OSError as exc:
        raise OptionError(f"{what} cannot be read: {exc.strerror or exc}") from None
    if head.startswith(b"\x7fELF"):
        if not any(os.path.basename(p).startswith("python") for p in (path, os.path.realpath(path))):
            raise OptionError(f"{what} is a program but not a python interpreter: "
                              "give the previous stack's python or its env script")
        if not os.access(path, os.X_OK):
            raise OptionError(f"{what} is a python interpreter but not executable")
        return "python"
    first = head.split(b"\n", 1)[0]
    if b"\0" in head or (first.startswith(b"#!") and b"python" in first):
        raise OptionError(f"{what} is neither a shell script to source nor a python interpreter "
                          "(a Python script or another binary): give set_env.sh or the previous stack's python")
    return "script"


def _case_ids(path: str) -> list[str]:
    """--cases FILE: its case ids, one per line (exact, so knob values with '=' or ';' need no -k quoting)."""
    if not path:
        return []
    try:
        ids = [line.strip() for line in open(path, encoding="utf-8") if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise OptionError(f"--cases {path!r} cannot be read ({getattr(exc, 'strerror', None) or exc}): "
                          "give a text file of case ids, one per line") from None
    if not ids:
        raise OptionError(f"--cases {path!r} names no case: give a text file of case ids, one per line")
    return ids


def _env_list(text: str) -> dict[str, str]:
    """'K=V,K2=V2' -> {K: V, K2: V2}; values may contain ';' and ':' (HCCL_ALGO) but not ','."""
    env = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.replace("_", "").isalnum():
            raise OptionError(f"--ab-env item {item!r}: use NAME=VALUE[,NAME=VALUE...]")
        env[key] = value
    return env


def _ints(text, name: str) -> list[int]:
    items = [s.strip() for s in str(text).split(",") if s.strip()]
    if not items:
        raise OptionError(f"--{name} is empty: give a comma list of integers >= 1")
    return list(dict.fromkeys(_int(i, name, 1) for i in items))


def _parse_layer_options(o: Options, getoption) -> None:
    """Layer-bench shapes and degrees (their fit to the world size: `check_world`)."""
    from layers import schedules
    o.tp, o.pp = _ints(getoption("tp"), "tp"), _ints(getoption("pp"), "pp")
    o.microbatches = _ints(getoption("microbatches"), "microbatches")
    o.schedules = _list(getoption("schedules"), list(schedules.SCHEDULES), "schedules")
    o.hidden, o.seq = _int(getoption("hidden"), "hidden", 1), _int(getoption("seq"), "seq", 1)
    o.batch, o.layers = _int(getoption("batch"), "batch", 1), _int(getoption("layers"), "layers", 1)


def check_world(o: Options) -> None:
    """The layer benches' degrees and shapes against the world size --nproc: each constraint is
    checked here, before any rank starts."""
    from layers import schedules
    valid = [(t, p) for t in o.tp for p in o.pp if o.nproc % (t * p) == 0]
    if not valid:
        raise OptionError(f"no tp x pp x dp equals the world size {o.nproc}: tp in {o.tp}, pp in {o.pp} "
                          f"(tp x pp must divide --nproc)")
    for t in {t for t, _ in valid}:
        if o.hidden % t:
            raise OptionError(f"--hidden {o.hidden} is not divisible by tp {t}")
        if o.seq % t:
            raise OptionError(f"--seq {o.seq} is not divisible by tp {t} (sequence parallelism shards it)")
    for m in o.microbatches:
        if o.batch % m:
            raise OptionError(f"--batch {o.batch} does not split into {m} microbatches")
        for p in {p for _, p in valid if p > 1}:
            for schedule in o.schedules:
                if err := schedules.validate(schedule, p, m, o.layers):
                    raise OptionError(f"pp {p}: {err}")


def _default_nproc(backends: list[str]) -> int:
    for backend in backends:
        if info(backend).one_rank_per_device:
            return max(1, device_count(info(backend).device_kind))
    return 2
