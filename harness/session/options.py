"""The benches' options, declared with their converters, parsed (`parse`: no torch, no shell) and settled on
this machine (`prepare`) before any rank starts; every problem is one `OptionError` line (docs/options.md)."""
from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from collectives import algorithms
from collectives.backends import BACKENDS
from collectives.capabilities import ALL as TORCH_BACKEND_DTYPES
from collectives.ops import OPS, REDOPS
from collectives.sizes import SizeError, parse_sizes
from collectives.timing import MAX_GRAPH_ITERS, SMOKE, Plan
from harness import files
from harness.engine.launchers import validate_template
from harness.session import night_budget
from harness.session.option_error import OptionError
from harness.session.stack_env import previous_stack_kind, sourced_env
from harness.session.world import check_world, settle
from kinds import KINDS
from kinds.base import KindOption
from kinds.options import BUCKETS, COMM_DTYPES, Options, bucket_size, fraction, items
from layers import schedules
from reports.estimators import ESTIMATORS
from schema.judgement import DEFAULT_ESTIMATOR, DEFAULT_MIN_EFFECT
from schema.results import side_labels

BENCH_SIZES = "8:32M:4"
SMOKE_SIZES = "8,4K,64K"
MPI_THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")
GRAPH_MODES = {"off": (False,), "on": (True,), "both": (False, True)}   # --graph: eager and/or captured rounds
INPLACE_MODES = {"auto": ("auto",), "0": ("out",), "1": ("in",), "out": ("out",), "in": ("in",), "both": ("out", "in")}


Convert = Callable[[Any, str], Any]   # (pytest's value, the flag) -> the Options value; ValueError: the one line


def _switch(value, flag: str) -> bool:
    return bool(value)


@dataclass(frozen=True)
class CoreOption:
    """A core option with its converter beside it, as a kind's KindOption (docs/options.md): a default
    of False is a switch, [] a repeatable option; `needs`: read only with that option on."""
    flag: str
    default: Any
    help: str
    convert: Convert = _switch
    into: str = ""
    needs: str = ""

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def action(self) -> str | None:
        return "store_true" if self.default is False else "append" if self.default == [] else None

    @property
    def field(self) -> str:
        return self.into or self.dest


def _list(text: str, allowed, what: str) -> list[str]:
    if not (names := items(text)):
        raise OptionError(f"--{what} is empty: allowed {', '.join(allowed)}")
    for item in names:
        if item not in allowed:
            raise OptionError(f"unknown {what[:-1] if what.endswith('s') else what} {item!r}: allowed {', '.join(allowed)}")
    return list(dict.fromkeys(names))


def _int(text, name: str, minimum: int) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise OptionError(f"--{name} must be an integer >= {minimum}, got {text!r}") from None
    if value < minimum:
        raise OptionError(f"--{name} must be >= {minimum}, got {value}")
    return value


