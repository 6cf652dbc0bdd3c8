"""Runs the hybrid step on one rank, checks it once against the same seeded blocks on one rank
(layers.check) and times it and its parts: docs/layers.md (`test_hybrid`, What each figure is)."""
from __future__ import annotations

import contextlib
import copy
import os
import time

import torch
import torch.distributed as dist
from torch import nn

from collectives import timing
from collectives.device import machine_id
from layers import pipeline
from layers.check import UNIT_ROUNDOFF, Check, dtype_name, grad_of
from layers.expert import generator
from layers.hybrid import GradBuckets, PartTimer, SequenceParallelMLP
from layers.mesh import Axis, ParallelDims
from layers.rank_tasks import _reduce_length, _shard_like, groups_for, rank_record, repeated, stage_params, torch_loops
from layers.schedules import SCHEDULES, chunks, stage_indices, validate
from layers.tp import MLP, ParallelMLP
from schema.stats import median
from schema.wire import HybridResult, HybridSpec


def refusal(spec: HybridSpec, world: int) -> str:
    """Why the step cannot run this spec ('' if it can): alike on every rank, before any collective."""
    if spec.tp * spec.pp * spec.dp != world:
        return f"tp x pp x dp = {spec.tp} x {spec.pp} x {spec.dp} does not equal the world size {world}"
    if spec.hidden % spec.tp:
        return f"hidden {spec.hidden} is not divisible by tp {spec.tp}"
    if spec.batch % spec.microbatches:
        return f"batch {spec.batch} does not split into {spec.microbatches} microbatches"
    if spec.grad_reduce != "float32" and spec.dp == 1:
        return "a bfloat16 gradient reduction needs dp > 1 (there is no reduction at dp = 1)"
    if spec.distributed_optimizer and spec.dp == 1:
        return "the distributed optimizer shards over dp: it needs dp > 1"
    if spec.sequence_parallel and (spec.tp == 1 or spec.seq % spec.tp):
        return f"sequence parallelism splits the sequence ({spec.seq}) over tp ({spec.tp}): it needs tp > 1 dividing it"
    if spec.vpp and (spec.pp == 1 or not spec.schedule.startswith("interleaved")):
        return "a virtual pipeline size needs pp > 1 and an interleaved schedule"
    if spec.pp == 1:
        return ""
    if "ZeroBubble" in SCHEDULES.get(spec.schedule, ("",))[0]:
        return f"{spec.schedule} computes weight gradients outside autograd's accumulation, which the dp buckets hook"
    return validate(spec.schedule, spec.pp, spec.microbatches, spec.layers, spec.vpp) or ""


LR = 1e-6


@contextlib.contextmanager
def timed_p2p(timer: PartTimer, moved: list[int]):
    """torch.distributed.pipelining's sends and receives timed (posting and waiting) and their bytes
    added to moved[0]: every schedule of torch 2.x posts through schedules._batch_p2p and waits
    through schedules._wait_batch_p2p, looked up by name at each call."""
    from torch.distributed.pipelining import schedules as lib
    post, wait = lib._batch_p2p, lib._wait_batch_p2p

    def timed_post(p2p_ops: list[dist.P2POp], desc: str | None = None) -> list[dist.Work]:
        moved[0] += sum(op.tensor.numel() * op.tensor.element_size() for op in p2p_ops)
        return timer.run(lambda: post(p2p_ops, desc))
    lib._batch_p2p, lib._wait_batch_p2p = timed_post, lambda work: timer.run(lambda: wait(work))
    try:
        yield
    finally:
        lib._batch_p2p, lib._wait_batch_p2p = post, wait


