"""An MPI library's shared-memory files in /dev/shm: MPI_Finalize removes them, a killed rank leaves
them holding memory until the next boot. Ranks unlink MPICH's init segment once all attached, a rank
whose driver vanished its own (control.py), the driver what a killed group still left (groups.py)."""
from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

from collectives.placement import PREFIX as CORE_PAGE

# MPICH's; Open MPI 5's and 4's shared-memory files; the page ranks 0 and 1 time their cores over
# (collectives/placement.py: unlinked once both mapped it, left only by a group killed in between)
SHM_PREFIXES = ("mpich_shm_", "sm_segment.", "vader_segment.", CORE_PAGE)


def segment_files() -> set[str]:
    """This user's MPI shared-memory files in /dev/shm (SHM_PREFIXES), mapped or not."""
    try:
        entries = list(Path("/dev/shm").iterdir())
    except OSError:
        return set()
    return {str(p) for p in entries if p.name.startswith(SHM_PREFIXES) and _ours(p)}


def _ours(path: Path) -> bool:
    """A regular file this user owns."""
    try:
        return path.is_file() and path.lstat().st_uid == os.geteuid()
    except OSError:
        return False


def shm_mapped(pids: set[int]) -> set[str]:
    """The MPI shared-memory segments these processes map: regular files in /dev/shm that this user
    owns and that an MPI names (SHM_PREFIXES)."""
    found: set[str] = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            path = line.split(maxsplit=5)[-1]
            if path.startswith("/dev/shm/") and path[len("/dev/shm/"):].startswith(SHM_PREFIXES):
                found.add(path)
    return {path for path in found if _ours(Path(path))}


def still_mapped(paths: set[str]) -> set[str]:
    """Which of `paths` some live process on this machine still maps."""
    mapped: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:
            continue
        mapped.update(path for path in paths if path in text)
    return mapped


def release_own(prefixes: tuple[str, ...] = SHM_PREFIXES) -> None:
    """Unlink the MPI segments this process maps, as its finalize would. Peers that map a file keep
    their mapping; nothing new can attach to it."""
    for path in shm_mapped({os.getpid()}):
        if path[len("/dev/shm/"):].startswith(prefixes):
            with suppress(OSError):
                os.unlink(path)


def release_attached() -> None:
    """Once every rank is past MPI_Init and a collective, all of a node's ranks map MPICH's init segment,
    so its name can go and no later kill leaves it behind. Open MPI's peers attach lazily: kept."""
    release_own(("mpich_shm_",))
