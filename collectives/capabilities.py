"""Where a worker group runs, the library-neutral half of every capability question: the device facts
and the rank layout that each library's own tables (collectives/backends/) judge a case by."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

# The dtypes the harness offers for torch.distributed backends (collectives.backends).
ALL = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8")


@dataclass(frozen=True)
class DeviceFacts:
    """What collection knows about one backend's devices on this node (default: a CPU backend, nothing to check)."""
    backend: str = "gloo"
    name: str = ""                        # SoC / GPU name: "Ascend910B3", "Ascend910_9391", "NVIDIA H200"
    devices: int = 0                      # accelerators visible on this node (0: a CPU backend)
    version: tuple[int, ...] = ()         # NCCL's (2, 21, 5); () unknown
    capability: tuple[int, int] = (0, 0)  # CUDA compute capability; (0, 0) unknown
    collnet: bool = False                 # NCCL_COLLNET_ENABLE=1 (a CollNet/SHARP plugin is expected)


@dataclass(frozen=True)
class Target:
    """Where a worker group runs: the device facts, ranks per node and nodes (0: not known, not judged)."""
    facts: DeviceFacts = field(default_factory=DeviceFacts)
    ranks_per_node: int = 1
    nodes: int = 1

    @classmethod
    def of(cls, facts: DeviceFacts, nproc: int, launcher: str = "") -> Target:
        """Without a launcher every rank is on this node; with one, as many per node as its template's
        PER_NODE counts say (nested launchers multiply; {nproc}: all on one node), else unknown."""
        if not launcher:
            return cls(facts, max(1, nproc), 1)
        counts = [nproc if n == "{nproc}" else int(n) for m in PER_NODE.finditer(launcher) for n in m.groups() if n]
        if not counts:   # one device per node can only hold one rank; otherwise the launcher decides
            return cls(facts, 1, nproc) if facts.devices == 1 else cls(facts, 0, 0)
        per_node = min(nproc, math.prod(counts))
        return cls(facts, max(1, per_node), max(1, math.ceil(nproc / max(1, per_node))))


PER_NODE = re.compile(r"(?:--ntasks-per-node|--nproc[-_]per[-_]node|-ppn|-npernode|--npernode)[= ](\d+|\{nproc\})"
                      r"|--map-by[= ]ppr:(\d+|\{nproc\}):node")
