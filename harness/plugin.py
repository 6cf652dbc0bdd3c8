"""The pytest plugin (registered by the root conftest): options, case generation, fixtures, output."""
from __future__ import annotations

import json
import signal
import sys
import textwrap
import time
from dataclasses import dataclass, field

import pytest

from collectives.device import preload_mpi_library
from harness import cases as cases_mod
from harness import files
from harness.groups import GroupKey
from harness.options import OptionError, add_options, parse
from harness.session import BenchSession
from reports import table

_SESSION = pytest.StashKey[BenchSession]()
_CASES = pytest.StashKey[list]()
_LAYER_CASES = pytest.StashKey[list]()
_TUNING_CASES = pytest.StashKey[list]()
_PREVIOUS_HANDLERS = pytest.StashKey[dict]()   # signal handlers to restore at unconfigure


@dataclass
class Progress:
    """Which backend and op the sweep is on, how far it is, and about how long is left."""
    where: dict[str, tuple]          # nodeid -> (backend, op or bench, side)
    launch: dict[str, int] = field(default_factory=dict)   # nodeid -> launch
    bench: BenchSession | None = None
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    current: tuple = ()
    reporter: object = None


_RUNNING: dict[str, Progress] = {}   # pytest_runtest_logstart gets no config: the session's progress


def pytest_addoption(parser):
    add_options(parser)


def pytest_configure(config):
    try:
        opts = parse(config.getoption)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_SESSION] = BenchSession(opts)


_ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """SIGTERM (CI cancel, timeout, Slurm, Kubernetes) and SIGHUP end the session like Ctrl-C: the
    case in flight is named, groups are closed, and what finished is written, marked incomplete."""
    bench = session.config.stash.get(_SESSION, None)
    if bench is None:
        return

    def on_signal(signum, frame):
        if bench.interrupted is None:
            bench.interrupted = signal.Signals(signum).name + (f" during {bench.running}" if bench.running else "")
            raise KeyboardInterrupt
        # a second signal while the session writes what it has: finish writing

    preload_mpi_library()   # it would replace our SIGHUP handler if it loaded later
    previous = {}
    for sig in _ENDING_SIGNALS:
        current = signal.getsignal(sig)
        if current is signal.SIG_IGN or (sig == signal.SIGINT and current is not signal.default_int_handler):
            continue  # ignored on purpose (nohup, a background job): leave it so
        try:
            previous[sig] = signal.signal(sig, on_signal)
        except ValueError:  # not the main thread: pytest's own handling stays
            break
    session.config.stash[_PREVIOUS_HANDLERS] = previous
    bs = getattr(session.config, "_benchmarksession", None)
    if bs is not None and not session.config.getoption("benchmark_tables"):
        bs.quiet = True   # its per-case tables (hundreds of lines, 500 wide) hid the results; the JSON is unchanged


def pytest_unconfigure(config):
    for sig, handler in config.stash.get(_PREVIOUS_HANDLERS, {}).items():
        signal.signal(sig, handler)


def pytest_report_header(config):
    """Said before anything runs: a one-launch session cannot fail on a verdict."""
    session = config.stash.get(_SESSION, None)
    if session is None or session.opts.repeat > 1 or session.opts.ab_env:
        return None
    lines = []
    if session.opts.baseline:
        lines.append("hccl-bench: --baseline with one launch (--repeat 1): rounds of one launch are not independent "
                     "samples, so its verdicts can only be 'suspected' and cannot fail the session; use --repeat 3")
    if session.opts.history:
        lines.append("hccl-bench: --history with one launch (--repeat 1): this night is one point; a change needs "
                     "several nights to confirm it (--repeat 3 makes each night's point steadier)")
    return lines or None


def _params(cases) -> list:
    return [pytest.param(c, id=c.id, marks=[pytest.mark.skip(reason=c.skip)] if c.skip else []) for c in cases]


