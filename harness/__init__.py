"""Runs hccl-bench across ranks: worker groups, launchers, control channel, pytest plugin, results."""
import sys

# before any module of ours loads (on 3.8 one of them would fail with a traceback); pip refuses 3.8 at install
if sys.version_info < (3, 9):  # noqa: UP036
    from schema.exit_codes import ExitCode
    sys.stderr.write(f"hccl-bench needs Python 3.9 or newer; this is Python {sys.version.split()[0]} ({sys.executable})\n")
    sys.exit(ExitCode.BAD_OPTION if "pytest" in sys.modules else ExitCode.BAD_INPUT)   # a pytest session's, a command's
