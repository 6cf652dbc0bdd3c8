"""Runs the hybrid step on one rank: `layers` MLP blocks (layers.tp.MLP) on tp x pp x dp ranks of one
group, placed as Megatron places them (layers.mesh: tp fastest, then dp, then pp). Each dp replica
trains `batch` sequences of its own in `microbatches` microbatches: through a
torch.distributed.pipelining schedule over its pp stages (pp > 1), or one after the other (pp = 1,
gradient accumulation); blocks are tensor-parallel (Megatron's f/g, layers.tp.ParallelMLP) at
tp > 1; the dp gradient all_reduce is bucketed and overlapped with backward (layers.hybrid.GradBuckets);
then an SGD step.

Checked once against the same seeded blocks on one rank (layers.check): every replica's batch
through the whole model, the loss averaged over replicas as DDP averages gradients; the loss of
this replica (on its last stage) and every local gradient shard go into the check.

Timed (collectives.timing, one K, the loops interleaved round by round): the step (round_ns),
the step with the dp reduction off (nodp_ns; dp = 1: the step itself), the step with the dp
reduction off and the tp collectives left out too (notp_ns; tp = 1: nodp; values then differ, only
the time counts; its process CPU time per step beside it, cpu_notp_ns: on a machine with more ranks
than cores, the machine's CPU work bounds the step), and this rank's compute alone (compute_ns: its
stages' forward and backward of every microbatch and the SGD step, no pipeline, no collective).
One extra run of K steps times, per step, the time inside the tp collectives (tp_ns, device synchronised around each: it includes
waiting for the group's slowest rank) and the wait for the dp buckets at the end (dp_wait_ns). The
driver (kinds/hybrid.py) makes the breakdown from these. The result is a plain dict (the rank code cannot import kinds/, where its
type is declared), checked there.
"""
from __future__ import annotations

import copy
import os
import statistics
import time
from typing import Any

import torch
from torch import nn

from collectives import timing
from collectives.device import machine_id
from layers import pipeline
from layers.check import Check, dtype_name
from layers.expert import generator
from layers.expert_tasks import _grad
from layers.hybrid import GradBuckets, SkippableTimer
from layers.mesh import Axis, ParallelDims
from layers.rank_tasks import _reduce_length, _shard_like, groups_for, torch_loops
from layers.schedules import SCHEDULES, stage_indices, validate
from layers.tp import MLP, ParallelMLP


def refusal(spec: Any, world: int) -> str:
    """Why the step cannot run this spec ('' if it can): alike on every rank, before any collective."""
    if spec.tp * spec.pp * spec.dp != world:
        return f"tp x pp x dp = {spec.tp} x {spec.pp} x {spec.dp} does not equal the world size {world}"
    if spec.hidden % spec.tp:
        return f"hidden {spec.hidden} is not divisible by tp {spec.tp}"
    if spec.batch % spec.microbatches:
        return f"batch {spec.batch} does not split into {spec.microbatches} microbatches"
    if spec.pp == 1:
        return ""
    if "ZeroBubble" in SCHEDULES.get(spec.schedule, ("",))[0]:
        return f"{spec.schedule} computes weight gradients outside autograd's accumulation, which the dp buckets hook"
    return validate(spec.schedule, spec.pp, spec.microbatches, spec.layers) or ""


