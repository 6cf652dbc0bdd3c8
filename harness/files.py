"""Writes that survive a kill, a full disk and a second session in the same second (docs/method.md,
Lifetimes and faults): a file is the old one or the whole new one, a run folder belongs to one
session, case lines are one synced write each (a kill leaves at most one torn last line).
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from contextlib import suppress
from pathlib import Path


def write_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)   # mkstemp's 0600 would hide results from the rest of a team
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_dir(path.parent)


def _sync_dir(folder: Path) -> None:
    with suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def new_run_dir(root: str | Path, stamp: str | None = None) -> Path:
    """results/<timestamp>/, or <timestamp>-2, -3... when another session took it first."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 10_000):
        path = root / (stamp if n == 1 else f"{stamp}-{n}")
        with suppress(FileExistsError):
            path.mkdir()
            return path
    raise FileExistsError(f"{root}: no free run folder name for {stamp}")


class ResultsFolderError(ValueError):
    """A --results folder that cannot be created or written; the message says why."""


def check_creatable(root: str | Path) -> None:
    """Raise ResultsFolderError unless a results folder exists or could be made here (checked
    without making anything)."""
    path = Path(root).absolute()
    while not path.exists():
        path = path.parent
    if not path.is_dir():
        raise ResultsFolderError(f"--results {str(root)!r} cannot be created: {path} is not a folder")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ResultsFolderError(f"--results {str(root)!r} cannot be created or written: no write permission in {path}")


def check_writable(root: str | Path) -> None:
    """Raise ResultsFolderError unless a results folder can be created and written (a probe file)."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=root, prefix=".hccl-bench-write-test.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ResultsFolderError(f"--results {str(root)!r} cannot be created or written: {exc.strerror or exc}") from None


def append_line(path: str | Path, obj: dict) -> None:
    """One JSON line in one write(2) on an O_APPEND descriptor, synced before returning."""
    data = (json.dumps(obj, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
