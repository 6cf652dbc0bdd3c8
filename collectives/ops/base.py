"""What an op module declares (``Op``) and the exact, overflow-free data every op's check uses. Sizes,
counts and factors follow nccl-tests (``src/*.cu`` ``Get*ByteCount`` / ``Get*Bw``)."""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

REDOPS = ("sum", "prod", "max", "min")
ROOT = 0  # nccl-tests' default root
# Bytes per element of every dtype the harness runs or an imported log names (the one table).
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1, "int16": 2,
            "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "float8_e4m3": 1, "float8_e5m2": 1}

# A family call: (backend, send, recv, library redop, in-place?, asynchronous?) -> a zero-argument callable
Call = Callable[[Any, Any, Any, Any, bool, bool], Callable[[], Any]]


def one_buffer(backend, x: np.ndarray, pattern: Pattern, send_n: int, recv_n: int):
    """The in-place layout of most ops: the input is the output buffer."""
    buf = backend.from_numpy(x, pattern.dtype)
    return buf, buf


def unit_factor(nranks: int, algo: str) -> float:
    return 1.0


def chunk_factor(nranks: int, algo: str) -> float:
    """(n-1)/n: every rank sends (or receives) all chunks but its own (nccl-tests all_gather.cu)."""
    return (nranks - 1) / nranks


def chunk_traffic(algo: str, p: int) -> tuple[float, float]:
    """ring: p-1 steps; tree: recursive doubling or halving, log2 p steps; the same volume either way."""
    return (p - 1, (p - 1) / p) if algo == "ring" else (math.ceil(math.log2(p)), (p - 1) / p)


ENVIRONMENT = " (environment)"   # the series suffix of an algorithm forced by the job's own environment


def algo_id(algo: str) -> str:
    """`algo` as a case id spells it: 'recexch (environment)' -> 'recexch-env' (no spaces in an id)."""
    if not algo.endswith(ENVIRONMENT):
        return algo
    return re.sub(r"[^\w.-]+", "_", algo[:-len(ENVIRONMENT)]) + "-env"


@dataclass(frozen=True)
class LogNames:
    """How other tools name the op in their logs."""
    nccl_tests: str = ""                    # <name>_perf (rccl-tests, hccl_test <name>_test alike)
    nccl_func: str = ""                     # NCCL's own (TUNING lines, inspector "coll")
    inspector: tuple[str, ...] = ()         # NCCL inspector's "coll" values


@dataclass(frozen=True)
class Op:
    """Everything about one collective: one module per op in collectives/ops/, registered in __init__."""
    name: str
    reduces: bool            # takes a redop
    chunked: bool            # count must be a multiple of the rank count
    send_per_rank: bool      # send buffer is count/n (all_gather)
    recv_per_rank: bool      # recv buffer is count/n (reduce_scatter)
    factor: Callable[[int, str], float]                 # (nranks, algo) -> busbw / algbw
    expect: Callable[[Pattern, int], np.ndarray | None]   # what a rank must hold; None: undefined there
    calls: dict[str, Call]                              # backend family ("torch", "mpi") -> its call
    forms: dict[str, frozenset[bool]]                   # family -> buffer forms (True = in-place)
    has_async: bool = False                             # async_op=True / MPI_I<op> exists in every family
    inplace: Callable[..., tuple[Any, Any]] = one_buffer  # (backend, x, pattern, send_n, recv_n) -> (send, recv)
    point_to_point: bool = False                        # no collective algorithm applies
    min_ranks: int = 1
    log: LogNames = field(default_factory=LogNames)
    traffic: Callable[[str, int], tuple[float, float]] | None = None   # predict: (algo, p) -> (steps, share of S)

    def bus_factor(self, nranks: int, algo: str = "") -> float:
        """The busbw factor under `algo`; a series forced by the environment ('NVLS (environment)') by its value."""
        return self.factor(nranks, algo[:-len(ENVIRONMENT)] if algo.endswith(ENVIRONMENT) else algo)

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

    def per_rank_log_bytes(self) -> bool:
        """Whether NCCL (TUNING lines, inspector) counts one rank's part instead of the full buffer."""
        return self.send_per_rank or self.recv_per_rank


# Filled by collectives/ops/__init__.py before any caller can see this module.
OPS: dict[str, Op] = {}


def bandwidths(op: str, nbytes: int, seconds: float, nranks: int, algo: str = "") -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes/s), nccl-tests' definitions."""
    if seconds <= 0:
        return 0.0, 0.0
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * OPS[op].bus_factor(nranks, algo)


# ---- exact, overflow-free data (docs/method.md, Correctness) --------------------------------
# Rank r's input element i is a(i) + b(r), or s(i) * t(r) for prod, or sparse for a sum over too many
# ranks: small integers whose reductions are known in closed form, an O(count) check on every rank.

EXACT_LIMIT = {"float16": 2048, "bfloat16": 256, "float32": 1 << 24, "float64": 1 << 53,
               "int8": 127, "uint8": 255, "int32": (1 << 31) - 1, "int64": (1 << 62)}
