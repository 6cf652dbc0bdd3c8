"""Where a session's results go: its own run folder, made exclusively on first use, and
cases.jsonl, one synced line per event, so an interrupted session loses nothing measured."""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import files
from schema.exit_codes import ExitCode


class RunStore:
    def __init__(self, results: str, stamp: str, session_line: Callable[[], dict]):
        self.results = results
        self.stamp = stamp                      # the run folder's name: the session's start time
        self.session_line = session_line        # called once, when the folder is made

    @functools.cached_property
    def run_dir(self) -> Path:
        """This session's own folder, opened by a line that lets readers rebuild the run from cases.jsonl."""
        try:
            path = files.new_run_dir(self.results, self.stamp)
        except OSError as exc:
            pytest.exit(f"hccl-bench: cannot create a run folder in {self.results}: {exc.strerror or exc}",
                        returncode=ExitCode.INTERNAL)
        self.__dict__["run_dir"] = path
        self.append({"session": self.session_line()})
        return path

    @property
    def made(self) -> bool:
        return "run_dir" in self.__dict__

    def append(self, obj: dict) -> None:
        """One event in cases.jsonl at once; a full disk stops the session (exit 3), what was appended intact."""
        path = self.run_dir / "cases.jsonl"
        try:
            files.append_line(path, obj)
        except OSError as exc:
            pytest.exit(f"hccl-bench: cannot write {path}: {exc.strerror or exc}; "
                        "the cases finished before are in that file", returncode=ExitCode.INTERNAL)
