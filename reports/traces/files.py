"""Bounded reads of a job's trace files: a folder's files, each refused in one line when too large
(HCCL_BENCH_MAX_TRACE_MB, default 512: a rank's Kineto trace of a few steps is tens of MB) or
unreadable; .gz is read through gzip with the same bound on what it expands to."""
from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from reports.result_files import size_limit
from schema.results import ResultError

TRACE_LIMIT_MIB = 512


def shown(path: Path) -> str:
    """The end of a path that says which rank's which file (a refusal must stay one short line)."""
    return "/".join(Path(path).parts[-3:])


def listed(folder: Path, suffixes: tuple[str, ...] | None) -> list[Path]:
    """The folder's regular files (ending in one of `suffixes`, if given), or one line why none."""
    if not folder.is_dir():
        raise ResultError(f"{folder}: not a folder (give the folder holding every rank's file)")
    found = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
                   and (suffixes is None or p.name.endswith(suffixes)))
    if not found:
        want = " or ".join(suffixes) if suffixes else "files"
        raise ResultError(f"{folder}: no {want} in it: no traces to read")
    return found


def read_bytes(path: Path) -> bytes:
    limit = size_limit("HCCL_BENCH_MAX_TRACE_MB", TRACE_LIMIT_MIB)
    try:
        if path.stat().st_size > limit:
            raise ResultError(f"{shown(path)} is {path.stat().st_size >> 20} MiB; traces above {limit >> 20} MiB are refused "
                              "(HCCL_BENCH_MAX_TRACE_MB raises it)")
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read(limit + 1)
            if len(raw) > limit:
                raise ResultError(f"{shown(path)} expands past {limit >> 20} MiB (HCCL_BENCH_MAX_TRACE_MB raises it)")
            return raw
        return path.read_bytes()
    except OSError as exc:
        raise ResultError(f"cannot read {shown(path)}: {exc.strerror or exc}") from None
    except (EOFError, zlib.error) as exc:
        raise ResultError(f"{shown(path)}: a cut or corrupt gzip file ({exc})") from None


def load_json(path: Path, what: str):
    """A file's JSON (bounded as read_bytes), or one line why not: `what` names the whole it should be."""
    try:
        return json.loads(read_bytes(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultError(f"{shown(path)}: truncated or not JSON ({str(exc)[:50]}): not a whole {what}") from None
    except RecursionError:
        raise ResultError(f"{shown(path)}: JSON nested too deeply") from None
