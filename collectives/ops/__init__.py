"""The collectives hccl-bench sweeps: one module per op (collectives/ops/<op>.py exposing ``OP = Op(...)``),
registered here by name. An op = its module + one line in ``_MODULES``; nothing else lists ops."""
from __future__ import annotations

import importlib

from collectives.ops.base import EXACT_LIMIT, ITEMSIZE, OPS, REDOPS, ROOT, UNSIGNED, Op, Pattern, bandwidths, count_wrong

__all__ = ["EXACT_LIMIT", "ITEMSIZE", "OPS", "REDOPS", "ROOT", "UNSIGNED", "Op", "Pattern", "bandwidths", "count_wrong",
           "by_log_name"]

_MODULES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "all_to_all_v",
    "broadcast",
    "reduce",
    "sendrecv",
)
for _name in _MODULES:
    _op: Op = importlib.import_module(f"collectives.ops.{_name}").OP
    OPS[_op.name] = _op


def by_log_name(name: str, inspector: bool = False) -> str | None:
    """Our op for nccl-tests' / hccl_test's stem (``all_reduce``, ``allreduce``) or NCCL's ``AllReduce``
    (underscores and case ignored); with `inspector`, NCCL Inspector's exact "coll" values (``All2All``)."""
    key = name.replace("_", "").lower()
    return next((op.name for op in OPS.values()
                 if (name in op.log.inspector if inspector
                     else key in {n.replace("_", "").lower() for n in (op.log.nccl_tests, op.log.nccl_func) if n})), None)
