"""The rank halves of the layer kinds: a TP block (LinearSpec) and a pipeline step (PipelineSpec), each
a bench or, with `check` set, its check alone. Every rank builds the same seeded full model and takes
its shard or stage, so each bench compares itself with that model once before timing (layers.check)."""
from __future__ import annotations

import copy
import functools
import time
from contextlib import nullcontext
from typing import Any

import torch
from torch import nn

from collectives import timing
from layers import pipeline
from layers.check import Check, dtype_name
from layers.mesh import Axis, ParallelDims
from layers.mesh import create_groups as _create_groups
from layers.schedules import SCHEDULES, stage_indices
from layers.tp import MLP, ColumnParallelLinear, CommTimer, ParallelMLP, dtensor_linear, dtensor_mlp
from schema.wire import LayerSpec, LinearSpec, PipelineResult, PipelineSpec, TpResult


@functools.cache
def groups_for(dims: ParallelDims, rank: int) -> dict:
    """Create each mesh's groups once per worker (every rank, same order) and reuse them."""
    return _create_groups(dims, rank)


@functools.cache
def tp_mesh(dims: ParallelDims, device_type: str):
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh(device_type, (dims.pp, dims.dp, dims.tp), mesh_dim_names=("pp", "dp", "tp"))["tp"]


def comm_counts(mode) -> dict[str, int]:
    """CommDebugMode's counts folded into plain names (c10d and functional collectives alike)."""
    out: dict[str, int] = {}
    for op, n in mode.get_comm_counts().items():
        name = str(op).lower()
        kind = next((k for k in ("all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "all_to_all",
                                 "broadcast") if k in name.replace("_base", "").replace("into_tensor", "")), name)
        key = {"allreduce": "all_reduce", "allgather": "all_gather"}.get(kind, kind)
        out[key] = out.get(key, 0) + n
    return out


def _setup(backend, spec):
    torch.manual_seed(spec.seed)
    dims = ParallelDims.fit(spec.tp, spec.pp, backend.world)
    groups = groups_for(dims, backend.rank)
    dtype = getattr(torch, spec.dtype)
    return dims, groups, dtype, backend.device.torch_device


def _parallel_block(spec, full, group, dims, device_type, timer):
    if spec.impl == "dtensor":
        mesh = tp_mesh(dims, device_type)
        return dtensor_linear(full.fc1, mesh, spec.sp) if spec.layer == "linear" else dtensor_mlp(full, mesh, spec.sp)
    if spec.layer == "linear":
        return ColumnParallelLinear(full.fc1, group, spec.sp, timer)
    return ParallelMLP(full, group, spec.sp, timer)


def stage_params(local: dict[int, nn.Module], ref_blocks):
    """(this rank's parameter, the single-rank model's) of every local stage; ref_blocks(idx): stage idx's blocks."""
    for idx, stage in local.items():
        for mine, ref in zip(stage.children(), ref_blocks(idx)):
            ref_params = dict(ref.named_parameters())
            for name, p in mine.named_parameters():
                yield p, ref_params[name]


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _shard_like(full: torch.Tensor, local: torch.Tensor, tp: int, tp_rank: int) -> torch.Tensor:
    """This tp rank's part of a full-model tensor, cut where the local one is tp times smaller
    (column-parallel weights by rows, row-parallel by columns); replicated ones whole."""
    for dim, (n_full, n_local) in enumerate(zip(full.shape, local.shape)):
        if n_full != n_local and n_local * tp == n_full:
            return full.chunk(tp, dim)[tp_rank]
    return full


def _reduce_length(modules: nn.Module, tokens: int, extra: int = 0) -> int:
    """n_reduce of layers.check for a block's outputs and gradients: every linear's in + out features,
    the tokens (weight-gradient sums) and `extra` (tp all-reduce terms, microbatches)."""
    return tokens + extra + sum(m.in_features + m.out_features for m in modules.modules() if isinstance(m, nn.Linear))