UNSIGNED = {"uint8"}
MAX_AMPLITUDE = 100


@dataclass(frozen=True)
class Pattern:
    """The inputs of every rank for one case, and what each rank must end up holding."""
    op: str
    dtype: str
    redop: str
    count: int
    nranks: int
    seed: int = 1234

    @property
    def _limit(self) -> int:
        return EXACT_LIMIT[self.dtype]

    @property
    def _summed(self) -> bool:
        return OPS[self.op].reduces and self.redop == "sum"

    @property
    def _moved(self) -> bool:
        """Data movement (all_gather, broadcast, all_to_all, ...): values are copied, never added."""
        return not OPS[self.op].reduces

    def _amplitude(self) -> int:
        if self._summed:   # n ranks add a(i): n * amplitude + sum(b) stays in range
            return max(0, min(MAX_AMPLITUDE, (self._limit // 2) // self.nranks))
        if self._moved:    # room for a rank-distinct offset per rank: n * (2 * amplitude + 1) values
            return max(0, min(MAX_AMPLITUDE, (self._limit // self.nranks - 1) // 2))
        return min(MAX_AMPLITUDE, self._limit // 2 - 1)   # max/min: nothing grows with the ranks

    def sparse(self) -> bool:
        """A sum whose dense pattern would be (nearly) constant: too many ranks for the dtype."""
        return self._summed and self._amplitude() < 2

    def a(self, n: int) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        amp = self._amplitude()
        lo = 0 if self.dtype in UNSIGNED else -amp
        return rng.integers(lo, amp + 1, size=n).astype(np.float64)

    def b(self) -> np.ndarray:
        """Each rank's offset. Moved data: distinct per rank (up to the dtype's range, then it
        repeats), so a chunk put at another rank's place shows. max/min: the root (rank 0) never
        holds the result already, so an in-place reduce that does nothing fails its check."""
        r = np.arange(self.nranks)
        if self._moved:
            span = 2 * self._amplitude() + 1
            return ((r % max(1, self._limit // span)) * span).astype(np.float64)
        if self.redop in ("max", "min"):
            up = 1.0 if self.redop == "max" else -1.0
            if self.dtype in UNSIGNED:   # no negatives: the root 0 below a max of 1, 1 above a min of 0
                return np.where((r % 2 == 1) == (up > 0), 1.0, 0.0)
            b = np.where(r % 2 == 1, up, 0.0)
            b[0] = -up
            return b
        b = (r % 2).astype(np.float64) if self.dtype in UNSIGNED else (r % 3 - 1).astype(np.float64)
        b[r >= self._limit // 2] = 0
        return b

    def _sparse_layout(self, n: int) -> tuple[int, int, np.ndarray]:
        """(m, contributing layers, w): rank r adds w(i) at i = r (mod m) while r // m < layers,
        every output w(i) x (its contributors) below the limit (the sentinel's value)."""
        m = max(1, min(self.nranks, n))
        layers = -(-self.nranks // m)
        heavy = 2 * layers <= self._limit - 1
        w = np.random.default_rng(self.seed).integers(1, 3 if heavy else 2, size=n).astype(np.float64)
        return m, min(layers, (self._limit - 1) // (2 if heavy else 1)), w

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
        if self.sparse():
            m, layers, w = self._sparse_layout(send)
            mine = (np.arange(send) % m == rank % m) & (rank // m < layers)
            return np.where(mine, w, 0.0)
        return self.a(send) + self.b()[rank]

    def sentinel(self) -> float:
        """A value no correct output contains: fills receive buffers before the checked run."""
        return float(min(EXACT_LIMIT[self.dtype], 1 << 20))

    def reduced(self, n: int) -> np.ndarray:
        """Elements 0..n of every rank's inputs reduced with the redop, in closed form."""
        if self.redop == "prod":
            return self._s(n) ** self.nranks * np.prod(self._t())
        if self.sparse():
            send, _ = OPS[self.op].buffer_counts(self.count, self.nranks)
            m, layers, w = self._sparse_layout(send)
            j = np.arange(n) % m
            contributors = np.minimum(layers, (self.nranks - 1 - j) // m + 1)
            return w[:n] * contributors
        a, b = self.a(n), self.b()
        return {"sum": self.nranks * a + b.sum(), "max": a + b.max(), "min": a + b.min()}[self.redop]

    def expected(self, rank: int) -> np.ndarray | None:
        """What `rank` must hold in its receive buffer; None where the op leaves it undefined."""
        return OPS[self.op].expect(self, rank)


def count_wrong(got: np.ndarray, expected: np.ndarray | None) -> int:
    """Elements that differ from the exact expectation (nccl-tests' #wrong)."""
    if expected is None:
        return 0
    if got.shape != expected.shape:
        return int(max(got.size, expected.size))
    return int(np.count_nonzero(got.astype(np.float64) != expected))
