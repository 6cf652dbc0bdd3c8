"""Option parsing in process: every bad value is one OptionError line naming what is allowed.
(tests/test_end_to_end.py runs three of them through a real pytest session: exit 4, no rank.)"""
import argparse
import importlib.util
import os

import pytest

from collectives.backends import BACKENDS
from harness.session.option_error import OptionError
from harness.session.options import add_options, parse, prepare
from harness.session.stack_env import sourced_env


class _Options:
    """pytest's option groups take argparse's arguments: the same add_options, parsed by argparse."""
    def __init__(self):
        self.argparser = argparse.ArgumentParser()

    def getgroup(self, *_):
        return self

    def addoption(self, *names, **kwargs):
        self.argparser.add_argument(*names, **kwargs)


def _getoption(args: list[str]):
    parser = _Options()
    add_options(parser)
    namespace = parser.argparser.parse_args(args)
    return lambda name: getattr(namespace, name)


def parsed(args: list[str]):
    """What the plugin does: parse, then let the machine fill in the rest."""
    getoption = _getoption(args)
    return prepare(parse(getoption), getoption)


BAD_OPTIONS = [
    (["--sizes", "1M:1K"], "bad --sizes '1M:1K': min 1048576 is larger than max 1024"),
    (["--sizes", "8:1M:1"], "the factor must be an integer >= 2"),
    (["--sizes", "12Q"], "bad size '12Q'"),
    (["--ops", "allreduce"], "unknown op 'allreduce': allowed all_reduce, all_gather"),
    (["--dtypes", "float8"], "unknown dtype 'float8': allowed float32"),
    (["--algos", "star"], "unknown algorithm 'star'"),
    (["--algos", "hccl:ringg"], "unknown hccl algorithm 'ringg'"),
    (["--backend", "rccl"], f"unknown backend 'rccl': allowed {', '.join(BACKENDS)}"),   # the registry's names
    (["--nproc", "0"], "--nproc must be >= 1, got 0"),
    (["--launcher", "mpirun -np 4"], "must contain {nproc}"),
    (["--nproc", "4", "--tp", "3", "--pp", "1"], "no tp x pp x dp equals the world size 4: tp in [3], pp in [1]"),
    (["--nproc", "4", "--tp", "4", "--hidden", "10"], "--hidden 10 is not divisible by tp 4"),
    (["--nproc", "4", "--pp", "4", "--layers", "6"], "pp 4: 6 layers do not split into pp x stages-per-rank"),
    (["--nproc", "4", "--pp", "4", "--microbatches", "2", "--schedules", "1f1b"],
     "1f1b needs at least pp = 4 microbatches, got 2"),
    (["--schedules", "pipedream"], "unknown schedule 'pipedream'"),
    (["--ab-source", "/nonexistent/set_env.sh"], "--ab-source '/nonexistent/set_env.sh' is not a file"),
    (["--ab-env", "HCCL_BENCH_PYTHON=/nonexistent/python"], "HCCL_BENCH_PYTHON='/nonexistent/python' is not an executable"),
    (["--ab-env", "HCCL_BENCH_AA=1", "--history"], "--history judges single-stack nightly runs"),
    (["--timeout", "nan"], "--timeout must be a finite positive number of seconds, got 'nan'"),
    (["--timeout", "inf"], "--timeout must be a finite positive number of seconds, got 'inf'"),
    (["--round-time", "nan"], "--round-time must be a finite positive number of seconds"),
    (["--round-time", "inf"], "--round-time must be a finite positive number of seconds"),
    (["--sizes="], "--sizes is empty"),
    (["--ops="], "--ops is empty"),
    (["--results", "/etc/hostname/results"], "cannot be created: /etc/hostname is not a folder"),
    (["--ab-until-decided"], "--ab-until-decided needs two sides"),
    (["--ab-env", "X=1", "--ab-until-decided", "--repeat", "3"], "give its budget as --max-repeat"),
    (["--ab-env", "X=1", "--ab-until-decided", "--max-repeat", "2"], "--max-repeat must be >= 3"),
    (["--inconclusive", "maybe"], "--inconclusive 'maybe': allowed fail, pass"),
    (["--min-effect", "5"], "--min-effect '5': give a fraction above 0 and below 1 (0.05 = 5%)"),
    (["--min-effect", "nan"], "--min-effect 'nan': give a fraction above 0 and below 1"),
    (["--min-effect", "0"], "--min-effect '0': give a fraction above 0 and below 1"),
    (["--label", "C=x"], "use A=NAME or B=NAME"),
    (["--knobs", "HCCL_BUFFSIZE"], "use NAME=value1,value2"),
    (["--knobs", "HCCL_BUFFSIZE=1", "--knobs", "HCCL_BUFFSIZE=2"], "--knobs HCCL_BUFFSIZE is given twice"),
    (["--buckets", "1Q"], "--buckets: bad size '1Q'"),
    (["--comm-dtypes", "float8"], "unknown comm-dtype 'float8'"),
    (["--cases", "/nonexistent/cases.txt"], "--cases '/nonexistent/cases.txt' cannot be read"),
    (["--cases", "/dev/null"], "--cases '/dev/null' names no case"),
    (["--ab-env", "X=1", "--baseline", "auto"], "--baseline compares a single-stack run with a stored one"),
    (["--knobs", "HCCL_BUFFSIZE=1,2", "--ab-env", "HCCL_BUFFSIZE=3"], "HCCL_BUFFSIZE is both a --knobs variable and an --ab-env"),
    (["--top-up", "2"], "--top-up 2 completes a --history night's launches in the usual placement: add --history"),
    (["--night-budget", "5x"], "--night-budget '5x': give auto, 0 (off) or a duration such as 300, 300s, 5m or 1h"),
    (["--night-budget", "-1"], "--night-budget '-1': give auto, 0 (off) or a duration"),
    (["--night-budget", "2m", "--ab-env", "X=1", "--ab-until-decided"],
     "--night-budget and --ab-until-decided both choose the launches: give the A/B's as --max-repeat"),
    (["--top-up", "some", "--history"], "--top-up must be auto or a whole number of launches >= 0, got 'some'"),
    (["--top-up", "-1", "--history"], "--top-up must be auto or a whole number of launches >= 0, got '-1'"),
]