class _Step:
    """This rank's part of the model and one training step of it (module docstring)."""

    def __init__(self, backend, spec: HybridSpec):
        if why := refusal(spec, backend.world):
            raise ValueError(why)
        torch.manual_seed(spec.seed)
        self.spec, self.m = spec, spec.microbatches
        dims = ParallelDims(spec.tp, spec.pp, spec.dp, backend.world)
        groups = groups_for(dims, backend.rank)
        coords = dims.coords(backend.rank)
        self.tp_rank, self.replica = coords[Axis.TP], coords[Axis.DP]
        self.device, self.dtype = backend.device.torch_device, getattr(torch, spec.dtype)
        self.blocks = [MLP(spec.hidden).to(device=self.device, dtype=self.dtype) for _ in range(spec.layers)]
        mod = backend.device._mod   # torch.cuda / torch.npu; None on CPU
        self.timer = PartTimer(mod, own_stream=True)   # the tp collectives; on only in the extra timed run
        self.p2p_timer, self.dp_timer = PartTimer(mod), PartTimer(mod)
        v = chunks(spec.schedule, spec.vpp) if spec.pp > 1 else 1
        self.per = spec.layers // (spec.pp * v)
        indices = stage_indices(spec.schedule, coords[Axis.PP], spec.pp, spec.vpp) if spec.pp > 1 else [0]
        self.local: dict[int, nn.Module] = {
            idx: nn.Sequential(*[self.parallel(b, groups[Axis.TP]) for b in self.stage_blocks(idx)]) for idx in indices}
        self.first, self.last = 0 in self.local, spec.pp * v - 1 in self.local
        # this tp rank's part of the sequence under sequence parallelism (the whole one without)
        n = spec.seq // spec.tp if spec.sequence_parallel else spec.seq
        self.seq_part = slice(self.tp_rank * n, (self.tp_rank + 1) * n) if spec.sequence_parallel else slice(None)
        self.x, self.target = (t[:, self.seq_part].contiguous() for t in self.inputs(self.replica))
        self.sync = backend.device.synchronize
        self.params = [p for stage in self.local.values() for p in stage.parameters()]
        self.pp_group = groups[Axis.PP]
        self.buckets = (GradBuckets(self.params, groups[Axis.DP], spec.bucket_bytes, self.m, spec.distributed_optimizer,
                                    getattr(torch, spec.grad_reduce)) if spec.dp > 1 else None)
        self.opt = torch.optim.SGD(self.params, lr=LR)
        self.sched = (pipeline.build_schedule(spec.schedule, self.local, spec.pp, self.m, groups[Axis.PP],
                                              torch.device(self.device), spec.vpp) if spec.pp > 1 else None)

    def parallel(self, block: MLP, group) -> nn.Module:
        """A block of the single-rank model as this rank runs it: tensor-parallel (with sequence parallelism) or a copy."""
        if self.spec.tp == 1:
            return copy.deepcopy(block)
        if self.spec.sequence_parallel:
            return SequenceParallelMLP(block, group, self.timer)
        return ParallelMLP(block, group, False, self.timer)

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
        if self.sched is not None:
            return pipeline.run_step(self.sched, self.x, self.target, self.first, self.last)
        losses: list[torch.Tensor] = []
        for xm, tm in zip(self.x.chunk(self.m), self.target.chunk(self.m)):
            loss = pipeline.summed_mse(self.local[0](xm), tm)
            loss.backward()
            losses.append(loss)
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
            self.dp_timer.run(self.finish_reduction)
        else:
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return losses

    def finish_reduction(self) -> None:
        """The dp reduction's end and the SGD step: wait for the buckets, then the optimizer (the
        distributed one: SGD on this rank's shard and the all_gather of the weights)."""
        assert self.buckets is not None
        self.buckets.finish()
        if self.buckets.distributed:
            self.buckets.sgd_step(LR)
        else:
            self.opt.step()

    def compare(self, check: Check) -> None:
        """One step's loss and gradients (before the SGD step) against the single-rank model."""
        if self.buckets:
            self.buckets.on = True
        losses = self.forward_backward()
        if self.buckets:
            self.buckets.finish()
        spec = self.spec
        model = nn.Sequential(*self.blocks)
        pairs = [(model(x), t) for x, t in map(self.inputs, range(spec.dp))]
        (sum(pipeline.summed_mse(y, t) for y, t in pairs) / spec.dp).backward()   # DDP averages the replicas' gradients
        # the loss this rank sums: its replica's, over its part of the sequence under sequence parallelism
        ref_losses = [pipeline.summed_mse(y[:, self.seq_part], t[:, self.seq_part]) for y, t in pairs]
        n = _reduce_length(model, spec.dp * spec.batch * spec.seq, spec.tp + self.m + spec.dp)
        if self.last:   # the loss also sums every output element
            check.compare(torch.stack([loss.detach() for loss in losses]).sum(), ref_losses[self.replica].detach(),
                          n + self.x.numel())
        # a bfloat16 reduction rounds each gradient to bfloat16 and sums dp of them there: that
        # rounding in float32 units (layers.check's n_reduce counts unit roundoffs of the block's dtype)
        n_grad = n + (spec.dp + 1) * round(UNIT_ROUNDOFF[spec.grad_reduce] / UNIT_ROUNDOFF[spec.dtype])
        refs = {id(p): _shard_like(grad_of(ref), grad_of(p), spec.tp, self.tp_rank)   # parameter id -> this rank's shard
                for p, ref in stage_params(self.local, self.stage_blocks)}
        if self.buckets and self.buckets.distributed:
            self._compare_distributed(self.buckets, check, refs, n_grad)
        else:
            for p in self.params:
                check.compare(grad_of(p), refs[id(p)], n_grad)
        self.opt.zero_grad(set_to_none=True)

    @staticmethod
    def _compare_distributed(b_: GradBuckets, check: Check, refs: dict[int, torch.Tensor], n_grad: int) -> None:
        """The distributed optimizer: this rank's shard of each bucket against the reference gradients,
        then every weight after its step's all_gather against weight - lr x reference gradient."""
        before = [p.detach().clone() for p in b_.params]
        for b in range(len(b_.plan)):
            ref = torch.cat([refs[id(b_.params[i])].reshape(-1) for i in b_.plan[b]])
            ref = torch.cat([ref, ref.new_zeros(b_.flats[b].numel() - ref.numel())])   # the bucket's padding
            lo, hi = b_.shard_range(b)
            check.compare(b_.shards[b], ref[lo:hi], n_grad)
        b_.sgd_step(LR)
        for p, w in zip(b_.params, before):
            check.compare(p.detach(), w - LR * refs[id(p)].to(w.dtype), n_grad)

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

    def exchange_seconds(self, k: int) -> tuple[float, int]:
        """One microbatch's activation sent to the next stage and received from the previous one around
        the pp ring, every stage ready (a barrier first): seconds per exchange, bytes each way."""
        pp, me = dist.get_world_size(self.pp_group), dist.get_rank(self.pp_group)
        nxt, prev = (dist.get_global_rank(self.pp_group, (me + d) % pp) for d in (1, -1))
        msg = self.x.chunk(self.m)[0].contiguous()
        got = torch.empty_like(msg)
        total = 0.0
        for _ in range(k + 1):   # the first one warms the pairs up
            dist.barrier(group=self.pp_group)
            t0 = time.perf_counter()
            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, msg, nxt, self.pp_group),
                                             dist.P2POp(dist.irecv, got, prev, self.pp_group)]):
                w.wait()
            self.sync()
            total += (time.perf_counter() - t0) if _ else 0.0
        return total / k, msg.numel() * msg.element_size()


