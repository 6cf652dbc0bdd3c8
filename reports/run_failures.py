"""A run that died says so in its own words: the error lines nccl-tests, rccl-tests and hccl_test print
when a CUDA/HIP/NCCL/ACL/HCCL call fails, quoted by an import of a dead run (docs/results.md, A run that died)."""
from __future__ import annotations

import re

from schema.results import ResultError

_NCCL_TESTS = re.compile(r"(?:[\w.-]+: )?(?:Test (?:CUDA|NCCL) failure \S+:\d+|Test timeout \(\d+s\) \S+:\d+).*"
                         r"|^(?:Cuda|NCCL) failure \S+:\d+ '.*|^Invalid number of GPUs: \d+ requested.*"
                         r"|^Hip error: '.*'\(-?\d+\) at \S+:\d+.*")
_NCCL_TRACE = re.compile(r"\.\. \S+(?: pid \d+)?: Test failure \S+:\d+")
_HCCL_TEST = re.compile(r"(?:acl|hccl) interface return err.*retcode: -?\d+.*|^Error: .*"
                        r"|^memory allocation error, check whether the current memory space is sufficient.*")
_HCCL_TRACE = re.compile(r"^This is an error in \w+\.|^\w+ execute failed, Detailed logs are stored in path: \S*")
# an MPI job that died, in its launcher's words (Open MPI, MPICH/Hydra, Slurm, MVAPICH): OSU and IMB
# print nothing of their own when a rank fails
_MPI_DIED = re.compile(r"MPI_ABORT was invoked on rank \d+.*|Primary job\s+terminated normally, but \d+ process.*"
                       r"|mpirun noticed that process rank \d+ .*|BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"
                       r"|srun: error: .*|Abort\(\d+\).*|\[\S+:mpi_rank_\d+\]\[error_sighandler\] .*"
                       r"|Fatal error in (?:PMPI|MPI)_\w+: .*")
HCCL_TEST_BANNER = re.compile(r"^the minbytes is \d+, maxbytes is \d+, iters is \d+, warmup_iters is \d+", re.M)


def mpi_job(line: str) -> str | None:
    """The launcher's or MPI's own line saying the job died, as printed."""
    m = _MPI_DIED.search(line)
    return m.group(0).strip()[:200] if m else None


class RunFailed(ResultError):
    """A log of the tool, of a run that died before its first result: its own error line quoted."""


def _error_or_trace(line: str, error: re.Pattern[str], trace: re.Pattern[str]) -> tuple[str, bool] | None:
    """(the error as printed, whether it is the error itself rather than the tool's trace of it)."""
    for pattern, primary in ((error, True), (trace, False)):
        if m := pattern.search(line):
            return m.group(0).strip()[:200], primary
    return None


def nccl_tests(line: str) -> tuple[str, bool] | None:
    """An nccl-tests error line, or its TESTCHECK trace."""
    return _error_or_trace(line, _NCCL_TESTS, _NCCL_TRACE)


def hccl_test(line: str) -> tuple[str, bool] | None:
    """An hccl_test error line, or its step trace."""
    return _error_or_trace(line, _HCCL_TEST, _HCCL_TRACE)


class FirstFailure:
    """The first error line of a run, a trace replaced by the error it traces (mpirun interleaves ranks)."""

    def __init__(self) -> None:
        self.text, self.primary = "", False

    def see(self, number: int, found: tuple[str, bool] | None) -> bool:
        if found is None:
            return False
        if not self.text or (found[1] and not self.primary):
            self.text, self.primary = f"line {number}: {found[0]}", found[1]
        return True


def hccl_test_died(text: str) -> bool:
    """hccl_test's own check failed (a log that never reached its table)."""
    return bool(re.search(r"(?:acl|hccl) interface return err|^This is an error in \w+\.", text, re.M))
