"""Which reader a job's folder needs, from what it holds: msprof-analyze's cluster output, torch_npu's
per-rank profiler folders, or torch.profiler (Kineto) files, one per rank."""
from __future__ import annotations

from pathlib import Path

from reports.traces import ascend, kineto, msprof_cluster
from reports.traces.records import RankTrace
from schema.results import ResultError


def read_job(folder: Path) -> list[RankTrace]:
    folder = Path(folder)
    if not folder.is_dir():
        raise ResultError(f"{folder}: not a folder (give the folder holding every rank's trace)")
    if msprof_cluster.where(folder):
        return msprof_cluster.read_dir(folder)
    if (folder / "communication.json").is_file() and ascend.is_rank_folder(folder.parent):
        folder = folder.parent          # one rank's ASCEND_PROFILER_OUTPUT given
    if ascend.rank_folders(folder):
        return ascend.read_dir(folder)
    return kineto.read_dir(folder)
