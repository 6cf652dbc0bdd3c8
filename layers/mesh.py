"""Rank layout for hybrid parallelism: tp varies fastest, then dp, then pp (Megatron's order), as
``init_device_mesh(dev, (pp, dp, tp))``; every rank creates the groups in the same order."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import Enum


class Axis(str, Enum):
    PP = "pp"
    DP = "dp"
    TP = "tp"


class MeshError(ValueError):
    pass


@dataclass(frozen=True)
class ParallelDims:
    tp: int
    pp: int
    dp: int
    world: int

    def __post_init__(self):
        for name in ("tp", "pp", "dp", "world"):
            if getattr(self, name) < 1:
                raise MeshError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.tp * self.pp * self.dp != self.world:
            raise MeshError(f"tp x pp x dp = {self.tp} x {self.pp} x {self.dp} = {self.tp * self.pp * self.dp} "
                            f"does not equal the world size {self.world}")

    @classmethod
    def fit(cls, tp: int, pp: int, world: int) -> ParallelDims:
        """dp fills what tp and pp leave; MeshError when tp x pp does not divide the world."""
        if world % (tp * pp):
            raise MeshError(f"tp x pp = {tp} x {pp} = {tp * pp} does not divide the world size {world}")
        return cls(tp, pp, world // (tp * pp), world)

    def coords(self, rank: int) -> dict[Axis, int]:
        return {Axis.TP: rank % self.tp, Axis.DP: (rank // self.tp) % self.dp, Axis.PP: rank // (self.tp * self.dp)}

    def groups(self, axis: Axis) -> list[list[int]]:
        """Every group along `axis`, in a fixed order (the order all ranks must create them in)."""
        sizes = {Axis.PP: self.pp, Axis.DP: self.dp, Axis.TP: self.tp}
        others = [a for a in (Axis.PP, Axis.DP, Axis.TP) if a != axis]
        coords = ([{others[0]: i, others[1]: j, axis: k} for k in range(sizes[axis])]
                  for i, j in itertools.product(range(sizes[others[0]]), range(sizes[others[1]])))
        return [[(c[Axis.PP] * self.dp + c[Axis.DP]) * self.tp + c[Axis.TP] for c in idx] for idx in coords]


def tp_placement(dims: ParallelDims, host_of_rank: dict[int, str]) -> list[str]:
    """Warnings for tp groups that span hosts (TP all-reduces every layer; across nodes it collapses)."""
    spans = [(group, sorted({host_of_rank[r] for r in group})) for group in dims.groups(Axis.TP)]
    return [f"tp group {group} spans {len(hosts)} hosts ({', '.join(hosts)}): its per-layer all-reduce crosses the "
            "inter-node network" for group, hosts in spans if len(hosts) > 1]


def create_groups(dims: ParallelDims, rank: int, backend: str | None = None) -> dict[Axis, object]:
    """torch.distributed groups this rank belongs to; every rank creates every group, same order."""
    import torch.distributed as dist
    mine = {}
    for axis in (Axis.PP, Axis.DP, Axis.TP):
        for members in dims.groups(axis):
            group = dist.new_group(members, backend=backend)
            if rank in members:
                mine[axis] = group
    return mine