def _checked_block(backend, spec: LinearSpec, timer: CommTimer, watch=None):
    """This rank's TP block, checked once against its reference (the same seeded weights on one rank):
    output, input gradient and every weight-gradient shard; watch: contexts around its forward and backward."""
    dims, groups, dtype, device = _setup(backend, spec)
    full = MLP(spec.hidden).to(device=device, dtype=dtype)
    block = _parallel_block(spec, full, groups[Axis.TP], dims, backend.device.kind, timer)
    check = Check(dtype_name(dtype), corrupt=spec.corrupt)
    tp, tp_rank = dims.tp, dims.coords(backend.rank)[Axis.TP]
    linear, sp = spec.layer == "linear", spec.sp
    ref_block: Any = full.fc1 if linear else full   # nn.Linear or MLP
    x = torch.randn(spec.seq, spec.batch, spec.hidden, device=device, dtype=dtype)
    ref_in = x.clone().requires_grad_()
    ref_out = ref_block(ref_in)
    w = torch.randn_like(ref_out)
    (ref_out * w).sum().backward()

    def seq_shard(t):   # SP: activations between blocks are split along the sequence
        return t.chunk(tp, 0)[tp_rank] if sp else t
    out_shard = (lambda t: t.chunk(tp, -1)[tp_rank]) if linear else seq_shard   # a column-parallel output: by columns
    par_in = seq_shard(x).clone().requires_grad_()
    watch = watch or (nullcontext(), nullcontext())
    with watch[0]:
        y = _local(block(par_in))
    with watch[1]:
        (y * out_shard(w)).sum().backward()
    n = _reduce_length(ref_block, spec.seq * spec.batch, tp)
    check.compare(y, out_shard(ref_out), n)
    check.compare(par_in.grad, seq_shard(ref_in.grad), n)
    ref_grads = dict(ref_block.named_parameters())
    for name, p in block.named_parameters():
        g = _local(p.grad)
        check.compare(g, _shard_like(ref_grads[name].grad, g, tp, tp_rank), n)
    return dims, dtype, device, block, check


def tp_check(backend, spec: LinearSpec) -> dict:
    """The TP block against its single-rank reference (layers.check), with collective counts."""
    from torch.distributed.tensor.debug import CommDebugMode
    fwd, bwd = CommDebugMode(), CommDebugMode()
    check = _checked_block(backend, spec, CommTimer(), (fwd, bwd))[-1]
    return {**check.record(), "fwd": comm_counts(fwd), "bwd": comm_counts(bwd)}


