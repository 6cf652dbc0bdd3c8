"""``hccl-bench``: everything around result files (the sweeps themselves run under pytest): the
subcommand table in subcommands.py (parsers, dispatch, exit statuses), the work in commands.py."""
from harness.cli.subcommands import COMMANDS, main, parser

__all__ = ["COMMANDS", "main", "parser"]