def pytest_generate_tests(metafunc):
    session, stash = metafunc.config.stash[_SESSION], metafunc.config.stash
    if "collective_case" in metafunc.fixturenames:
        if _CASES not in stash:
            stash[_CASES] = cases_mod.build(session.opts)
        metafunc.parametrize("collective_case", _params(stash[_CASES]))
    for fixture, task in (("linear_case", "tp_bench"), ("pipeline_case", "pp_bench")):
        if fixture in metafunc.fixturenames:
            if _LAYER_CASES not in stash:
                stash[_LAYER_CASES] = cases_mod.build_layers(session.opts)
            metafunc.parametrize(fixture, _params(c for c in stash[_LAYER_CASES] if c.task == task))
    if "tuning_case" in metafunc.fixturenames:   # test_overlap, test_bucket, test_compress: their bench's cases
        if _TUNING_CASES not in stash:
            stash[_TUNING_CASES] = cases_mod.build_tuning(session.opts)
        bench = metafunc.function.__name__.removeprefix("test_")
        metafunc.parametrize("tuning_case", _params(c for c in stash[_TUNING_CASES] if c.bench == bench))
    if "overhead_case" in metafunc.fixturenames:
        opts = session.opts
        params = [pytest.param((b, s), id=f"{b}-{s}B") for b in opts.backends for s in (8, 1 << 10, 64 << 10, 1 << 20, 4 << 20)]
        metafunc.parametrize("overhead_case", params)


def _group_of(item):
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for name in ("collective_case", "linear_case", "pipeline_case", "tuning_case"):
        case = callspec.params.get(name)
        if case is not None:
            return case.group
    oc = callspec.params.get("overhead_case")
    if oc:
        opts = item.config.stash[_SESSION].opts
        return GroupKey(oc[0], opts.nproc, (), opts.launcher)
    return None


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: record only what this session runs
def pytest_collection_modifyitems(session, config, items):
    """Run cases that share a worker group back to back: a group costs seconds to start. With
    --ab-env the two sides' groups count as one slot, keeping each A/B pair adjacent."""
    bench = config.stash[_SESSION]
    if not config.getoption("harness_benches"):   # the harness's own speed checks stay out of a user's sweep
        own = [item for item in items if item.get_closest_marker("harness_bench")]
        if own:
            config.hook.pytest_deselected(items=own)
            items[:] = [item for item in items if not item.get_closest_marker("harness_bench")]
    if any("bench_session" in getattr(item, "fixturenames", ()) for item in items):
        try:
            files.check_writable(bench.opts.results)   # before any rank starts, like every option
        except files.ResultsFolderError as exc:
            pytest.exit(f"hccl-bench: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    where = {item.nodeid: w for item in items if (w := _where(item)) is not None}
    if where:
        _RUNNING["progress"] = Progress(where, {item.nodeid: _launch_of(item) for item in items}, bench,
                                        reporter=config.pluginmanager.get_plugin("terminalreporter"))

    def slot(item):
        key = _group_of(item)
        return key and key.slot()

    order: dict = {}
    for item in items:
        key = slot(item)
        if key is not None and key not in order:
            order[key] = len(order)
    # launch after launch (a sequential A/B looks between them), groups kept together inside one
    items.sort(key=lambda it: (_launch_of(it), order.get(slot(it), len(order))))
    for item in items:  # skipped cases and their reasons go into results.json too
        params = getattr(getattr(item, "callspec", None), "params", {})
        for case in params.values():
            if getattr(case, "skip", ""):
                bench.skip(case.id, case.skip)


def _launch_of(item) -> int:
    key = _group_of(item)
    return key.launch if key is not None else 0


def _where(item) -> tuple | None:
    case = next((v for v in getattr(getattr(item, "callspec", None), "params", {}).values() if hasattr(v, "group")), None)
    if case is None or case.group is None:   # a case skipped at collection has no group
        return None
    what = {"tp_bench": "linear", "pp_bench": "pipeline"}.get(getattr(case, "task", ""), getattr(case, "bench", "")
                                                             or getattr(case, "op", ""))
    return case.group.backend, what, getattr(case, "side", "") and f"side {case.side}"


@pytest.hookimpl(trylast=True)
def pytest_runtest_logstart(nodeid, location):
    """A progress line each time the sweep moves to another backend, op or bench, with an ETA
    (outside the test's output capture, so it reaches the terminal)."""
    progress = _RUNNING.get("progress")
    where = progress.where.get(nodeid) if progress else None
    if where is None:
        return
    bench = progress.bench
    if bench is not None and bench.opts.ab_until_decided and progress.launch.get(nodeid, 0) > bench.looked:
        for line in bench.look(progress.launch[nodeid]):   # before a new launch: which cells it still needs
            if progress.reporter is not None:
                progress.reporter.write_line(line)
    if where != progress.current:
        progress.current = where
        total, elapsed = len(progress.where), time.monotonic() - progress.started
        left = elapsed / progress.done * (total - progress.done) if progress.done else None
        eta = f", about {left / 60:.0f} min left" if left and left >= 60 else f", about {left:.0f} s left" if left else ""
        if progress.reporter is not None:
            progress.reporter.write_line(f"# [{progress.done}/{total}{eta}] now: {' '.join(w for w in where if w)}")
    progress.done += 1


@pytest.fixture(scope="session")
def bench_session(request):
    session = request.config.stash[_SESSION]
    yield session
    session.close()


def pytest_benchmark_update_json(config, benchmarks, output_json):
    session = config.stash.get(_SESSION, None)
    if session is not None:
        output_json["hccl_bench"] = session.metadata()


def pytest_sessionfinish(session, exitstatus):
    _RUNNING.clear()
    bench = session.config.stash.get(_SESSION, None)
    if bench is None:
        return
    ended_early = exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)
    if bench.interrupted is None and (ended_early or session.shouldstop or session.shouldfail):
        bench.interrupted = str(session.shouldstop or session.shouldfail or f"pytest exit status {int(exitstatus)}")
    bench.close()
    if not (bench.rows or bench.overhead or bench.layer_rows or bench.tuning_rows or bench.failures):
        return
    if bench.opts.ab_until_decided and bench.interrupted is None:
        bench.look(bench.opts.repeat)   # the last look, on every launch run: recorded with the results
    try:
        _write_results(session, bench)
    except OSError as exc:
        bench.verdicts = [{"text": f"hccl-bench: cannot write the results of {bench.run_dir}: {exc.strerror or exc}; "
                                   f"the finished cases are in {bench.run_dir / 'cases.jsonl'}", "fail": True}]
        print(bench.verdicts[0]["text"], file=sys.stderr)
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        return
    if bench.interrupted is not None:
        if bench.opts.baseline or bench.opts.history:
            bench.verdicts.append({"text": f"# no baseline or history verdict: the session ended early ({bench.interrupted})",
                                   "fail": False})
        return
    if bench.opts.ab_until_decided:
        bench.verdicts.append(_judge_sequential_ab(bench))
    if bench.opts.baseline:
        bench.verdicts.append(_compare_with_baseline(bench))
    if bench.opts.history:
        bench.verdicts.append(_judge_history(bench))
    codes = [v.get("exit", 1) for v in bench.verdicts if v["fail"]]
    if codes:   # a regression (1) outranks inconclusive cells (6)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED if 1 in codes else codes[0]


