"""torch's (and torch_npu's HCCL) flight-recorder dumps, one file per rank, into FrDumps; unpickled
with no classes allowed. What is read of them: docs/doctor.md (The trace formats read)."""
from __future__ import annotations

import io
import json
import pickle
import re
from pathlib import Path

from reports.traces.files import listed, read_bytes
from reports.traces.records import FrDump, FrEntry
from schema.results import ResultError

_RANK = re.compile(r"(\d+)$")


class _DataOnly(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names a class ({module}.{name}); a flight-recorder dump names none")


def read(path: Path) -> FrDump:
    m = _RANK.search(path.name)
    if not m:
        raise ResultError(f"{path}: no rank at the end of its name (a flight-recorder dump is <prefix><rank>)")
    try:
        dump = _DataOnly(io.BytesIO(read_bytes(path))).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            UnicodeDecodeError, MemoryError, RecursionError) as exc:
        raise ResultError(f"{path}: not a flight-recorder dump (a cut or foreign file: {exc})") from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list) or "version" not in dump:
        raise ResultError(f"{path}: a pickle without 'version' and 'entries': not a torch flight-recorder dump")
    groups = {}
    for name, pg in (dump.get("pg_config") or {}).items():
        try:
            ranks = json.loads(pg["ranks"]) if isinstance(pg, dict) else []
        except (KeyError, TypeError, json.JSONDecodeError):
            ranks = []
        if ranks:
            groups[str(name)] = [int(r) for r in ranks]
    out = FrDump(int(m.group(1)), "", str(path), str(dump["version"]), groups)
    named_by_id: dict[str, str] = {}   # pg_status is keyed by the group's id (entries' pg_id), not its name
    for e in dump["entries"]:
        try:
            p2p = bool(e.get("is_p2p", False))
            out.entries.append(FrEntry(str(e["process_group"][0]), int(e["p2p_seq_id" if p2p else "collective_seq_id"]),
                                       str(e["profiling_name"]), str(e.get("input_sizes")), str(e.get("input_dtypes")),
                                       str(e.get("state")), p2p))
            if "pg_id" in e:
                named_by_id[str(e["pg_id"])] = out.entries[-1].group
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise ResultError(f"{path}: an entry without {exc}: not a flight-recorder dump torch 2.13 reads") from None
    for key, status in (dump.get("pg_status") or {}).items():
        if isinstance(status, dict):
            name = named_by_id.get(str(key), str(key))
            out.completed[name] = int(status.get("last_completed_collective", -1))
            out.enqueued[name] = int(status.get("last_enqueued_collective", -1))
    return out


def not_dumps(folder: Path) -> list[str]:
    """The folder's files without a rank at the end of their name (a README beside the dumps): skipped, named once."""
    return [p.name for p in listed(Path(folder), None) if not _RANK.search(p.name)]


def read_dir(folder: Path) -> list[FrDump]:
    """Every rank's dump in the folder, in rank order (not_dumps skipped); the same rank twice is refused."""
    paths = [p for p in listed(Path(folder), None) if _RANK.search(p.name)]
    if not paths:
        raise ResultError(f"{folder}: no file named <prefix><rank> in it (torch's default: nccl_trace_rank_<rank>): "
                          "no flight-recorder dumps")
    dumps = sorted((read(p) for p in paths), key=lambda d: d.rank)
    for a, b in zip(dumps, dumps[1:]):
        if a.rank == b.rank:
            raise ResultError(f"{a.path} and {b.path} are both rank {a.rank}: dumps of different jobs mixed")
    return dumps
