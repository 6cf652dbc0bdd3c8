"""Per-rank memory for hybrid parallel training (docs/layers.md, Memory model): model states (mixed-precision
Adam, 16 B/param, split by tp x pp and by dp for what ZeRO shards; the hybrid step's SGD: sgd_states),
activations per layer (Korthikanti et al. 2022, Table 2) and HCCL's buffers (HCCL_BUFFSIZE MB twice per communicator).
"""
from __future__ import annotations

from dataclasses import dataclass

from collectives.sizes import comm_buffers

GB = 1e9
RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Estimate:
    weights: float
    grads: float
    optimizer: float
    activations: float
    comm_buffers: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.comm_buffers


def model_states(params: float, tp: int, pp: int, dp: int = 1, zero: int = 0,
                 weight_bytes: int = 2, grad_bytes: int = 2, optimizer_bytes: int = 12) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per rank."""
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"zero stage must be 0, 1, 2 or 3, got {zero}")
    per_rank = params / (tp * pp)
    weights = per_rank * weight_bytes / (dp if zero >= 3 else 1)
    grads = per_rank * grad_bytes / (dp if zero >= 2 else 1)
    optimizer = per_rank * optimizer_bytes / (dp if zero >= 1 else 1)
    return weights, grads, optimizer


ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}


def sgd_states(distributed: bool, dtype: str, grad_reduce: str) -> dict:
    """model_states' keywords for the hybrid step's plain SGD, each gradient also copied into a dp bucket
    in `grad_reduce`; the distributed optimizer's reduce_scatter shard counts as optimizer-side (ZeRO-1)."""
    weight, reduced = ELEMENT_BYTES[dtype], ELEMENT_BYTES[grad_reduce]
    return {"weight_bytes": weight, "grad_bytes": weight + reduced, "optimizer_bytes": reduced if distributed else 0,
            "zero": 1 if distributed else 0}


def activations_per_layer(seq: int, micro_batch: int, hidden: int, heads: int, tp: int = 1,
                          sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Bytes of one transformer layer's stored activations for one microbatch (16-bit activations)."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    s, b, h, a, t = seq, micro_batch, hidden, heads, tp
    sbh = s * b * h
    attention = 5 * a * s / h          # the softmax/dropout part that selective recompute drops
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    if sequence_parallel:
        return sbh * (34 / t + (0 if recompute == "selective" else attention / t))
    return sbh * (10 + 24 / t + (0 if recompute == "selective" else attention / t))


def activations_per_rank(layers: int, pp: int, microbatches: int, schedule: str = "1f1b", **layer_kw) -> float:
    """The first pipeline stage holds the most: layers/pp layers x microbatches in flight
    (1F1B: min(m, pp); GPipe: all m)."""
    in_flight = microbatches if schedule == "gpipe" else min(microbatches, pp)
    return activations_per_layer(**layer_kw) * (layers / pp) * in_flight


def estimate(params: float, tp: int, pp: int, dp: int = 1, zero: int = 0, layers: int = 0, hidden: int = 0,
             heads: int = 0, seq: int = 0, micro_batch: int = 1, microbatches: int = 1, schedule: str = "1f1b",
             sequence_parallel: bool = False, recompute: str = "none", hccl_buffsize_mb: float = 200.0) -> Estimate:
    weights, grads, optimizer = model_states(params, tp, pp, dp, zero)
    acts = 0.0
    if layers and hidden and heads and seq:
        acts = activations_per_rank(layers, pp, microbatches, schedule, seq=seq, micro_batch=micro_batch,
                                    hidden=hidden, heads=heads, tp=tp, sequence_parallel=sequence_parallel,
                                    recompute=recompute)
    communicators = 1 + sum(1 for d in (tp, dp, pp) if d > 1)   # the world, tp, dp and pp groups this rank is in
    return Estimate(weights, grads, optimizer, acts, comm_buffers(communicators, hccl_buffsize_mb))


def mlp_gradient_sizes(hidden: int, layers: int) -> list[int]:
    """Elements of each parameter's gradient in the layer benches' MLP block stack, in parameter
    order: per block fc1.weight (4h x h), fc1.bias (4h), fc2.weight (h x 4h), fc2.bias (h)."""
    return [4 * hidden * hidden, 4 * hidden, 4 * hidden * hidden, hidden] * layers


def bucket_plan(sizes_bytes: list[int], cap_bytes: int) -> list[list[int]]:
    """Tensor indices per bucket, the way DDP fills them: parameters in reverse order (gradients
    are ready back to front), a bucket closed once it reaches the cap; 0 means one per tensor."""
    if cap_bytes <= 0:
        return [[i] for i in reversed(range(len(sizes_bytes)))]
    plan: list[list[int]] = [[]]
    filled = 0
    for i in reversed(range(len(sizes_bytes))):
        if plan[-1] and filled >= cap_bytes:
            plan.append([])
            filled = 0
        plan[-1].append(i)
        filled += sizes_bytes[i]
    return plan
