"""A layer bench's result against its single-rank reference: elements past tolerance = C x n_reduce x
u x scale + tiny, C = 2, are its #wrong (why that bound: docs/layers.md, Checks)."""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import torch

from collectives.device import hf32_matmuls
from collectives.rank_tasks import corrupt_one

C = 2.0
UNIT_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
TINY = {"float64": 2.0 ** -1022, "float32": 2.0 ** -126, "bfloat16": 2.0 ** -126, "float16": 2.0 ** -14}
MATMUL_PRECISION = {"highest": 2.0 ** -24, "high": 2.0 ** -11, "medium": 2.0 ** -8}   # torch.set_float32_matmul_precision


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def unit_roundoff(dtype) -> float:
    """u of the arithmetic a `dtype` block computes in on this process (float32: as its matmuls round)."""
    name = dtype_name(dtype)
    if name != "float32":
        return UNIT_ROUNDOFF[name]
    u = MATMUL_PRECISION.get(torch.get_float32_matmul_precision(), UNIT_ROUNDOFF["float32"])
    if hf32_matmuls():   # torch_npu: HF32 matmuls keep TF32's 10-bit mantissa
        u = max(u, 2.0 ** -11)
    return u


def tolerance(dtype, n_reduce: int, scale: float) -> float:
    """The largest |parallel - reference| a correct result may show (module docstring)."""
    if n_reduce < 1:
        raise ValueError(f"n_reduce must be >= 1, got {n_reduce}")
    return C * n_reduce * unit_roundoff(dtype) * abs(scale) + TINY[dtype_name(dtype)]


def grad_of(p: torch.Tensor) -> torch.Tensor:
    """p's gradient; zeros where none reached it (an expert no token chose: autograd leaves .grad None)."""
    return p.grad if p.grad is not None else torch.zeros_like(p)


@dataclass
class Check:
    """Tensors compared against their references on this rank; `corrupt` changes the first one's result."""
    dtype: str
    corrupt: bool = False
    wrong: int = 0
    checked: int = 0
    worst: float = 0.0            # the largest |parallel - reference| / tolerance seen (<= 1: all within)

    def compare(self, got: torch.Tensor, ref: torch.Tensor, n_reduce: int) -> None:
        got = got.detach().cpu().to(torch.float64)   # to the host first: not every device has float64
        if self.corrupt:   # HCCL_BENCH_FAULT=corrupt on this rank: one element of its result changed
            got, self.corrupt = torch.from_numpy(corrupt_one(got.numpy())), False
        ref = ref.detach().cpu().to(torch.float64)
        if got.shape != ref.shape:   # a wrong shard: every element is wrong
            self.wrong += max(got.numel(), ref.numel())
            self.checked += max(got.numel(), ref.numel())
            self.worst = math.inf
            return
        tol = tolerance(self.dtype, n_reduce, float(ref.abs().max()) if ref.numel() else 0.0)
        err = torch.nan_to_num((got - ref).abs(), nan=math.inf)
        self.wrong += int((err > tol).sum())
        self.checked += err.numel()
        if err.numel():
            self.worst = max(self.worst, float(err.max()) / tol)

    def record(self) -> dict:
        """What a rank returns: wrong, elements checked, and the worst error over its tolerance (finite)."""
        return {"wrong": self.wrong, "checked": self.checked,
                "err_to_tol": self.worst if math.isfinite(self.worst) else sys.float_info.max}