def _write_results(session, bench: BenchSession) -> None:
    """results.json (pytest-benchmark's JSON with the hccl_bench section) and table.txt, each whole or not at all."""
    bs = getattr(session.config, "_benchmarksession", None)
    output: dict = {"benchmarks": [], "hccl_bench": None}
    if bs is not None:
        output = session.config.hook.pytest_benchmark_generate_json(
            config=session.config, benchmarks=bs.benchmarks, include_data=True,
            machine_info=bs.get_machine_info(),
            commit_info=session.config.hook.pytest_benchmark_generate_commit_info(config=session.config))
    output["hccl_bench"] = bench.metadata()
    files.write_atomic(bench.run_dir / "results.json", json.dumps(output, indent=1, default=str))
    text = "\n\n".join([table.render(bench.rows), table.render_layers(bench.layer_rows),
                        table.render_tuning(bench.tuning_rows)]) + "\n"
    files.write_atomic(bench.run_dir / "table.txt", text)


def _compare_with_baseline(bench: BenchSession) -> dict:
    """--baseline: compare this run with a stored one; a confirmed regression, or a baseline of
    another setup, fails the session."""
    from harness import baselines
    from reports.gate import judge_pair
    from reports.result_files import load
    from reports.results import ResultError
    result = str(bench.run_dir / "results.json")
    try:
        base = baselines.auto(result) if bench.opts.baseline == "auto" else bench.opts.baseline
        judgement = judge_pair(load(base), load(result))
    except ResultError as exc:
        return {"text": f"# baseline comparison impossible: {exc}", "fail": True}
    if judgement.refused:
        return {"text": f"# baseline refused: {judgement.refused}", "fail": True}
    return _gate(bench, judgement, "compare", f"{judgement.headline} vs baseline {base}")


def _gate(bench: BenchSession, judgement, stem: str, headline: str) -> dict:
    """A pair's verdict as the session's: STEM.md and STEM.json in the run folder, and its exit
    status (1 regression, 6 inconclusive cells unless --inconclusive pass)."""
    from reports.gate import dumps
    files.write_atomic(bench.run_dir / f"{stem}.md", judgement.markdown + "\n")
    files.write_atomic(bench.run_dir / f"{stem}.json", dumps(judgement))
    code = judgement.exit_status(bench.opts.inconclusive)
    return {"text": judgement.text, "fail": code != 0, "exit": code, "headline": headline}