def _seconds(value, flag: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise OptionError(f"{flag} must be a positive number of seconds, got {value!r}") from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise OptionError(f"{flag} must be a finite positive number of seconds, got {value!r}")
    return seconds


def _text(value, flag: str) -> str:
    return str(value or "")


def _budget(value, flag: str) -> float:
    try:
        return night_budget.parse_budget(value)
    except ValueError as exc:
        raise OptionError(str(exc)) from None


def _whole(minimum: int) -> Convert:
    return lambda value, flag: _int(value, flag[2:], minimum)


def _top_up(value, flag: str) -> int:
    """'auto' (-1: --repeat under --history, else none) or a whole number of launches."""
    if str(value).strip().lower() == "auto":
        return -1
    try:
        return _int(value, flag[2:], 0)
    except OptionError:
        raise OptionError(f"{flag} must be auto or a whole number of launches >= 0, got {value!r}") from None


def _wholes(value, flag: str) -> list[int]:
    """A comma list of integers >= 1, repeats dropped."""
    if not (given := items(value)):
        raise OptionError(f"{flag} is empty: give a comma list of integers >= 1")
    return list(dict.fromkeys(_int(i, flag[2:], 1) for i in given))


def _list_of(allowed) -> Convert:
    """A comma list of names in `allowed`, repeats dropped (a registry is read when parsing)."""
    return lambda value, flag: _list(value, list(allowed), flag[2:])


def _choice(allowed) -> Convert:
    """A name in `allowed`; a dict's name as the value it stands for."""
    def convert(value, flag: str) -> Any:
        text = str(value).strip()
        if text not in allowed:
            raise OptionError(f"{flag} {text!r}: allowed {', '.join(allowed)}")
        return allowed[text] if isinstance(allowed, dict) else text
    return convert


def _backends(value, flag: str) -> list[str]:
    """auto is [] here: `prepare` asks the machine."""
    return [] if str(value).strip() == "auto" else _list(value, list(BACKENDS), "backend")


def _launcher(value, flag: str) -> str:
    template = str(value or "")
    if template and (err := validate_template(template)):
        raise OptionError(err)
    return template


def _sizes(value, flag: str) -> list[int]:
    if not str(value).strip():
        raise OptionError(f"--sizes is empty: give min:max:factor (e.g. {BENCH_SIZES}) or a list (e.g. {SMOKE_SIZES})")
    return parse_sizes(str(value))   # its SizeError is the line


def _algos(value, flag: str) -> list[str]:
    if not (algos := items(value)):
        raise OptionError("--algos is empty: use default, ring, tree or BACKEND:NATIVE")
    for algo in algos:
        if err := algorithms.validate(algo):
            raise OptionError(err)
    return algos


def _results(value, flag: str) -> str:
    folder = str(value)
    if not folder.strip():
        raise OptionError("--results is empty: give a folder for results/<timestamp>/")
    files.check_creatable(folder)   # its ResultsFolderError is the line
    return folder


def _thread_level(value, flag: str) -> str:
    """'' is mpi4py's default (multiple)."""
    level = str(value or "")
    if level and level not in MPI_THREAD_LEVELS:
        raise OptionError(f"--mpi-thread-level {level!r}: allowed {', '.join(MPI_THREAD_LEVELS)}")
    return level


def _knobs(value, flag: str) -> dict[str, list[str]]:
    """['HCCL_BUFFSIZE=100,200'] -> {"HCCL_BUFFSIZE": ["100", "200"]}; OptionError on anything else."""
    knobs: dict[str, list[str]] = {}
    for item in value or []:
        name, sep, values = str(item).partition("=")
        name = name.strip()
        chosen = items(values)
        if not sep or not name or not name.replace("_", "").isalnum() or not chosen:
            raise OptionError(f"--knobs {item!r}: use NAME=value1,value2,... (an environment variable and its values)")
        if name in knobs:
            raise OptionError(f"--knobs {name} is given twice: put every value in one list")
        knobs[name] = list(dict.fromkeys(chosen))
    return knobs


def _buckets(value, flag: str) -> list[int]:
    try:
        buckets = sorted({bucket_size(b) for b in items(value)})
    except SizeError as exc:
        raise OptionError(f"--buckets: {exc}") from None
    if not buckets:
        raise OptionError("--buckets is empty: give sizes like 0,1M,4M,16M (0: one all_reduce per tensor)")
    return buckets


def _baseline(value, flag: str) -> str:
    path = str(value or "")
    if path not in ("", "auto") and not os.path.exists(path):
        raise OptionError(f"--baseline {path!r} does not exist: give a results.json (or its folder) or 'auto'")
    return path


def _case_ids(value, flag: str) -> list[str]:
    """--cases FILE: its case ids, one per line (exact, so knob values with '=' or ';' need no -k quoting)."""
    path = str(value or "")
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


def _env_list(value, flag: str) -> dict[str, str]:
    """'K=V,K2=V2' -> {K: V, K2: V2}; values may contain ';' and ':' (HCCL_ALGO) but not ','."""
    env = {}
    for item in items(value or ""):
        key, sep, setting = item.partition("=")
        if not sep or not key.replace("_", "").isalnum():
            raise OptionError(f"--ab-env item {item!r}: use NAME=VALUE[,NAME=VALUE...]")
        env[key] = setting
    return env


CORE = (
    CoreOption("--benchmark", False, "run the full timed sweep (without it: a quick correctness smoke on a few small sizes)"),
    CoreOption("--backend", "auto", "gloo, mpi, nccl, hccl, comma list, or auto (hccl/nccl when their device exists, else gloo "
               "and mpi)", _backends, into="backends"),
    CoreOption("--nproc", None, "ranks per group (default 2 on CPU, the device count on GPU/NPU)", _whole(1)),
    CoreOption("--launcher", "", "cluster launcher template with {nproc}, e.g. 'mpirun -np {nproc} -hostfile h'", _launcher),
    CoreOption("--ops", ",".join(OPS), f"comma list of: {', '.join(OPS)}", _list_of(OPS)),
    CoreOption("--sizes", None,
               f"min:max:factor or a list, K/M/G = 2^10/2^20/2^30 (default {BENCH_SIZES}; smoke {SMOKE_SIZES})", _sizes),
    CoreOption("--dtypes", "float32", f"comma list of: {', '.join(TORCH_BACKEND_DTYPES)}", _list_of(TORCH_BACKEND_DTYPES)),
    CoreOption("--redops", "sum", f"comma list of: {', '.join(REDOPS)}", _list_of(REDOPS)),
    CoreOption("--algos", "default",
               "default, ring, tree, or BACKEND:NATIVE (mpi:recursive_doubling, hccl:NHR, nccl:CollnetDirect)", _algos),
    CoreOption("--inplace", "auto", "auto (out-of-place where the library has it), 0/out, 1/in, both", _choice(INPLACE_MODES)),
    CoreOption("--graph", "off", "device backends: time each round as one replay of its K iterations captured in a CUDA graph "
               "(nccl) or NPUGraph (hccl): off, on, or both (eager and captured as separate series)", _choice(GRAPH_MODES)),
    CoreOption("--iters", "0", "iterations per round (0: chosen so a round lasts --round-time)", _whole(0)),
    CoreOption("--warmup", None, f"warm-up iterations (default {Plan.warmup}; smoke {SMOKE.warmup})", _whole(0)),
    CoreOption("--rounds", None, f"timed rounds per case (default {Plan.rounds}; smoke {SMOKE.rounds})", _whole(1)),
    CoreOption("--round-time", None,
               f"target seconds per round when choosing iterations (default {Plan.round_time_s:g}; "
               f"smoke {SMOKE.round_time_s:g})", _seconds, into="round_time_s"),
    CoreOption("--timeout", "300", "seconds before a case counts as hung", _seconds, into="timeout_s"),
    CoreOption("--results", "results", "folder for results/<timestamp>/", _results),
    CoreOption("--repeat", None, "run the whole selection N times, each launch in fresh worker groups (default 1; "
               f"under --night-budget {night_budget.MAX_LAUNCHES}, the most it may run)", _whole(1)),
    CoreOption("--driver-host", "127.0.0.1", "address ranks use to reach the driver", _text),
    CoreOption("--mpi-thread-level", "", "the MPI thread level the mpi backend asks for: "
                                         f"{', '.join(MPI_THREAD_LEVELS)} (default: mpi4py's, multiple); "
                                         "it changes results, and compare keeps levels apart", _thread_level),
    CoreOption("--benchmark-tables", False,
               "also print pytest-benchmark's own per-case tables (off: they are long and wide; the JSON is the same)"),
    CoreOption("--harness-benches", False,
               "also run the harness's own speed checks (benches marked harness_bench, e.g. comparing 10,000 cells)"),
    CoreOption("--knobs", [], "NAME=v1,v2,... (repeatable): run each selected case once per value, in its own worker group with "
               "the variable set, as its own series (HCCL_BUFFSIZE=100,200,400, NCCL_PROTO=LL,Simple, MPIR_CVAR_*)", _knobs),
    CoreOption("--buckets", BUCKETS, "gradient bucket sizes of the bucketing bench (0: one all_reduce per tensor)", _buckets),
    CoreOption("--comm-dtypes", ",".join(COMM_DTYPES),
               f"gradient communication types of the compression bench: {', '.join(COMM_DTYPES)}", _list_of(COMM_DTYPES)),
)

VERDICTS = (
    CoreOption("--ab-env", "", "interleaved A/B: each launch runs as is (A) and with these "
                               "variables set (B), e.g. 'HCCL_ALGO=level0:NA;level1:ring,HCCL_BUFFSIZE=400'", _env_list),
    CoreOption("--ab-source", "", "interleaved A/B against another installed stack: side B gets the "
                                  "environment a shell has after sourcing this file (e.g. another CANN's "
                                  "set_env.sh); HCCL_BENCH_PYTHON=PATH in it or --ab-env picks B's interpreter", _text),
    CoreOption("--ab-until-decided", False, "sequential A/B: add interleaved launches, only for the cells still undecided, until "
               "every cell is a regression, an improvement or no change, or --max-repeat launches are spent"),
    CoreOption("--max-repeat", "12", "the launch budget of --ab-until-decided (default 12)", _whole(3), needs="ab_until_decided"),
    CoreOption("--inconclusive", "fail", "the gate on cells without enough evidence to say 'no change' "
                                         "(--baseline, --ab-until-decided): fail (exit 6) or pass", _choice(("fail", "pass"))),
    CoreOption("--estimator", None,
               f"the statistic of each launch's rounds that the --baseline, --ab-until-decided and --history "
               f"verdicts rest on: {', '.join(ESTIMATORS)} (default {DEFAULT_ESTIMATOR}, fastest under --night-budget; "
               "tables show medians)",
               _choice(ESTIMATORS)),
    CoreOption("--min-effect", str(DEFAULT_MIN_EFFECT),
               f"the smallest change (a fraction) the --baseline, --ab-until-decided and --history verdicts count "
               f"(default {DEFAULT_MIN_EFFECT:g}; below it a confirmed change is 'no change'); recorded with the run",
               fraction),
    CoreOption("--label", [], "SIDE=NAME, repeatable: what to call side A (the baseline: the stack as started) and side B (the "
               "candidate: with --ab-env/--ab-source) in tables, reports and verdicts",
               lambda value, flag: side_labels(value or []), into="labels"),   # its ValueError is the line
    CoreOption("--baseline", "", "compare with a stored result at the end: PATH or 'auto' "
                                 "(the latest baseline saved for this platform)", _baseline),
    CoreOption("--history", False, "nightly guard at the end: judge this run against the earlier "
                                   "runs in its --results folder; a new confirmed regression fails"),
    CoreOption("--night-budget", "auto", "a timed sweep's wall-clock budget: launches are added, the same for every "
               "cell, while another fits (at least 3, at most --repeat); its rounds default to "
               f"{night_budget.NIGHT_PLAN.rounds} of {night_budget.NIGHT_PLAN.round_time_s * 1e3:g} ms and its estimator "
               "to fastest. auto: 5m for a --history night without --repeat, else off; 0: off; else 300, 300s, 5m",
               _budget, into="night_budget_s"),
    CoreOption("--top-up", "auto", "with --history: up to N more launches, each only for the collective cells that "
                                   "have fewer than --repeat launches with ranks 0 and 1's cores in the history's usual "
                                   "placement (a VM's host moves them); auto: --repeat with --history, else 0", _top_up),
    CoreOption("--cases", "", "run only these cases: a file of case ids, one per line, as the tables name them without their "
               "-L<launch>/-A/-B ends (the same-night A/B's child gets one)", _case_ids, into="only_cases"),
    CoreOption("--previous-stack", "", "with --history: the stack of the night before (its env script to source, CANN's "
               "set_env.sh, or its python); when it differs from this one, every cell is settled the same night by a sequential "
               "interleaved A/B against it; when it is this one, none runs and the night records that it kept its stack", _text),
)

LAYERS = (
    CoreOption("--tp", "1,2", "tensor-parallel degrees for the layer benches (dp = nproc / (tp x pp))", _wholes),
    CoreOption("--pp", "1,2", "pipeline-parallel degrees for the layer benches", _wholes),
    CoreOption("--microbatches", "4", "microbatch counts for the pipeline benches", _wholes),
    CoreOption("--schedules", "gpipe,1f1b,interleaved1f1b",
               "pipeline schedules: gpipe, 1f1b, interleaved1f1b, interleavedzb, zbv", _list_of(schedules.SCHEDULES)),
    CoreOption("--hidden", "256", "hidden size of the layer benches' MLP blocks (ffn = 4 x hidden)", _whole(1)),
    CoreOption("--seq", "128", "sequence length", _whole(1)),
    CoreOption("--batch", "8", "global batch per data-parallel replica (split into microbatches)", _whole(1)),
    CoreOption("--layers", "8", "MLP blocks in the pipelined model (split evenly over stages)", _whole(1)),
)

GROUPS = (("hccl-bench", "collective and layer benchmarks", CORE),
          ("hccl-bench A/B and verdicts", "comparing stacks and judging changes", VERDICTS),
          ("hccl-bench layers", "tensor- and pipeline-parallel layer benches", LAYERS))
DECLARED = CORE + VERDICTS + LAYERS   # parse converts them in this order
PLAN_FIELDS = ("warmup", "rounds", "round_time_s")   # Options fields that --benchmark's plan fills when not given
OPTION_FIELDS = {f.name for f in fields(Options)}


def add_options(parser) -> None:
    """Each group's table, then each kind's; converted by `parse`, not argparse's type= (a multi-line usage error)."""
    for name, description, declared in GROUPS:
        group = parser.getgroup(name, description)
        for core in declared:
            group.addoption(core.flag, default=core.default, help=core.help, **({"action": core.action} if core.action else {}))
    for kind in (k for k in KINDS if k.settings.flags):
        group = parser.getgroup(f"hccl-bench {kind.name}", f"the {kind.name} benches")
        for option in kind.settings.flags:
            group.addoption(option.flag, default=option.default, help=option.help)


def _converted(option: CoreOption, value) -> Any:
    """None when not given and without a default (parse fills it in); a ValueError is the line."""
    if value is None and option.default is None:
        return None
    try:
        return option.convert(value, option.flag)
    except ValueError as exc:
        raise OptionError(str(exc)) from None


def _kind_option(option: KindOption, text) -> object:
    """A kind's option through the converter declared beside it; its ValueError is the one line."""
    try:
        return option.convert(str(text))
    except ValueError as exc:
        raise OptionError(f"{option.flag} {str(text)!r}: {exc}") from None


def parse(getoption) -> Options:
    """Options from pytest's config.getoption, or OptionError on the first problem; what only the
    machine can say is left for `prepare` (backends [] for auto, nproc 0, --ab-source's variables)."""
    values = {option.field: _converted(option, getoption(option.dest)) for option in DECLARED
              if not option.needs or getoption(option.needs)}
    o = Options(**{name: value for name, value in values.items() if name in OPTION_FIELDS})
    o.settings = [kind.settings(**{opt.dest: _kind_option(opt, getoption(opt.dest)) for opt in kind.settings.flags})
                  for kind in KINDS if kind.settings.flags]
    _night_budget(o, values)
    plan = night_budget.NIGHT_PLAN if o.night_budget_s else Plan() if o.benchmark else SMOKE   # what is not given
    for name in (n for n in PLAN_FIELDS if values[n] is None):
        setattr(o, name, getattr(plan, name))
    o.sizes = o.sizes or parse_sizes(BENCH_SIZES if o.benchmark else SMOKE_SIZES)
    o.nproc = o.nproc or 0   # prepare's choice
    _check_across(o, values)
    return o


def _night_budget(o: Options, values: dict) -> None:
    """--night-budget auto resolved (on for a timed --history night that leaves its launches to it), and what
    it changes when on: --repeat is its cap, the estimator fastest, no --top-up (not the usual placement's)."""
    if o.night_budget_s < 0:
        o.night_budget_s = night_budget.DEFAULT_BUDGET_S if o.history and o.benchmark and values["repeat"] is None else 0.0
    o.repeat = values["repeat"] or (night_budget.MAX_LAUNCHES if o.night_budget_s else 1)
    o.estimator = values["estimator"] or ("fastest" if o.night_budget_s else DEFAULT_ESTIMATOR)
    if o.night_budget_s and o.ab_until_decided:
        raise OptionError("--night-budget and --ab-until-decided both choose the launches: give the A/B's as --max-repeat")
    if o.night_budget_s and o.top_up < 0:
        o.top_up = 0


def _check_across(o: Options, values: dict) -> None:
    """The combinations no converter sees alone, in the order parse always checked them."""
    if True in o.graph and o.iters > MAX_GRAPH_ITERS:
        raise OptionError(f"--iters {o.iters} with --graph: a captured round holds at most {MAX_GRAPH_ITERS} iterations")
    if o.ab_until_decided:
        if not o.two_sides:
            raise OptionError("--ab-until-decided needs two sides: add --ab-env VAR=VALUE or --ab-source FILE")
        if o.repeat > 1:
            raise OptionError("--ab-until-decided chooses the launches itself: give its budget as --max-repeat, not --repeat")
        o.repeat = values["max_repeat"]
    if both := sorted(set(o.knobs) & set(o.ab_env)):
        raise OptionError(f"{both[0]} is both a --knobs variable and an --ab-env one: give it in one place "
                          "(--knobs sweeps it on both sides, --ab-env sets it for side B)")
    if o.history and o.two_sides:
        raise OptionError("--history judges single-stack nightly runs; an --ab-env/--ab-source run has two sides "
                          "(compare them with hccl-bench compare RUN --ab, or give it to hccl-bench history --ab)")
    if o.baseline and o.two_sides:
        raise OptionError("--baseline compares a single-stack run with a stored one; an --ab-env/--ab-source run has "
                          "two sides, judged against each other (--ab-until-decided, or hccl-bench compare RUN --ab)")
    if o.top_up < 0:
        o.top_up = o.repeat if o.history else 0
    elif o.top_up and not o.history:
        raise OptionError(f"--top-up {o.top_up} completes a --history night's launches in the usual placement: "
                          "add --history (or give --top-up 0)")
    if o.previous_stack:
        if not o.history:
            raise OptionError("--previous-stack settles a --history suspicion: add --history")
        o.previous_is_python = previous_stack_kind(o.previous_stack) == "python"
        o.previous_stack = os.path.abspath(o.previous_stack)   # recorded with the run; symlinks kept (a venv's python)
        o.previous_differs = (o.previous_stack != os.path.abspath(sys.executable) if o.previous_is_python
                              else bool(sourced_env(o.previous_stack, "--previous-stack")))
    if o.nproc:
        check_world(o)


def prepare(o: Options, getoption) -> Options:
    """The machine's part, after `parse`: backends, nproc and device probes (world.settle), --ab-source's
    environment under --ab-env's, the MPI thread level exported; OptionError on the first problem."""
    settle(o)
    o.ab_env = {**sourced_env(o.ab_source), **o.ab_env}
    python = o.ab_env.get("HCCL_BENCH_PYTHON")
    if python and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise OptionError(f"HCCL_BENCH_PYTHON={python!r} is not an executable file: give side B's python interpreter")
    if o.mpi_thread_level:
        os.environ["HCCL_BENCH_MPI_THREAD_LEVEL"] = o.mpi_thread_level   # every rank inherits it, under any launcher
    return o
