"""The collectives hccl-bench sweeps: buffer shapes, bus-bandwidth factors and exact expected results.

Sizes, counts and factors follow nccl-tests (``src/*.cu`` ``Get*ByteCount`` / ``Get*Bw``):
S is the total buffer (the gathered buffer for all_gather, the scattered input for
reduce_scatter); busbw = algbw x factor.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

REDOPS = ("sum", "prod", "max", "min")
ROOT = 0  # nccl-tests' default root


@dataclass(frozen=True)
class Op:
    name: str
    reduces: bool            # takes a redop
    chunked: bool            # count must be a multiple of the rank count
    send_per_rank: bool      # send buffer is count/n (all_gather)
    recv_per_rank: bool      # recv buffer is count/n (reduce_scatter)

    def bus_factor(self, nranks: int) -> float:
        n = nranks
        if self.name == "all_reduce":
            return 2.0 * (n - 1) / n
        if self.name in ("all_gather", "reduce_scatter", "all_to_all"):
            return (n - 1) / n
        return 1.0

    def count_for(self, nbytes: int, itemsize: int, nranks: int) -> int:
        """Elements in the full buffer for a requested size, adjusted to what the op needs."""
        count = max(1, nbytes // itemsize)
        if self.chunked:
            count = max(nranks, count - count % nranks)
        return count

    def buffer_counts(self, count: int, nranks: int) -> tuple[int, int]:
        """(send elements, recv elements) per rank."""
        send = count // nranks if self.send_per_rank else count
        recv = count // nranks if self.recv_per_rank else count
        return send, recv


OPS = {o.name: o for o in (
    Op("all_reduce", reduces=True, chunked=False, send_per_rank=False, recv_per_rank=False),
    Op("all_gather", reduces=False, chunked=True, send_per_rank=True, recv_per_rank=False),
    Op("reduce_scatter", reduces=True, chunked=True, send_per_rank=False, recv_per_rank=True),
    Op("all_to_all", reduces=False, chunked=True, send_per_rank=False, recv_per_rank=False),
    Op("broadcast", reduces=False, chunked=False, send_per_rank=False, recv_per_rank=False),
    Op("reduce", reduces=True, chunked=False, send_per_rank=False, recv_per_rank=False),
    Op("sendrecv", reduces=False, chunked=False, send_per_rank=False, recv_per_rank=False),
)}


def bandwidths(op: str, nbytes: int, seconds: float, nranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes/s), nccl-tests' definitions."""
    if seconds <= 0:
        return 0.0, 0.0
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * OPS[op].bus_factor(nranks)


# ---- exact, overflow-free data -------------------------------------------------------------
# Rank r's input element i is a(i) + b(r) (sum/max/min and data movement) or s(i) * t(r) (prod):
# small integers, exactly representable, whose reductions are known in closed form, so the
# check costs O(count) on every rank whatever the rank count.

EXACT_LIMIT = {"float16": 2048, "bfloat16": 256, "float32": 1 << 24, "float64": 1 << 53,
               "int8": 127, "uint8": 255, "int32": (1 << 31) - 1, "int64": (1 << 62)}
UNSIGNED = {"uint8"}


@dataclass(frozen=True)
class Pattern:
    """The inputs of every rank for one case, and what each rank must end up holding."""
    op: str
    dtype: str
    redop: str
    count: int
    nranks: int
    seed: int = 1234

    def _amplitude(self) -> int:
        return max(0, min(100, (EXACT_LIMIT[self.dtype] // 2) // self.nranks))

    def _a(self, n: int) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        amp = self._amplitude()
        lo = 0 if self.dtype in UNSIGNED else -amp
        return rng.integers(lo, amp + 1, size=n).astype(np.float64)

    def _b(self) -> np.ndarray:
        r = np.arange(self.nranks)
        b = (r % 2).astype(np.float64) if self.dtype in UNSIGNED else (r % 3 - 1).astype(np.float64)
        b[r >= EXACT_LIMIT[self.dtype] // 2] = 0
        return b

    def _s(self, n: int) -> np.ndarray:
        if self.dtype in UNSIGNED:
            return np.ones(n)
        return np.where(np.random.default_rng(self.seed).integers(0, 2, size=n) == 0, 1.0, -1.0)

    def _t(self) -> np.ndarray:
        t = np.ones(self.nranks)
        t[0] = 2.0
        if self.dtype not in UNSIGNED:
            t[1::3] = -1.0
        return t

    def input(self, rank: int) -> np.ndarray:
        send, _ = OPS[self.op].buffer_counts(self.count, self.nranks)
        if self.redop == "prod" and OPS[self.op].reduces:
            return self._s(send) * self._t()[rank]
        return self._a(send) + self._b()[rank]

    def sentinel(self) -> float:
        """A value no correct output contains: fills receive buffers before the checked run."""
        return float(min(EXACT_LIMIT[self.dtype], 1 << 20))

    def _reduced(self, n: int) -> np.ndarray:
        if self.redop == "prod":
            return self._s(n) ** self.nranks * np.prod(self._t())
        a, b = self._a(n), self._b()
        return {"sum": self.nranks * a + b.sum(), "max": a + b.max(), "min": a + b.min()}[self.redop]

    def expected(self, rank: int) -> np.ndarray | None:
        """What `rank` must hold in its receive buffer; None where the op leaves it undefined."""
        n, c = self.nranks, self.count
        op = self.op
        if op == "all_reduce":
            return self._reduced(c)
        if op == "reduce":
            return self._reduced(c) if rank == ROOT else None
        if op == "reduce_scatter":
            k = c // n
            return self._reduced(c)[rank * k:(rank + 1) * k]
        if op == "all_gather":
            k = c // n
            return (self._a(k)[None, :] + self._b()[:, None]).reshape(-1)
        if op == "all_to_all":
            k = c // n
            return (self._a(c)[rank * k:(rank + 1) * k][None, :] + self._b()[:, None]).reshape(-1)
        if op == "broadcast":
            return self.input(ROOT)
        if op == "sendrecv":
            return self.input((rank - 1) % n)
        raise KeyError(op)


def count_wrong(got: np.ndarray, expected: np.ndarray | None) -> int:
    """Elements that differ from the exact expectation (nccl-tests' #wrong)."""
    if expected is None:
        return 0
    if got.shape != expected.shape:
        return int(max(got.size, expected.size))
    return int(np.count_nonzero(got.astype(np.float64) != expected))