def tp_loops(backend, spec: LinearSpec):
    """Forward, forward+backward and optimizer-step loops of a TP block and a plain matmul reference
    of the same per-rank GEMMs; `finish` adds the share of time in the block's collectives."""
    timer = CommTimer(backend.device.synchronize, on=False)   # on only in finish's extra run
    dims, dtype, device, block, check = _checked_block(backend, spec, timer)   # checked once, before any timing
    block.zero_grad(set_to_none=True)
    h, sp, tp = spec.hidden, spec.sp, dims.tp
    tokens = spec.seq * spec.batch
    x = torch.randn(spec.seq // tp if sp else spec.seq, spec.batch, h, device=device, dtype=dtype, requires_grad=True)
    opt = torch.optim.SGD(block.parameters(), lr=1e-6)
    gy = torch.randn(_local(block(x)).shape, device=device, dtype=dtype)

    def step():
        _local(block(x)).backward(gy)
        opt.step()
        opt.zero_grad(set_to_none=True)

    # the same per-rank GEMMs without any communication: fwd X.W^T, bwd dY.W and dY^T.X per layer
    shapes = [(tokens, h, 4 * h // tp)] if spec.layer == "linear" else [(tokens, h, 4 * h // tp), (tokens, 4 * h // tp, h)]
    mats = [(torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype),
             torch.randn(m, n, device=device, dtype=dtype)) for m, k, n in shapes]

    def matmul():
        for a, b, g in mats:
            torch.mm(a, b)
            torch.mm(g, b.t())
            torch.mm(a.t(), g)

    fwd_bwd = repeated(lambda: _local(block(x)).backward(gy))
    flops = sum(6 * m * k * n for m, k, n in shapes)  # fwd 2mkn + bwd 4mkn

    def finish(k, times):
        t_step, t_fwd, t_fb, t_mm = times
        share = timer.share(fwd_bwd, k, backend.device.timer())
        comm_share = share if spec.impl == "manual" else None
        return TpResult(iters=k, round_ns=t_step, fwd_ns=t_fwd, fwd_bwd_ns=t_fb, matmul_ns=t_mm,
                        flops_per_iter=flops, tokens_per_iter=tokens, comm_share=comm_share,
                        **rank_record(backend, check, block.parameters()))
    # the step first: K is calibrated on the first loop and each round's CPU wait read around it (collectives/timing.py)
    return [repeated(step), repeated(lambda: block(x)), fwd_bwd, repeated(matmul)], finish


def _checked_pipeline(backend, spec):
    """This rank's stages in the schedule, and one pipelined step checked against the same model run
    without a pipeline on the whole batch (losses summed over microbatches, scale_grads off): the loss
    on the rank holding the last stage and every local stage's weight gradients."""
    dims, groups, dtype, device = _setup(backend, spec)
    pp, v = dims.pp, SCHEDULES[spec.schedule][1]
    n = spec.layers or spec.pp * v   # the full model every rank builds alike: MLP blocks, or sleep-timed layers
    layers = ([pipeline.SleepLayer(spec.hidden, spec.fwd_s, spec.bwd_s) for _ in range(n)] if spec.model == "sleep"
              else [MLP(spec.hidden).to(device=device, dtype=dtype) for _ in range(n)])
    model, per = nn.Sequential(*layers), len(layers) // (pp * v)
    local = {}
    for idx in stage_indices(spec.schedule, dims.coords(backend.rank)[Axis.PP], pp):
        stage = copy.deepcopy(nn.Sequential(*layers[idx * per:(idx + 1) * per]))
        if dims.tp > 1 and spec.model != "sleep":
            stage = nn.Sequential(*[ParallelMLP(block, groups[Axis.TP]) for block in stage])
        local[idx] = stage
    sched = pipeline.build_schedule(spec.schedule, local, pp, spec.microbatches, groups[Axis.PP], torch.device(device))
    x = torch.randn(spec.batch, spec.seq, spec.hidden, device=device, dtype=dtype)
    target = torch.randn_like(x)
    last = pp * v - 1 in local
    step = functools.partial(pipeline.run_step, sched, x, target, 0 in local, last)
    check = Check(dtype_name(x.dtype), corrupt=spec.corrupt)
    losses = step()
    ref_loss = pipeline.summed_mse(model(x), target)
    ref_loss.backward()
    n = _reduce_length(model, spec.batch * spec.seq, dims.tp + spec.microbatches)
    if last:   # the loss also sums every output element
        check.compare(torch.stack([loss.detach() for loss in losses]).sum(), ref_loss.detach(), n + x.numel())
    for p, ref in stage_params(local, lambda idx: model[idx * per:(idx + 1) * per]):
        check.compare(p.grad, _shard_like(ref.grad, p.grad, dims.tp, dims.coords(backend.rank)[Axis.TP]), n)
    return local, x, step, check


def pp_check(backend, spec: PipelineSpec) -> dict:
    """One pipelined step against the model without a pipeline (layers.check), and the stages held."""
    local, _, _, check = _checked_pipeline(backend, spec)
    return {**check.record(), "stages": sorted(local)}


def pp_loops(backend, spec: PipelineSpec):
    """Step time of the schedule, and this rank's compute for one microbatch measured alone:
    bubble = 1 - m x compute / step."""
    local, x, step, check = _checked_pipeline(backend, spec)   # checked once, before any timing
    for stage in local.values():
        stage.zero_grad(set_to_none=True)
    mb = x.chunk(spec.microbatches, 0)[0]
    gy = torch.randn_like(mb)

    def pipeline_step():
        step()
        for stage in local.values():
            stage.zero_grad(set_to_none=True)

    def compute():  # every local stage, forward and backward, one microbatch, no communication
        for stage in local.values():
            stage(mb.detach().requires_grad_()).backward(gy)
            stage.zero_grad(set_to_none=True)

    def finish(k, times):
        t_step, t_compute = times
        return PipelineResult(iters=k, round_ns=t_step, compute_ns=t_compute, stages=sorted(local),
                              **rank_record(backend, check, (p for s in local.values() for p in s.parameters())))
    return [repeated(pipeline_step), repeated(compute)], finish


def rank_record(backend, check: Check, params) -> dict:
    """What every layer rank returns besides its times: its check's record, peak memory and local parameters."""
    return {**check.record(), "peak_memory_bytes": backend.device.peak_memory_bytes(),
            "params_local": sum(p.numel() for p in params)}


def repeated(call, cpu: list[float] | None = None):
    """A timed loop: loop(k) calls `call()` k times (with `cpu`, appends its CPU time per call there)."""
    def loop(k):
        c0 = time.process_time_ns()
        for _ in range(k):
            call()
        if cpu is not None:
            cpu.append((time.process_time_ns() - c0) / k)
    return loop


def _need_torch(backend) -> None:
    if not backend.info.layers:
        raise RuntimeError(f"layer benches need torch.distributed, not the {backend.name} backend ({backend.info.api})")
    backend.torch_world()


def torch_loops(build):
    """`build(backend, spec)` behind the torch check, with the peak memory counted from its loops on."""
    def loops(backend, spec):
        _need_torch(backend)
        made = build(backend, spec)
        backend.device.reset_peak_memory()
        return made
    return loops


class _LayerRank(timing.LoopRank):
    """A layer kind's rank half (the driver halves: kinds/linear.py, kinds/pipeline.py): its timed
    loops, or with `check` set on the spec the check alone (the tests'), its record a plain object."""

    def __init__(self, check, loops):
        super().__init__(torch_loops(loops))
        self.check = check

    def run(self, backend, spec: LayerSpec):
        if spec.check:
            _need_torch(backend)
            return self.check(backend, spec)
        return super().run(backend, spec)


LinearRank = _LayerRank(tp_check, tp_loops)
PipelineRank = _LayerRank(pp_check, pp_loops)