class _Step:
    """This rank's part of the model and one training step of it (module docstring)."""

    def __init__(self, backend, spec: Any):
        if why := refusal(spec, backend.world):
            raise ValueError(why)
        torch.manual_seed(spec.seed)
        self.spec, self.m = spec, spec.microbatches
        dims = ParallelDims(spec.tp, spec.pp, spec.dp, backend.world)
        groups = groups_for(dims, backend.rank)
        coords = dims.coords(backend.rank)
        self.dims, self.tp_rank, self.replica = dims, coords[Axis.TP], coords[Axis.DP]
        self.device, self.dtype = backend.device.torch_device, getattr(torch, spec.dtype)
        self.blocks = [MLP(spec.hidden).to(device=self.device, dtype=self.dtype) for _ in range(spec.layers)]
        self.timer = SkippableTimer(backend.device.synchronize, on=False)   # on only in the extra timed run
        v = SCHEDULES[spec.schedule][1] if spec.pp > 1 else 1
        self.per = spec.layers // (spec.pp * v)
        indices = stage_indices(spec.schedule, coords[Axis.PP], spec.pp) if spec.pp > 1 else [0]
        self.local: dict[int, nn.Module] = {}
        for idx in indices:
            blocks = self.stage_blocks(idx)
            self.local[idx] = nn.Sequential(*[ParallelMLP(b, groups[Axis.TP], False, self.timer) if spec.tp > 1
                                              else copy.deepcopy(b) for b in blocks])
        self.first, self.last = 0 in self.local, spec.pp * v - 1 in self.local
        self.x, self.target = self.inputs(self.replica)
        params = [p for stage in self.local.values() for p in stage.parameters()]
        self.buckets = GradBuckets(params, groups[Axis.DP], spec.bucket_bytes, self.m) if spec.dp > 1 else None
        self.opt = torch.optim.SGD(params, lr=1e-6)
        self.sched = (pipeline.build_schedule(spec.schedule, self.local, spec.pp, self.m, groups[Axis.PP],
                                              torch.device(self.device)) if spec.pp > 1 else None)

    def stage_blocks(self, idx: int) -> list[MLP]:
        """The blocks of stage `idx` of the single-rank model."""
        return self.blocks[idx * self.per:(idx + 1) * self.per]

    def inputs(self, replica: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A replica's batch and target: any rank can make any replica's."""
        shape = (self.spec.batch, self.spec.seq, self.spec.hidden)
        return tuple(torch.randn(shape, generator=generator(self.spec.seed + i, replica)).to(self.device, self.dtype)
                     for i in (1, 2))   # type: ignore[return-value]

    def forward_backward(self) -> list[torch.Tensor]:
        """Every microbatch's forward and backward (its loss where this rank holds the last stage)."""
        losses: list[torch.Tensor] = []
        if self.sched is None:
            for xm, tm in zip(self.x.chunk(self.m), self.target.chunk(self.m)):
                loss = pipeline.summed_mse(self.local[0](xm), tm)
                loss.backward()
                losses.append(loss)
            return losses
        kwargs = {"target": self.target, "losses": losses} if self.last else {}
        self.sched.step(self.x, **kwargs) if self.first else self.sched.step(**kwargs)
        return losses

    def train(self, reduce: bool = True, tp: bool = True) -> list[torch.Tensor]:
        """One step: forward and backward (the dp buckets' all_reduces started in it), their wait, SGD;
        reduce=False leaves the dp reduction out, tp=False the tp collectives (a timing-only step)."""
        if self.buckets:
            self.buckets.on = reduce
        self.timer.skip = not tp
        losses = self.forward_backward()
        self.timer.skip = False
        if self.buckets and reduce:
            self.buckets.finish()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return losses

    def compare(self, check: Check) -> None:
        """One step's loss and gradients (before the SGD step) against the single-rank model."""
        if self.buckets:
            self.buckets.on = True
        losses = self.forward_backward()
        if self.buckets:
            self.buckets.finish()
        spec = self.spec
        model = nn.Sequential(*self.blocks)
        ref_losses = [pipeline.summed_mse(model(x), t) for x, t in map(self.inputs, range(spec.dp))]
        (sum(ref_losses) / spec.dp).backward()   # DDP averages the replicas' gradients
        n = _reduce_length(model, spec.dp * spec.batch * spec.seq, spec.tp + self.m + spec.dp)
        if self.last:   # the loss also sums every output element
            check.compare(torch.stack([loss.detach() for loss in losses]).sum(), ref_losses[self.replica].detach(),
                          n + self.x.numel())
        for idx, stage in self.local.items():
            for mine, ref in zip(stage.children(), self.stage_blocks(idx)):
                ref_grads = dict(ref.named_parameters())
                for name, p in mine.named_parameters():
                    check.compare(_grad(p), _shard_like(_grad(ref_grads[name]), _grad(p), spec.tp, self.tp_rank), n)
        self.opt.zero_grad(set_to_none=True)

    def compute(self) -> None:
        """This rank's stages, forward and backward of every microbatch, and SGD: no pipeline, no tp or dp collective."""
        if self.buckets:
            self.buckets.on = False
        self.timer.skip = True
        mb = self.x.chunk(self.m)[0]
        gy = torch.randn_like(mb)
        for idx, stage in self.local.items():
            for _ in range(self.m):
                stage(mb.detach().requires_grad_(idx > 0)).backward(gy)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.timer.skip = False


def hybrid_loops(backend, spec: Any):
    """The timed loops (step, step without dp when dp > 1, compute alone) and how to finish them."""
    step = _Step(backend, spec)
    check = Check(dtype_name(step.dtype), corrupt=spec.corrupt)   # once, before any timing
    step.compare(check)
    del step.blocks   # the single-rank model: no longer needed
    sync = backend.device.synchronize

    cpu_ns: list[float] = []   # CPU time per step of the loop without tp and dp, per call (warm-up and K's
    # calibration first, the rounds last: finish reads the rounds')

    def loop(call, cpu=None):
        def run(k):
            c0 = time.process_time_ns()
            for _ in range(k):
                call()
            if cpu is not None:
                cpu.append((time.process_time_ns() - c0) / k)
        return run
    timed = {"step": step.train, "nodp": lambda: step.train(reduce=False),
             "notp": lambda: step.train(reduce=False, tp=False), "compute": step.compute}
    if not step.buckets:
        del timed["nodp"]
    if spec.tp == 1:
        del timed["notp"]
    names = list(timed)
    notp_role = "notp" if "notp" in timed else "nodp" if "nodp" in timed else "step"
    loops = [loop(call, cpu_ns if name == notp_role else None) for name, call in timed.items()]

    def finish(k, times):
        """The extra run: K steps with the tp collectives and the dp wait timed."""
        step.timer.seconds, step.timer.on, waited = 0.0, True, 0.0
        for _ in range(k):
            if step.buckets:
                step.buckets.on = True
            step.forward_backward()
            if step.buckets:
                sync()
                t0 = time.perf_counter()
                step.buckets.finish()
                sync()
                waited += time.perf_counter() - t0
            step.opt.step()
            step.opt.zero_grad(set_to_none=True)
        step.timer.on = False
        params = [p for stage in step.local.values() for p in stage.parameters()]
        # the fields of kinds/hybrid.py's HybridResult, which the driver checks this object against
        got = dict(zip(names, times))
        got.setdefault("nodp", got["step"])
        got.setdefault("notp", got["nodp"])
        return dict(iters=k, round_ns=got["step"], nodp_ns=got["nodp"], notp_ns=got["notp"], compute_ns=got["compute"],
                    tp_ns=step.timer.seconds / k * 1e9, dp_wait_ns=waited / k * 1e9, **check.record(),
                    peak_memory_bytes=backend.device.peak_memory_bytes(), params_local=sum(p.numel() for p in params),
                    stages=sorted(step.local), buckets=len(step.buckets.plan) if step.buckets else 0,
                    cpus=sorted(os.sched_getaffinity(0)), machine=machine_id(),
                    cpu_notp_ns=float(statistics.median(cpu_ns[-len(times[0]):])) if cpu_ns else 0.0,
                    dp_bytes=step.buckets.nbytes if step.buckets else 0)
    return loops, finish


# the rank half of the hybrid step; the driver half (kinds/hybrid.py) sends the spec and makes the row
HybridRank = timing.LoopRank(torch_loops(hybrid_loops))
