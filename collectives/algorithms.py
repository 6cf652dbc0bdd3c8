"""Portable algorithm names -> each library's own switch (docs/method.md, Algorithms): the names and
the dispatch to ``BackendInfo.switch``. An algorithm a backend or op lacks is never run as the default."""
from __future__ import annotations

from collectives.backends import BACKENDS, Unsupported
from collectives.backends.hccl import HCCL_OPS
from collectives.capabilities import Target
from collectives.ops import OPS

__all__ = ["PORTABLE", "Unsupported", "merge_group_env", "native_name", "resolve", "split", "validate"]

PORTABLE = ("default", "ring", "tree")


def split(algo: str) -> tuple[str | None, str]:
    """``'mpi:ring'`` -> ('mpi', 'ring'); ``'tree'`` -> (None, 'tree')."""
    backend, colon, value = algo.partition(":")
    return (backend, value) if colon else (None, algo)


def native_name(backend: str, algo: str) -> str:
    """The library's own name for `algo` on `backend` ('' for default or another backend's)."""
    owner, value = split(algo)
    if value == "default" or owner not in (None, backend):
        return ""
    return BACKENDS[backend].portable.get(value, "") if owner is None else value


def validate(algo: str) -> str | None:
    """An error message for a malformed or unknown --algos entry, else None."""
    backend, value = split(algo)
    if backend is None:
        return None if value in PORTABLE else (f"unknown algorithm {algo!r}: use default, ring, tree or BACKEND:NATIVE "
                                               "(e.g. mpi:recursive_doubling, hccl:NHR)")
    if backend not in BACKENDS:
        return f"unknown backend {backend!r} in algorithm {algo!r}: backends are {', '.join(BACKENDS)}"
    known = BACKENDS[backend].native_algos
    if value not in known:
        allowed = ", ".join(known) if known else f"none ({backend} has no algorithm switch)"
        return f"unknown {backend} algorithm {value!r}: allowed {allowed}"
    return None


def resolve(backend: str, algo: str, op: str, library: str = "",
            target: Target | None = None) -> dict[str, str] | Unsupported:
    """Environment that forces `algo` for `op` on `backend` ({} for the library's own choice), or why not.
    `library`: the build (BackendInfo.variant); a `target` checks the device's capability table too."""
    owner, value = split(algo)
    if owner is not None and owner != backend:
        return Unsupported(f"{algo} is a {owner} algorithm, not {backend}'s")
    if value == "default":
        return {}
    if OPS[op].point_to_point:
        return Unsupported(f"{op} is point-to-point: no collective algorithm applies")
    if backend not in BACKENDS:
        return Unsupported(f"unknown backend {backend}")
    return BACKENDS[backend].switch(OPS[op], value, owner is None, target, library)


def forced_for_op(var: str, value: str, op) -> str:
    """The part of an algorithm switch's `value` that applies to `op` ('' where it names other ops only):
    NCCL_ALGO's per-op form 'allreduce:tree;allgather:pat' (NCCL >= 2.24, names as NCCL's ncclFuncStr,
    any case) and HCCL_ALGO's 'allreduce=level0:NA;level1:ring/allgather=...' name their ops; the plain
    forms ('Tree', 'level0:NA;level1:ring') apply to every collective. Other variables are per op already."""
    per_op = {"NCCL_ALGO": (":", ";", op.log.nccl_func), "HCCL_ALGO": ("=", "/", HCCL_OPS.get(op.name, ""))}
    if var in per_op and per_op[var][0] in value:
        sep, joiner, name = per_op[var]
        parts = {k.strip().lower(): v.strip() for k, _, v in (p.partition(sep) for p in value.split(joiner))}
        return parts.get(name.lower(), "") if name else ""
    return value


def merge_group_env(envs: list[dict[str, str]]) -> dict[str, str]:
    """One worker group serves every op of an algorithm: the per-op settings' union (HCCL_ALGO's joined with '/')."""
    merged: dict[str, str] = {}
    hccl: list[str] = []
    for env in envs:
        for key, value in env.items():
            if key != "HCCL_ALGO":
                merged[key] = value
            elif value not in hccl:
                hccl.append(value)
    if hccl:
        merged["HCCL_ALGO"] = "/".join(hccl)
    return merged
