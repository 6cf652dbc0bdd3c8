"""Runs tuning specs on one rank (schema.wire.TuningSpec): overlap, gradient buckets, compressed
gradients (docs/tuning.md). Each bench returns its timed loops and how to finish them, so it runs
alone (timing.measure) or round-interleaved in an A/B (timing.begin)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from collectives import timing
from collectives.ops import count_wrong
from collectives.rank_tasks import corrupt_one, prepare
from collectives.timing import Plan, repeat
from layers.memory import bucket_plan, mlp_gradient_sizes
from schema.wire import BucketResult, CompressResult, OverlapResult, TuningSpec

SEED = 20261201
DDP_BUCKET = 25 << 20            # torch DDP's default bucket_cap_mb: the compression bench's buckets
MATMUL_N = (8, 4096)             # the overlap matmul's side stays in this range
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
SUBNORMAL = {"float32": 2.0 ** -149, "bfloat16": 2.0 ** -133, "float16": 2.0 ** -24}


def _per_iter_s(loop, backend) -> float:
    """Seconds per iteration of `loop`, the slowest rank's, from a run of at least 10 ms."""
    cal = timing.calibrate(loop, backend, Plan(round_time_s=0.02))
    return cal.seconds / cal.iters


def _matmul(backend, n: int) -> Callable[[], object]:
    """A square float32 matmul of side n on this rank's device: the independent compute."""
    if backend.info.numpy_buffers:
        a, b, c = (np.ones((n, n), np.float32) for _ in range(3))
        return lambda: np.matmul(a, b, out=c)
    torch = backend.torch
    a, b, c = (torch.ones((n, n), dtype=torch.float32, device=backend.device.torch_device) for _ in range(3))
    return lambda: torch.mm(a, b, out=c)


def _sized_matmul(backend, target_s: float) -> tuple[Callable[[], object], int]:
    """The matmul whose time is closest to the collective's (docs/tuning.md); every rank takes the largest n."""
    lo, hi = MATMUL_N
    n = 64
    for _ in range(2):
        t = _per_iter_s(repeat(_matmul(backend, n)), backend)
        n = int(min(hi, max(lo, round(n * (target_s / t) ** (1 / 3)))))
    n = int(backend.max_float(float(n)))
    return _matmul(backend, n), n


def overlap(backend, spec: TuningSpec):
    """Start the collective (async_op=True, MPI_I*), run the matmul, wait: against each alone."""
    start, recv, pattern = prepare(backend, spec.op, spec.dtype, spec.redop, spec.count, spec.inplace,
                                   asynchronous=True)
    start().wait()
    backend.device.synchronize()
    got = backend.to_numpy(recv)
    wrong = count_wrong(corrupt_one(got) if spec.corrupt else got, pattern.expected(backend.rank))

    def comm(k: int) -> None:
        for _ in range(k):
            start().wait()

    mm, n = _sized_matmul(backend, _per_iter_s(comm, backend))

    def both(k: int) -> None:
        for _ in range(k):
            handle = start()
            mm()
            handle.wait()

    def finish(k, times):
        return OverlapResult(wrong=wrong, iters=k, round_ns=times[0], comm_round_ns=times[1], comp_round_ns=times[2],
                             matmul_n=n)
    return [both, comm, repeat(mm)], finish


def seeded_gradients(sizes: list[int], rank: int, integers: bool) -> list[np.ndarray]:
    """This rank's gradients, the same on every run: small integers (sums are exact) or normals."""
    rng = np.random.default_rng([SEED, rank])
    if integers:
        return [rng.integers(-3, 4, n).astype(np.float32) for n in sizes]
    return [rng.standard_normal(n).astype(np.float32) for n in sizes]


def _mean_step(backend, bufs: list) -> Callable[[], None]:
    """A step that all_reduces each buffer in place and scales it by 1/world: the mean."""
    calls = [backend.call("all_reduce", b, b, "sum", True) for b in bufs]
    mean = 1 / backend.world

    def step() -> None:
        for b, call in zip(bufs, calls):
            call()
            backend.scale(b, mean)
    return step


def bucket(backend, spec: TuningSpec):
    """DDP's gradient all_reduce (flatten per bucket, all_reduce, x 1/world, unflatten); bucket_bytes 0:
    each gradient tensor all_reduced."""
    sizes = mlp_gradient_sizes(spec.hidden, spec.layers)
    world = backend.world
    grads = [backend.from_numpy(g, "float32") for g in seeded_gradients(sizes, backend.rank, integers=True)]
    plan = bucket_plan([4 * n for n in sizes], spec.bucket_bytes)
    if spec.bucket_bytes <= 0:
        step = _mean_step(backend, grads)
    else:
        flats = [backend.full(sum(sizes[i] for i in members), 0.0, "float32") for members in plan]
        views = []   # per bucket: (its slice of the flat buffer, the gradient it holds)
        for flat, members in zip(flats, plan):
            offsets = np.cumsum([0] + [sizes[i] for i in members])
            views.append([(backend.view(flat, int(o), int(o) + sizes[i]), grads[i]) for i, o in zip(members, offsets)])
        calls = [backend.call("all_reduce", flat, flat, "sum", True) for flat in flats]

        def step() -> None:
            for flat, pairs, call in zip(flats, views, calls):
                for view, g in pairs:
                    backend.copy(view, g)
                call()
                backend.scale(flat, 1 / world)
                for view, g in pairs:
                    backend.copy(g, view)
    step()
    backend.device.synchronize()
    everyone = [seeded_gradients(sizes, r, integers=True) for r in range(world)]
    wrong = 0
    for i, g in enumerate(grads):
        expected = np.sum([e[i] for e in everyone], axis=0, dtype=np.float32) * np.float32(1 / world)
        got = backend.to_numpy(g)
        wrong += count_wrong(corrupt_one(got) if i == 0 and spec.corrupt else got, expected.astype(np.float64))

    def finish(k, times):
        return BucketResult(wrong=wrong, iters=k, round_ns=times[0], calls=len(plan), tensors=len(sizes),
                            model_bytes=4 * sum(sizes))
    return [repeat(step)], finish