def test_top_up_is_repeat_under_history_and_none_elsewhere():
    assert parsed(["--backend", "gloo", "--history", "--repeat", "3"]).top_up == 3
    assert parsed(["--backend", "gloo", "--history", "--repeat", "3", "--top-up", "1"]).top_up == 1
    assert parsed(["--backend", "gloo", "--repeat", "3"]).top_up == 0
    assert parsed(["--backend", "gloo", "--ab-env", "X=1", "--ab-until-decided"]).top_up == 0


def test_a_timed_history_night_without_repeat_gets_the_night_budget_and_its_plan():
    """auto: on only where the user left the launches to it; what it changes is what they did not give."""
    night = parsed(["--backend", "gloo", "--benchmark", "--history"])
    assert (night.night_budget_s, night.repeat, night.estimator, night.top_up, night.rounds, night.round_time_s) == (
        300.0, 40, "fastest", 0, 200, 0.002)
    given = parsed(["--backend", "gloo", "--benchmark", "--history", "--night-budget", "2m", "--repeat", "9",
                    "--estimator", "median", "--rounds", "50", "--top-up", "2"])
    assert (given.night_budget_s, given.repeat, given.estimator, given.top_up, given.rounds) == (120.0, 9, "median", 2, 50)
    for off in (["--history", "--repeat", "3"], ["--history"], [], ["--history", "--night-budget", "0"]):
        o = parsed(["--backend", "gloo", *off] + (["--benchmark"] if off != ["--history"] else []))
        assert o.night_budget_s == 0 and o.estimator == "median" and o.repeat == (3 if "--repeat" in off else 1)


