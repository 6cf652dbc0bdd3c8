"""The pytest plugin (registered by the root conftest): only wiring, each hook handing its job to the
harness/session module that owns it (options, ordering, signals, progress, session_end, run_output)."""
from __future__ import annotations

import pytest

import kinds
from harness import files
from harness.session import ordering, run_output, session_end, signals
from harness.session.option_error import OptionError
from harness.session.options import add_options, parse, prepare
from harness.session.progress import Progress
from harness.session.session import BenchSession
from schema.exit_codes import ExitCode

_SESSION = pytest.StashKey[BenchSession]()
_CASES = pytest.StashKey[dict]()   # kind name -> its cases, built once per session
_PREVIOUS_HANDLERS = pytest.StashKey[dict]()   # signal handlers to restore at unconfigure
_RUNNING: dict[str, tuple] = {}   # pytest_runtest_logstart gets no config: the progress and where it is written


def pytest_addoption(parser):
    add_options(parser)


def pytest_configure(config):
    try:
        opts = prepare(parse(config.getoption), config.getoption)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    opts.invocation = [str(a) for a in config.invocation_params.args]   # a same-night A/B (--previous-stack) reruns them
    config.stash[_SESSION] = BenchSession(opts)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    bench = session.config.stash.get(_SESSION, None)
    if bench is None:
        return
    session.config.stash[_PREVIOUS_HANDLERS] = signals.install(bench)
    run_output.quiet_benchmark_tables(session.config)


def pytest_unconfigure(config):
    signals.restore(config.stash.get(_PREVIOUS_HANDLERS, {}))


def pytest_report_header(config):
    session = config.stash.get(_SESSION, None)
    return run_output.header_lines(session.opts) if session is not None else None


def pytest_generate_tests(metafunc):
    """Each bench function takes one kind's fixture (kinds.KINDS): its cases, built once a session."""
    session, built = metafunc.config.stash[_SESSION], metafunc.config.stash.setdefault(_CASES, {})
    for kind in kinds.KINDS:
        if kind.fixture in metafunc.fixturenames:
            if kind.name not in built:
                built[kind.name] = kind.build(session.opts)
            metafunc.parametrize(kind.fixture, [
                pytest.param(c, id=c.id, marks=[pytest.mark.skip(reason=c.skip)] if c.skip else []) for c in built[kind.name]])


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: record only what this session runs
def pytest_collection_modifyitems(session, config, items):
    bench = config.stash[_SESSION]
    wanted = set(bench.opts.only_cases)   # --cases: exactly these, every launch and side of each
    own = not config.getoption("harness_benches")   # the harness's own speed checks stay out of a user's sweep

    def dropped(item) -> bool:
        return bool((wanted and ordering.base_id(item) not in wanted) or (own and item.get_closest_marker("harness_bench")))
    if out := [item for item in items if dropped(item)]:
        config.hook.pytest_deselected(items=out)
        items[:] = [item for item in items if not dropped(item)]
    if any("bench_session" in getattr(item, "fixturenames", ()) for item in items):
        try:
            files.check_writable(bench.opts.results)   # before any rank starts, like every option
        except files.ResultsFolderError as exc:
            pytest.exit(f"hccl-bench: {exc}", returncode=ExitCode.BAD_OPTION)
    where = {item.nodeid: w for item in items if (w := ordering.where_of(item)) is not None}
    if where:
        progress = Progress(where, {item.nodeid: ordering.launch_of(item) for item in items}, bench)
        _RUNNING["progress"] = (progress, config.pluginmanager.get_plugin("terminalreporter"))
    ordering.sort(items)
    for case_id, reason in ordering.skipped(items, bench.opts.repeat):   # skipped cases and why go into results.json too
        bench.skipped.append({"id": case_id, "reason": reason})


@pytest.hookimpl(trylast=True)
def pytest_runtest_logstart(nodeid, location):
    """Progress lines go outside the test's output capture, so they reach the terminal."""
    if "progress" not in _RUNNING:
        return
    progress, reporter = _RUNNING["progress"]
    for line in progress.lines_at(nodeid):
        if reporter is not None:
            reporter.write_line(line)


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
    code = session_end.finish(bench, exitstatus, session.shouldstop or session.shouldfail,
                              lambda: run_output.benchmark_json(session.config))
    if code is not None:
        session.exitstatus = code


@pytest.hookimpl(trylast=True)   # after pytest-benchmark's: the user's results are the last thing on screen
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    bench = config.stash.get(_SESSION, None)
    if bench is None or not (bench.rows or bench.interrupted):
        return
    terminalreporter.section("hccl-bench")
    for line in run_output.summary_lines(bench):
        terminalreporter.write_line(line)
