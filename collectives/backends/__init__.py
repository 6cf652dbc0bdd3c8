"""The communication libraries: each module in ``_MODULES`` declares a ``BackendInfo`` per backend name;
the rest of the code asks ``info(name)`` instead of comparing names. A backend = its module + a line here."""
from __future__ import annotations

import importlib

from collectives.backends.base import Backend, BackendInfo, Unsupported, page_aligned
from collectives.backends.mpi_ranks import MpiBackend
from collectives.backends.torch_dist import TorchBackend

__all__ = ["BACKENDS", "Backend", "BackendInfo", "MpiBackend", "TorchBackend", "Unsupported", "algo_label", "create",
           "for_python", "forms", "info", "oversubscribed", "page_aligned"]

_MODULES = (
    "torch_dist",
    "mpich",
    "openmpi",
)
_declared: dict[str, BackendInfo] = {}
for _name in _MODULES:
    _declared.update(importlib.import_module(f"collectives.backends.{_name}").BACKENDS)
# CPU backends first (gloo, mpi, then nccl, hccl): the order options and messages list them in
BACKENDS: dict[str, BackendInfo] = dict(sorted(_declared.items(), key=lambda kv: kv[1].device_kind != "cpu"))


def info(name: str) -> BackendInfo:
    return BACKENDS[name]


def for_python(name: str, python: str = "") -> BackendInfo:
    """The declarations that apply to `name` run by `python` ("" = this interpreter): those of the
    same-family backend declared for the build it loads (mpi: MPICH or Open MPI), where one is."""
    own = BACKENDS[name]
    build = own.variant(python)
    if not build or build == own.build:
        return own
    return next((b for b in BACKENDS.values() if b.family == own.family and b.build == build), own)


def create(name: str, rank: int, world: int, local_rank: int) -> Backend:
    return BACKENDS[name].create(name, rank, world, local_rank)


def forms(backend: str) -> dict[str, frozenset[bool]]:
    """Which buffer forms `backend` offers per op: True = in-place, False = out-of-place."""
    from collectives.ops import OPS
    return {op: BACKENDS[backend].forms(op) for op in OPS}


def algo_label(backend: str, algo: str) -> str:
    """How a series names its algorithm: a library that cannot say what it ran gets 'as requested'."""
    known = BACKENDS.get(backend)
    return f"{algo} (requested)" if known and known.requested_only and algo not in ("", "default") else algo


def oversubscribed(backend: str, nproc: int, devices: int, launcher: str = "") -> str:
    """Why `nproc` local ranks cannot share this node's devices ('' when they can, or a launcher spreads
    them over hosts). NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), HCCL on one NPU."""
    b = BACKENDS[backend]
    if not b.one_rank_per_device or launcher or nproc <= devices:
        return ""
    what = b.device_noun
    return (f"--nproc {nproc} > {devices} {what}{'s' if devices != 1 else ''} on this node: {b.library} needs one {what} "
            f"per rank (use --nproc {devices} or less, or a --launcher across hosts)")
