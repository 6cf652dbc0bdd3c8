"""What the installed torch lacks for a layer case: one line naming the API and the torch release
that brought it, or "" (asked at collection, so such a case is skipped with the reason, not failed).
Which API came with which torch: docs/layers.md (Checks and the torch they need)."""
from __future__ import annotations

import functools
import importlib
import inspect

from layers.schedules import SCHEDULES

MANUAL_TP = (("torch.distributed", "all_gather_into_tensor", "1.13"), ("torch.distributed", "reduce_scatter_tensor", "1.13"))
DTENSOR_TP = (("torch.distributed.tensor", "Shard", "2.5"), ("torch.distributed.tensor.parallel", "ColwiseParallel", "2.5"),
              ("torch.distributed.tensor.parallel", "RowwiseParallel", "2.5"),
              ("torch.distributed.tensor.parallel", "parallelize_module", "2.5"),
              ("torch.distributed.device_mesh", "init_device_mesh", "2.2"))
SCHEDULE_SINCE = {"ScheduleGPipe": "2.4", "Schedule1F1B": "2.4", "ScheduleInterleaved1F1B": "2.4",
                  "ScheduleInterleavedZeroBubble": "2.5", "ScheduleZBVZeroBubble": "2.6"}


@functools.cache
def _has(module: str, name: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


@functools.cache
def _stage_infers_shapes() -> bool:
    from torch.distributed.pipelining import PipelineStage
    param = inspect.signature(PipelineStage.__init__).parameters.get("input_args")
    return param is None or param.default is not inspect.Parameter.empty


def missing(kind: str, impl: str = "", schedule: str = "") -> str:
    """Why this torch cannot run the layer case (kind "linear" with its impl, "pipeline" with its schedule), or ""."""
    try:
        import torch
    except ImportError:
        return "layer benches need torch (not installed)"
    if kind == "linear":
        needs = MANUAL_TP + (DTENSOR_TP if impl == "dtensor" else ())
    else:
        cls = SCHEDULES[schedule][0]
        needs = (("torch.distributed.pipelining", "PipelineStage", "2.4"),
                 ("torch.distributed.pipelining.schedules", cls, SCHEDULE_SINCE[cls]))
    for module, name, since in needs:
        if not _has(module, name):
            return f"torch {torch.__version__} has no {module}.{name} (torch >= {since})"
    if kind == "pipeline" and not _stage_infers_shapes():
        return f"torch {torch.__version__}'s PipelineStage needs example inputs (shape inference: torch >= 2.6)"
    return ""
