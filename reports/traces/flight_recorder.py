"""torch's flight-recorder dumps (TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE; one file per rank,
`<prefix><rank>`, e.g. torch's default TORCH_FR_DUMP_TEMP_FILE `nccl_trace_rank_<rank>`) into FrDumps.

The format is what torch.distributed.flight_recorder's loader reads (torch 2.13, dump version
"2.10"): a pickled dict with `version`, `pg_config` (name -> {name, desc, ranks as a string}),
`pg_status` (name -> last_enqueued/started/completed_collective) and `entries`, each with
`process_group` (name, desc), `collective_seq_id`, `p2p_seq_id`, `is_p2p`, `profiling_name`,
`input_sizes`, `input_dtypes`, `state`. The rank is the file name's trailing number, as torch's
loader takes it; a dump carries no host. A dump is untrusted: it is unpickled with no classes at all
(torch's dumps hold only dicts, lists, tuples, strings and numbers), so a crafted file cannot run code.
gloo records every entry as "scheduled" (its work is not watched), so for gloo groups "completed"
comes from pg_status and says only what was enqueued and retired. pg_status is keyed by the group's
id (each entry's `pg_id`), which is its name only where the two agree (the default group of a gloo
job); names are taken from the entries. Files without a rank at the end of their name (a
`fault_injection.log`, a README) are not dumps: skipped and named (not_dumps).
torch_npu's HCCL flight recorder (TORCH_HCCL_TRACE_BUFFER_SIZE; Ascend/pytorch
torch_npu/csrc/distributed/TraceUtils.h, HCCLTraceBuffer::dump) pickles the same dict with torch's
own Pickler (version "2.4", `hccl_comm_state` for `nccl_comm_state`): read the same way.
"""
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
    raw = read_bytes(path)
    try:
        dump = _DataOnly(io.BytesIO(raw)).load()
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
    """The folder's files without a rank at the end of their name (a `fault_injection.log`, a README
    beside the dumps): skipped, and named once, rather than the folder refused for them."""
    return [p.name for p in listed(Path(folder), None) if not _RANK.search(p.name)]


def read_dir(folder: Path) -> list[FrDump]:
    """Every rank's dump in the folder, in rank order (files without a rank in their name skipped:
    not_dumps); the same rank twice is refused."""
    paths = [p for p in listed(Path(folder), None) if _RANK.search(p.name)]
    if not paths:
        raise ResultError(f"{folder}: no file named <prefix><rank> in it (torch's default: nccl_trace_rank_<rank>): "
                          "no flight-recorder dumps")
    dumps = sorted((read(p) for p in paths), key=lambda d: d.rank)
    for a, b in zip(dumps, dumps[1:]):
        if a.rank == b.rank:
            raise ResultError(f"{a.path} and {b.path} are both rank {a.rank}: dumps of different jobs mixed")
    return dumps
