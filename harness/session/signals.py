"""SIGTERM (CI cancel, timeout, Slurm, Kubernetes) and SIGHUP end a session like Ctrl-C: the case
in flight is named, groups are closed, and what finished is written, marked incomplete."""
from __future__ import annotations

import signal

from collectives.device import preload_mpi_library
from harness.session.session import BenchSession

ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def install(bench: BenchSession) -> dict:
    """Our handler for each ending signal not ignored on purpose; returns the handlers it replaced."""
    def on_signal(signum, frame):
        if bench.interrupted is None:
            bench.interrupted = signal.Signals(signum).name + (f" during {bench.running}" if bench.running else "")
            raise KeyboardInterrupt
        # a second signal while the session writes what it has: finish writing

    preload_mpi_library()   # it would replace our SIGHUP handler if it loaded later
    previous = {}
    for sig in ENDING_SIGNALS:
        current = signal.getsignal(sig)
        if current is signal.SIG_IGN or (sig == signal.SIGINT and current is not signal.default_int_handler):
            continue  # ignored on purpose (nohup, a background job): leave it so
        try:
            previous[sig] = signal.signal(sig, on_signal)
        except ValueError:  # not the main thread: pytest's own handling stays
            break
    return previous


def restore(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