def matmul_rate(step: _Step, seconds: float = 0.05) -> float:
    """FLOP/s of this rank's block matmul alone (a microbatch's tokens x hidden by hidden x 4 hidden,
    in the block's dtype): the peak MFU is taken against on a CPU when none is given (kinds/hybrid.py)."""
    h = step.spec.hidden
    a = torch.randn(step.x[0:max(step.spec.batch // step.m, 1)].reshape(-1, h).shape, dtype=step.dtype, device=step.device)
    b = torch.randn(h, 4 * h, dtype=step.dtype, device=step.device)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        n += 1
    step.sync()
    return 2 * a.shape[0] * h * 4 * h * n / (time.perf_counter() - t0)


def hybrid_loops(backend, spec: HybridSpec):
    """The timed loops (step, step without dp when dp > 1, compute alone) and how to finish them."""
    step = _Step(backend, spec)
    check = Check(dtype_name(step.dtype), corrupt=spec.corrupt)   # once, before any timing
    step.compare(check)
    del step.blocks   # the single-rank model: no longer needed

    cpu_ns: list[float] = []   # CPU time per step of the loop without tp and dp, per call (warm-up and K's
    # calibration first, the rounds last: finish reads the rounds')
    timed = {"step": step.train, **({"nodp": lambda: step.train(reduce=False)} if step.buckets else {}),
             **({"notp": lambda: step.train(reduce=False, tp=False)} if spec.tp > 1 else {}), "compute": step.compute}
    names = list(timed)
    notp_role = "notp" if "notp" in timed else "nodp" if "nodp" in timed else "step"
    loops = [repeated(call, cpu_ns if name == notp_role else None) for name, call in timed.items()]

    def finish(k, times):
        """The extra run: K steps with each part timed on its own (module docstring)."""
        moved = [0]
        for t in (step.timer, step.p2p_timer, step.dp_timer):
            t.reset()
            t.on = True
        device_timer, wall = backend.device.timer(), 0
        with timed_p2p(step.p2p_timer, moved):
            for _ in range(k):
                device_timer.start()
                step.train()
                wall += device_timer.stop()
        for t in (step.timer, step.p2p_timer, step.dp_timer):
            t.on = False
        exchange, msg_bytes = step.exchange_seconds(k) if spec.pp > 1 else (0.0, 0)
        got = dict(zip(names, times))
        got.setdefault("nodp", got["step"])
        got.setdefault("notp", got["nodp"])
        return HybridResult(iters=k, round_ns=got["step"], nodp_ns=got["nodp"], notp_ns=got["notp"], compute_ns=got["compute"],
                    tp_ns=step.timer.total() / k * 1e9, p2p_ns=step.p2p_timer.total() / k * 1e9,
                    p2p_bytes=moved[0] // k, exchange_ns=exchange * 1e9, exchange_bytes=msg_bytes,
                    dp_ns=step.dp_timer.total() / k * 1e9, timed_step_ns=wall / k, **rank_record(backend, check, step.params),
                    stages=sorted(step.local), buckets=len(step.buckets.plan) if step.buckets else 0,
                    cpus=sorted(os.sched_getaffinity(0)), machine=machine_id(), device_name=backend.device.name(),
                    cpu_notp_ns=median(cpu_ns[-len(times[0]):]) if cpu_ns else 0.0,
                    dp_bytes=step.buckets.nbytes if step.buckets else 0, matmul_flops=matmul_rate(step))
    return loops, finish


# the rank half of the hybrid step; the driver half (kinds/hybrid.py) sends the spec and makes the row
HybridRank = timing.LoopRank(torch_loops(hybrid_loops))
