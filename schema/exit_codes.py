"""Every exit status hccl-bench gives: a contract with CI jobs and scripts, never renumber one.
A value may carry several names, one per command that gives it."""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0                # done; compare/history/--baseline: no regression and every cell decided; doctor: healthy
    REGRESSION = 1        # compare, history, --baseline, --history, --ab-until-decided: a confirmed regression
    TESTS_FAILED = 1      # pytest session: a case failed (a wrong result, a hung or dead rank)
    SUSPECT = 1           # doctor: a host, link or rank measured bad
    RANKS_FAILED = 1      # cluster launch torchrun: a host's torchrun (a rank) ended non-zero; the rest were stopped
    BAD_INPUT = 2         # a command given unusable input (unreadable file, mismatched setups, bad arguments)
    INTERRUPTED = 2       # pytest session, cluster launch: Ctrl-C, SIGTERM or SIGHUP (what finished is written, incomplete)
    INTERNAL = 3          # a bug, or the session could not write its results (full disk): never read as a regression
    BAD_OPTION = 4        # pytest session: a bad option, unwritable --results, an unusable --baseline/--history
    NO_TESTS = 5          # pytest session: nothing selected (pytest's own status, passed through)
    INCONCLUSIVE = 6      # no confirmed regression, but cells without the evidence to say "no change" (--inconclusive fail)
    MACHINE_CHANGED = 7   # history: no software regression, but a machine regression (a machine improvement exits 0)
    DRIVER_GONE = 70      # a rank's own status: its driver, or its host leader, vanished (harness/engine/control.py)