@pytest.mark.parametrize("args, message", BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_a_bad_option_is_one_line_naming_what_is_allowed(args, message):
    """On gloo, so that a GPU or NPU host (where auto picks the device) sees the same messages."""
    with pytest.raises(OptionError) as raised:
        parsed(["--backend", "gloo", *args])   # a later --backend (the rccl case) wins
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_every_core_option_fills_an_options_field_or_is_read_by_name():
    """A declaration's Options field comes from its flag or `into`: a misspelt one would drop the
    value silently, so the names Options lacks are exactly the ones read elsewhere."""
    from harness.session.options import DECLARED, OPTION_FIELDS
    assert {o.field for o in DECLARED} - OPTION_FIELDS == {"max_repeat", "benchmark_tables", "harness_benches"}
    assert len({o.flag for o in DECLARED}) == len(DECLARED)


def test_defaults_are_the_smoke_plan_and_benchmark_the_full_one():
    from collectives.timing import SMOKE, Plan
    smoke, full = parsed(["--backend", "gloo"]), parsed(["--backend", "gloo", "--benchmark"])
    assert (smoke.warmup, smoke.rounds, smoke.round_time_s) == (SMOKE.warmup, SMOKE.rounds, SMOKE.round_time_s)
    assert (full.warmup, full.rounds, full.round_time_s) == (Plan.warmup, Plan.rounds, Plan.round_time_s)


def test_nccl_without_a_cuda_gpu_is_one_line_and_with_one_it_parses():
    """The expectation reads the device: on a GPU host (CUDA torch) nccl must parse, one rank per GPU."""
    torch = pytest.importorskip("torch", reason="the device probe needs torch")
    if torch.cuda.is_available():
        opts = parsed(["--backend", "nccl"])
        assert opts.backends == ["nccl"] and opts.nproc == torch.cuda.device_count()
        return
    with pytest.raises(OptionError) as raised:
        parsed(["--backend", "nccl"])
    assert "backend nccl needs a CUDA GPU" in str(raised.value) and "\n" not in str(raised.value)


def test_hccl_without_torch_npu_is_one_line():
    pytest.importorskip("torch", reason="without torch, hccl is refused for torch, not torch_npu")
    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu is installed here: what hccl says depends on CANN and the NPU, not on torch_npu's absence")
    with pytest.raises(OptionError) as raised:
        parsed(["--backend", "hccl"])
    assert "backend hccl needs torch_npu" in str(raised.value) and "\n" not in str(raised.value)


def test_parsing_touches_neither_the_machine_nor_the_environment(tmp_path, monkeypatch):
    """parse leaves the device, the shell and os.environ to prepare: a script that would leave a
    mark, an MPI thread level and a device backend parse without effect; prepare then acts."""
    import os
    mark = tmp_path / "sourced"
    script = tmp_path / "set_env.sh"
    script.write_text(f"touch {mark}\nexport HCCL_BENCH_SOURCED=yes\n")
    monkeypatch.delenv("HCCL_BENCH_MPI_THREAD_LEVEL", raising=False)
    getoption = _getoption(["--backend", "auto", "--ab-source", str(script), "--ab-env", "X=1",
                            "--mpi-thread-level", "funneled", "--results", str(tmp_path / "r")])
    opts = parse(getoption)
    assert opts.backends == [] and opts.nproc == 0 and opts.ab_env == {"X": "1"}
    assert not mark.exists() and "HCCL_BENCH_MPI_THREAD_LEVEL" not in os.environ
    prepare(opts, getoption)
    assert mark.exists() and opts.ab_env["HCCL_BENCH_SOURCED"] == "yes" and opts.ab_env["X"] == "1"
    assert os.environ["HCCL_BENCH_MPI_THREAD_LEVEL"] == "funneled" and opts.backends and opts.nproc >= 1


def test_a_sourced_script_sets_appends_and_unsets(tmp_path, monkeypatch):
    """What --ab-source and --previous-stack give side B: values set and appended, and None for what
    the script unsets (the previous stack without a variable); bash's own variables never count."""
    monkeypatch.setenv("HCCL_BENCH_OLD", "1")
    monkeypatch.setenv("HCCL_BENCH_KEPT", "same")
    script = tmp_path / "set_env.sh"
    script.write_text('unset HCCL_BENCH_OLD\nexport HCCL_BENCH_NEW=2\nexport HCCL_BENCH_KEPT=same\n'
                      'export PATH="/opt/stack/bin:$PATH"\ncd /\nreturn 0\n')
    changed = sourced_env(str(script))
    assert changed == {"HCCL_BENCH_OLD": None, "HCCL_BENCH_NEW": "2", "PATH": "/opt/stack/bin:" + os.environ["PATH"]}
    script.write_text("exit 0\n")   # would end the user's shell too: nothing after it is known
    with pytest.raises(OptionError, match="ended the shell"):
        sourced_env(str(script))


def test_an_algorithm_switch_in_the_environment_is_measured_under_its_own_name(monkeypatch):
    """MPICH's switch exported by a job script is the site's production setting: the 'default' series
    of the op it names runs it, named 'recexch (environment)' with the variable recorded in its setting
    and its group; other ops stay 'default', another backend is not touched, and a forced series wins."""
    from kinds.collective import build
    monkeypatch.setenv("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM", "recexch")
    var = {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "recexch"}
    built = build(prepare(*_prepared(["--backend", "mpi,gloo", "--ops", "all_reduce,broadcast", "--sizes", "1K",
                                      "--nproc", "2", "--algos", "default,ring"])))
    series = {(c.backend, c.algo, c.op): (c.env, c.group.rank_env if c.group else None) for c in built if not c.skip}
    assert series[("mpi", "recexch (environment)", "all_reduce")] == (var, var)
    assert series[("mpi", "default", "broadcast")] == ({}, var)   # the group records what its ranks inherit
    assert ("mpi", "default", "all_reduce") not in series
    assert series[("mpi", "ring", "all_reduce")][0]["MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"] == "ring"
    assert series[("gloo", "default", "all_reduce")] == ({}, {})
    assert [c.id for c in built if c.algo.endswith("(environment)")][0].startswith("mpi-recexch-env-all_reduce-")
    from kinds.collective import environment_algo
    assert environment_algo("all_to_all", {"OMPI_MCA_coll_tuned_alltoall_algorithm": "2"}) == "pairwise (environment)"


@pytest.mark.parametrize("var, value, named", [
    ("NCCL_ALGO", "allreduce:tree;allgather:ring", {"all_reduce": "tree (environment)", "all_gather": "ring (environment)",
                                                    "broadcast": "default"}),
    ("HCCL_ALGO", "allreduce=level0:NA;level1:H-D_R", {"all_reduce": "level0:NA;level1:H-D_R (environment)",
                                                       "all_gather": "default", "broadcast": "default"}),
    ("HCCL_ALGO", "level0:NA;level1:ring", {"all_reduce": "level0:NA;level1:ring (environment)",
                                            "all_gather": "level0:NA;level1:ring (environment)",
                                            "broadcast": "level0:NA;level1:ring (environment)"}),
])
def test_a_per_op_switch_in_the_environment_renames_only_the_ops_it_names(monkeypatch, var, value, named):
    from collectives.algorithms import forced_for_op
    from collectives.ops import OPS
    monkeypatch.setenv(var, value)
    got = {op: (forced_for_op(var, value, OPS[op]) + " (environment)") if forced_for_op(var, value, OPS[op]) else "default"
           for op in named}
    assert got == named


def test_a_series_forced_by_the_environment_is_judged_and_counted_by_its_algorithm(monkeypatch):
    """NCCL_ALGO=NVLS exported: all_reduce's busbw uses NVLS's factor (n-1)/(n+1) as --algos nccl:NVLS
    does; NCCL_ALGO=PAT exported: all_reduce (no PAT AllReduce) is skipped with the table's reason."""
    from collectives.capabilities import DeviceFacts
    from collectives.ops import OPS
    from kinds.collective import build
    from kinds.options import Options
    assert OPS["all_reduce"].bus_factor(8, "NVLS (environment)") == OPS["all_reduce"].bus_factor(8, "nccl:NVLS") == 7 / 9
    h200 = DeviceFacts("nccl", name="NVIDIA H200", devices=8, version=(2, 27, 3), capability=(9, 0))
    monkeypatch.setenv("NCCL_ALGO", "PAT")
    opts = Options(backends=["nccl"], nproc=8, sizes=[1 << 20], ops=["all_reduce", "all_gather"], dtypes=["float32"],
                   redops=["sum"])
    by_op = {c.op: c for c in build(opts, [h200])}
    assert by_op["all_reduce"].algo == by_op["all_gather"].algo == "PAT (environment)"
    assert by_op["all_reduce"].skip and "PAT" in by_op["all_reduce"].skip


def _prepared(args):
    getoption = _getoption(args)
    return parse(getoption), getoption


def test_parse_imports_no_torch():
    """Options parse in a process that never loads torch (the probe that needs it is prepare's)."""
    import subprocess
    import sys
    code = ("import sys, argparse; from tests.test_options import _getoption; from harness.session.options import parse; "
            "parse(_getoption(['--backend', 'nccl,hccl'])); print('torch' in sys.modules)")
    from tests.conftest import ROOT
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stdout + proc.stderr