def error_bound(comm_dtype: str, world: int, inputs: list[np.ndarray], scale: np.ndarray) -> np.ndarray:
    """The largest error each element of the mean may have (absolute, float64; derivation: docs/tuning.md)."""
    mean_abs = np.sum([np.abs(x.astype(np.float64)) for x in inputs], axis=0) / world
    if comm_dtype == "int8":
        return scale / 254 + 4 * UNIT_ROUNDOFF["float32"] * scale
    return 1.01 * (world + 1) * UNIT_ROUNDOFF[comm_dtype] * mean_abs + 2 * world * SUBNORMAL[comm_dtype]


def compress(backend, spec: TuningSpec):
    """The gradients all_reduced in DDP-sized buckets in another type, as PyTorch's comm hooks do
    (each type's steps: docs/tuning.md)."""
    sizes = mlp_gradient_sizes(spec.hidden, spec.layers)
    world, kind = backend.world, spec.comm_dtype
    local = np.concatenate(seeded_gradients(sizes, backend.rank, integers=False))
    flat = backend.from_numpy(local, "float32")
    per = DDP_BUCKET // 4
    bounds = [(o, min(o + per, local.size)) for o in range(0, local.size, per)]
    views = [backend.view(flat, a, b) for a, b in bounds]
    if kind == "float32":
        step = _mean_step(backend, views)
    elif kind in ("bfloat16", "float16"):
        halves = [backend.full(b - a, 0.0, kind) for a, b in bounds]
        calls = [backend.call("all_reduce", h, h, "sum", True) for h in halves]

        def step() -> None:
            for v, h, call in zip(views, halves, calls):
                backend.copy(h, v)
                backend.scale(h, 1 / world)
                call()
                backend.copy(v, h)
    else:
        step = _int8_step(backend, views, bounds)
    step()
    backend.device.synchronize()
    got = backend.to_numpy(flat)
    inputs = [np.concatenate(seeded_gradients(sizes, r, integers=False)) for r in range(world)]
    exact = np.sum([x.astype(np.float64) for x in inputs], axis=0) / world
    absmax = np.max([np.abs(x) for x in inputs], axis=0).astype(np.float64)
    scale = np.concatenate([np.full(b - a, absmax[a:b].max()) for a, b in bounds])
    err = np.abs((corrupt_one(got) if spec.corrupt else got) - exact)
    bound = error_bound(kind, world, inputs, scale)
    top, mean = float(np.abs(exact).max()), float(np.abs(exact).mean())
    checked = {"wrong": int(np.count_nonzero(err > bound)), "max_rel_error": float(err.max()) / top,
               "mean_rel_error": float(err.mean()) / mean, "error_bound": float(bound.max()) / top,
               "calls": len(bounds) * (2 if kind == "int8" else 1), "tensors": len(sizes), "model_bytes": 4 * sum(sizes),
               "bucket_bytes": DDP_BUCKET}

    def finish(k, times):
        return CompressResult(**checked, iters=k, round_ns=times[0])
    return [repeat(step)], finish


def _int8_step(backend, views, bounds):
    """int8 with a per-bucket scale, summed in int32 after an all_gather (see compress)."""
    world = backend.world
    peaks = [backend.full(1, 0.0, "float32") for _ in views]
    peak_calls = [backend.call("all_reduce", p, p, "max", True) for p in peaks]
    quant = [backend.full(b - a, 0, "int8") for a, b in bounds]
    gathered = [backend.full(world * (b - a), 0, "int8") for a, b in bounds]
    gathers = [backend.call("all_gather", q, g, "none", False) for q, g in zip(quant, gathered)]
    if backend.info.numpy_buffers:
        def step() -> None:
            for v, p, pc, q, g, gc in zip(views, peaks, peak_calls, quant, gathered, gathers):
                p[0] = np.abs(v).max()
                pc()
                s = float(p[0]) or 1.0
                q[:] = np.rint(v * np.float32(127 / s))
                gc()
                total = g.reshape(world, -1).sum(axis=0, dtype=np.int32)
                np.multiply(total, np.float32(s / 127 / world), out=v, casting="unsafe")
        return step
    torch = backend.torch

    def step_torch() -> None:
        for v, p, pc, q, g, gc in zip(views, peaks, peak_calls, quant, gathered, gathers):
            p.copy_(v.abs().max().reshape(1))
            pc()
            s = float(p.item()) or 1.0
            q.copy_(torch.round(v * float(np.float32(127 / s))))
            gc()
            total = g.view(world, -1).sum(dim=0, dtype=torch.int32)
            v.copy_(total.to(torch.float32) * float(np.float32(s / 127 / world)))
    return step_torch


BENCHES = {"overlap": overlap, "bucket": bucket, "compress": compress}


# the rank half of the tuning benches (the driver halves: kinds/overlap.py, bucket.py, compress.py)
TuningRank = timing.LoopRank(lambda backend, spec: BENCHES[spec.bench](backend, spec))
