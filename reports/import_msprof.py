"""msprof-analyze and torch_npu profiler files given to `import`: a training job's own traces, not a
benchmark's size sweep, recognised by their own keys and refused in one line naming what reads them
(`hccl-bench doctor --traces DIR`). What is recognised: docs/results.md (Not benchmark output)."""
from __future__ import annotations

import re
from pathlib import Path

from schema.results import ResultError

_COMM_INFO = '"Communication Time Info"'
_STEP_TRACE = re.compile(r"^\ufeff?Step,(?:Type,Index,)?Computing,Communication\(Not Overlapped\)", re.M)
_CLUSTER_KEY = re.compile(r'^\{\s*"\(\d+(?:,\s*\d+)*\)"\s*:')


def what(head: str) -> str | None:
    """What the file is, when it is one of these; None otherwise."""
    text = head.lstrip("\ufeff").lstrip()
    if _STEP_TRACE.match(text):
        return "msprof-analyze step_trace_time.csv (profiled per-rank step times)"
    if text.startswith("{") and _COMM_INFO in head:
        if _CLUSTER_KEY.match(text):
            return "msprof-analyze cluster_communication.json (profiled HCCL op times)"
        return "torch_npu profiler communication.json (profiled HCCL op times)"
    return None


def refuse(path: Path, head: str) -> None:
    """Raise the one-line refusal when `head` (the file's first KiBs) is one of these files."""
    if found := what(head):
        raise ResultError(f"{path}: {found}, not benchmark output; hccl-bench doctor --traces DIR reads its folder")