def _judge_sequential_ab(bench: BenchSession) -> dict:
    """--ab-until-decided: side B (candidate) against side A (baseline), the looks replayed from
    the results just written (what `hccl-bench compare RUN --ab` prints); its verdict is the gate."""
    from reports.gate import judge_pair
    from reports.result_files import load
    from reports.results import ResultError
    result = bench.run_dir / "results.json"
    try:
        judgement = judge_pair(load(result, side="A"), load(result, side="B"))
    except ResultError as exc:
        return {"text": f"# A/B verdict impossible: {exc}", "fail": True, "exit": 1}
    if judgement.refused:
        return {"text": f"# A/B refused: {judgement.refused}", "fail": True, "exit": 1}
    used = bench.sequential.launches_used if bench.sequential else 0
    return _gate(bench, judgement, "ab", f"{judgement.headline}; A/B launches used {used} of {bench.opts.repeat}")


def _judge_history(bench: BenchSession) -> dict:
    """--history: this run against the earlier ones in its --results folder (the nightly guard);
    a new confirmed regression, or a folder mixing setups, fails the session."""
    from reports.gate import judge_history
    from reports.history import load_runs, too_few
    from reports.results import ResultError
    try:
        runs, _ = load_runs([str(bench.run_dir.parent)])
    except ResultError as exc:
        return {"text": f"# history impossible: {exc}", "fail": True}
    if too_few(runs):
        return {"text": too_few(runs), "fail": False}
    judgement = judge_history(runs)
    if judgement.refused:
        return {"text": f"# history refused: {judgement.refused}", "fail": True}
    files.write_atomic(bench.run_dir / "history.md", judgement.markdown + "\n")
    code = judgement.exit_status("pass")   # 1 a software regression, 7 the machine changed (reports/gate.py)
    return {"text": judgement.text, "fail": code != 0, "exit": code,
            "headline": f"{judgement.headline} in the history of {bench.run_dir.parent}"}


@pytest.hookimpl(trylast=True)   # after pytest-benchmark's: the user's results are the last thing on screen
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    bench = config.stash.get(_SESSION, None)
    if bench is None or not (bench.rows or bench.overhead or bench.layer_rows or bench.tuning_rows or bench.interrupted):
        return
    tr = terminalreporter
    tr.section("hccl-bench")
    if bench.rows:
        for line in table.render(bench.rows).splitlines():
            tr.write_line(line)
    if bench.overhead:
        tr.write_line("")
        for line in table.render_overhead(bench.overhead).splitlines():
            tr.write_line(line)
    if bench.layer_rows:
        tr.write_line("")
        for line in table.render_layers(bench.layer_rows).splitlines():
            tr.write_line(line)
    if bench.tuning_rows:
        tr.write_line("")
        for line in table.render_tuning(bench.tuning_rows).splitlines():
            tr.write_line(line)
    if bench.skipped:
        tr.write_line(f"\n# {len(bench.skipped)} cases skipped (reasons in results.json; -rs lists them)")
    for verdict in bench.verdicts:
        tr.write_line("")
        for line in verdict["text"].splitlines():
            tr.write_line(line)
    tr.write_line("")
    for line in _closing_block(bench):
        tr.write_line(line)


def _closing_block(bench: BenchSession) -> list[str]:
    """The lines a user reads last: where the results are, the peak per op and backend, what failed,
    and the gate's verdict with its reason."""
    out = ["# ---- hccl-bench summary"]
    if bench.store.made:
        state = f"incomplete: {bench.interrupted}" if bench.interrupted else "complete"
        out.append(f"# results: {bench.run_dir / 'results.json'} ({state})")
    out += table.peak_lines(bench.rows)
    if bench.failures:
        out += _wrapped(f"# failures: {len(bench.failures)} cases, first: {bench.failures[0]['what']}: "
                        f"{bench.failures[0]['error']}")
    for verdict in bench.verdicts:
        out += _wrapped(f"# verdict: {verdict.get('headline') or verdict['text'].splitlines()[0].lstrip('# ')}")
    return out


def _wrapped(line: str) -> list[str]:
    """A closing line within 120 columns, carried on to '#   ' lines rather than cut mid-number."""
    return textwrap.wrap(line, 120, subsequent_indent="#   ", break_on_hyphens=False) or [line]
