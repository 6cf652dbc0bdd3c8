"""The end of a session, in its order: close the groups, write what finished, then judge it; an
early end (Ctrl-C, a signal, -x) is written marked incomplete and never judged."""
from __future__ import annotations

import sys
from collections.abc import Callable

from harness.session import run_output, verdicts
from harness.session.session import BenchSession
from schema.exit_codes import ExitCode
from schema.judgement import GateResult

RAN_TO_THE_END = (ExitCode.OK, ExitCode.TESTS_FAILED, ExitCode.NO_TESTS)   # pytest statuses of a session not cut short


def finish(bench: BenchSession, exitstatus: int, stopped: str | bool, benchmark_output: Callable[[], dict]) -> ExitCode | None:
    """`stopped` is pytest's shouldstop/shouldfail; returns the session's new exit status, or None to keep pytest's."""
    if bench.interrupted is None and (exitstatus not in RAN_TO_THE_END or stopped):
        bench.interrupted = str(stopped or f"pytest exit status {int(exitstatus)}")
    bench.close()
    if not (bench.rows or bench.failures):
        return None
    if bench.opts.ab_until_decided and bench.interrupted is None:
        bench.look(bench.opts.repeat)   # the last look, on every launch run: recorded with the results
    try:
        run_output.write_results(bench, benchmark_output())
    except OSError as exc:
        bench.verdicts = [GateResult(f"hccl-bench: cannot write the results of {bench.run_dir}: {exc.strerror or exc}; "
                                     f"the finished cases are in {bench.run_dir / 'cases.jsonl'}", ExitCode.INTERNAL)]
        print(bench.verdicts[0].text, file=sys.stderr)
        return ExitCode.INTERNAL
    if bench.interrupted is not None:
        if bench.opts.baseline or bench.opts.history:
            bench.verdicts.append(GateResult(f"# no baseline or history verdict: the session ended early ({bench.interrupted})"))
        return None
    return verdicts.judge(bench)
