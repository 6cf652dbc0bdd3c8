"""The rank halves of the layer kinds: a TP block (schema.wire.LinearSpec) and a pipeline step
(PipelineSpec), each a bench or, with `check` set, its correctness check alone.

Every rank builds the same full model from the same seed, then takes its shard or stage, so the
parallel result can be compared with the single-process one on the same rank: each bench does
so once before timing (layers.check: elements past the tolerance are its #wrong).
"""
from __future__ import annotations

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

_GROUPS: dict[ParallelDims, dict] = {}
_MESHES: dict[ParallelDims, Any] = {}   # torch DeviceMesh


def groups_for(dims: ParallelDims, rank: int) -> dict:
    """Create each mesh's groups once per worker (every rank, same order) and reuse them."""
    if dims not in _GROUPS:
        _GROUPS[dims] = _create_groups(dims, rank)
    return _GROUPS[dims]


def tp_mesh(dims: ParallelDims, device_type: str):
    from torch.distributed.device_mesh import init_device_mesh
    if dims not in _MESHES:
        _MESHES[dims] = init_device_mesh(device_type, (dims.pp, dims.dp, dims.tp), mesh_dim_names=("pp", "dp", "tp"))
    return _MESHES[dims]["tp"]


def comm_counts(mode) -> dict[str, int]:
    """CommDebugMode's counts folded into plain names (c10d and functional collectives alike)."""
    out: dict[str, int] = {}
    for op, n in mode.get_comm_counts().items():
        name = str(op).lower()
        for kind in ("all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "all_to_all", "broadcast"):
            if kind in name.replace("_base", "").replace("into_tensor", ""):
                key = {"allreduce": "all_reduce", "allgather": "all_gather"}.get(kind, kind)
                out[key] = out.get(key, 0) + n
                break
        else:
            out[name] = out.get(name, 0) + n
    return out


def _setup(backend, spec):
    torch.manual_seed(spec.seed)
    dims = ParallelDims.fit(spec.tp, spec.pp, backend.world)
    groups = groups_for(dims, backend.rank)
    dtype = getattr(torch, spec.dtype)
    return dims, groups, dtype, backend.device.torch_device


def _parallel_block(spec, full, group, dims, device_type, timer):
    sp = spec.sp
    if spec.impl == "dtensor":
        mesh = tp_mesh(dims, device_type)
        return dtensor_linear(full.fc1, mesh, sp) if spec.layer == "linear" else dtensor_mlp(full, mesh, sp)
    if spec.layer == "linear":
        return ColumnParallelLinear(full.fc1, group, sp, timer)
    return ParallelMLP(full, group, sp, timer)


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
    """n_reduce of layers.check for a block's outputs and gradients: every linear's in + out
    features (forward and input-gradient dot products), the tokens (weight-gradient sums), and
    `extra` (tp all-reduce terms, microbatches)."""
    return tokens + extra + sum(m.in_features + m.out_features for m in modules.modules() if isinstance(m, nn.Linear))


def _tp_compare(spec, full, block, tp: int, tp_rank: int, check: Check, watch=None) -> None:
    """One forward and backward of the parallel block and of its reference (the same seeded
    weights on one rank) on the same input and output gradient; the output, the input gradient
    and every weight gradient of this rank's shard go into `check`. watch: contexts around the
    parallel forward and backward (tp_check counts their collectives)."""
    linear, sp = spec.layer == "linear", spec.sp
    ref_block = full.fc1 if linear else full
    x = torch.randn(spec.seq, spec.batch, spec.hidden, device=full.fc1.weight.device, dtype=full.fc1.weight.dtype)
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


def tp_check(backend, spec: LinearSpec) -> dict:
    """The TP block against its single-rank reference (layers.check), with collective counts."""
    from torch.distributed.tensor.debug import CommDebugMode
    dims, groups, dtype, device = _setup(backend, spec)
    full = MLP(spec.hidden).to(device=device, dtype=dtype)
    block = _parallel_block(spec, full, groups[Axis.TP], dims, backend.device.kind, CommTimer())
    check = Check(dtype_name(dtype), corrupt=spec.corrupt)
    fwd, bwd = CommDebugMode(), CommDebugMode()
    _tp_compare(spec, full, block, dims.tp, dims.coords(backend.rank)[Axis.TP], check, (fwd, bwd))
    return {**check.record(), "fwd": comm_counts(fwd), "bwd": comm_counts(bwd)}


def tp_loops(backend, spec: LinearSpec):
    """Forward, forward+backward and optimizer-step loops of a TP block and a plain matmul reference
    of the same per-rank GEMMs; `finish` adds the share of time in the block's collectives."""
    dims, groups, dtype, device = _setup(backend, spec)
    h, sp, tp = spec.hidden, spec.sp, dims.tp
    tokens = spec.seq * spec.batch
    full = MLP(h).to(device=device, dtype=dtype)
    timer = CommTimer(backend.device.synchronize, on=False)   # on only in finish's extra run
    block = _parallel_block(spec, full, groups[Axis.TP], dims, backend.device.kind, timer)
    check = Check(dtype_name(dtype), corrupt=spec.corrupt)   # once, before any timing
    _tp_compare(spec, full, block, tp, dims.coords(backend.rank)[Axis.TP], check)
    block.zero_grad(set_to_none=True)
    del full
    seq_local = spec.seq // tp if sp else spec.seq
    x = torch.randn(seq_local, spec.batch, h, device=device, dtype=dtype, requires_grad=True)
    opt = torch.optim.SGD(block.parameters(), lr=1e-6)
    out_shape = _local(block(x)).shape
    gy = torch.randn(out_shape, device=device, dtype=dtype)

    def fwd(k):
        for _ in range(k):
            block(x)

    def fwd_bwd(k):
        for _ in range(k):
            _local(block(x)).backward(gy)

    def step(k):
        for _ in range(k):
            _local(block(x)).backward(gy)
            opt.step()
            opt.zero_grad(set_to_none=True)

    # the same per-rank GEMMs without any communication: fwd X.W^T, bwd dY.W and dY^T.X per layer
    shapes = [(tokens, h, 4 * h // tp)] if spec.layer == "linear" else [(tokens, h, 4 * h // tp), (tokens, 4 * h // tp, h)]
    mats = [(torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype),
             torch.randn(m, n, device=device, dtype=dtype)) for m, k, n in shapes]

    def matmul(k):
        for _ in range(k):
            for a, b, g in mats:
                torch.mm(a, b)
                torch.mm(g, b.t())
                torch.mm(a.t(), g)

    flops = sum(6 * m * k * n for m, k, n in shapes)  # fwd 2mkn + bwd 4mkn

    def finish(k, times):
        t_step, t_fwd, t_fb, t_mm = times
        share = timer.share(fwd_bwd, k, backend.device.timer())
        comm_share = share if spec.impl == "manual" else None
        return TpResult(iters=k, round_ns=t_step, fwd_ns=t_fwd, fwd_bwd_ns=t_fb, matmul_ns=t_mm,
                        flops_per_iter=flops, tokens_per_iter=tokens, comm_share=comm_share,
                        peak_memory_bytes=backend.device.peak_memory_bytes(), **check.record(),
                        params_local=sum(p.numel() for p in block.parameters()))
    # the step first: K is calibrated on the first loop and each round's CPU wait read around it (collectives/timing.py)
    return [step, fwd, fwd_bwd, matmul], finish


def _model_layers(spec, dtype, device):
    """The full model every rank builds identically: MLP blocks, or sleep-timed layers for bubble tests."""
    v = SCHEDULES[spec.schedule][1]
    n = spec.layers or spec.pp * v
    if spec.model == "sleep":
        return [pipeline.SleepLayer(spec.hidden, spec.fwd_s, spec.bwd_s) for _ in range(n)]
    return [MLP(spec.hidden).to(device=device, dtype=dtype) for _ in range(n)]


def _pipeline(backend, spec):
    dims, groups, dtype, device = _setup(backend, spec)
    pp, v = dims.pp, SCHEDULES[spec.schedule][1]
    pp_rank = dims.coords(backend.rank)[Axis.PP]
    layers = _model_layers(spec, dtype, device)
    reference = [nn.Sequential(*layers)]
    import copy
    local = {}
    for idx in stage_indices(spec.schedule, pp_rank, pp):
        stage = copy.deepcopy(pipeline.split_layers(layers, pp * v, idx))
        if dims.tp > 1 and spec.model != "sleep":
            stage = nn.Sequential(*[ParallelMLP(block, groups[Axis.TP]) for block in stage])
        local[idx] = stage
    sched = pipeline.build_schedule(spec.schedule, local, pp, spec.microbatches, groups[Axis.PP], torch.device(device))
    x = torch.randn(spec.batch, spec.seq, spec.hidden, device=device, dtype=dtype)
    target = torch.randn_like(x)
    first = 0 in local
    last = pp * v - 1 in local

    def step():
        losses = []
        kwargs = {"target": target, "losses": losses} if last else {}
        sched.step(x, **kwargs) if first else sched.step(**kwargs)
        return losses
    return dims, local, reference[0], x, target, step, first, last


def _pp_compare(spec, dims, tp_rank, local, model, x, target, step, last, check: Check) -> None:
    """One pipelined step against the same model run without a pipeline on the whole batch (the
    losses summed over microbatches, gradients accumulated, scale_grads off): the loss on the rank
    holding the last stage and every local stage's weight gradients go into `check`."""
    losses = step()
    ref_loss = pipeline.summed_mse(model(x), target)
    ref_loss.backward()
    m, tokens = spec.microbatches, spec.batch * spec.seq
    n = _reduce_length(model, tokens, dims.tp + m)
    if last:   # the loss also sums every output element
        check.compare(torch.stack([loss.detach() for loss in losses]).sum(), ref_loss.detach(), n + x.numel())
    per = len(model) // (dims.pp * SCHEDULES[spec.schedule][1])
    for idx, stage in local.items():
        for mine, ref in zip(stage, model[idx * per:(idx + 1) * per]):
            ref_grads = dict(ref.named_parameters())
            for name, p in mine.named_parameters():
                check.compare(p.grad, _shard_like(ref_grads[name].grad, p.grad, dims.tp, tp_rank), n)


def pp_check(backend, spec: PipelineSpec) -> dict:
    """One pipelined step against the model without a pipeline (layers.check), and the stages held."""
    dims, local, model, x, target, step, _, last = _pipeline(backend, spec)
    check = Check(dtype_name(x.dtype), corrupt=spec.corrupt)
    _pp_compare(spec, dims, dims.coords(backend.rank)[Axis.TP], local, model, x, target, step, last, check)
    return {**check.record(), "stages": sorted(local)}


def pp_loops(backend, spec: PipelineSpec):
    """Step time of the schedule, and this rank's compute for one microbatch measured alone:
    bubble = 1 - m x compute / step."""
    dims, local, model, x, target, step, _, last = _pipeline(backend, spec)
    check = Check(dtype_name(x.dtype), corrupt=spec.corrupt)   # once, before any timing
    _pp_compare(spec, dims, dims.coords(backend.rank)[Axis.TP], local, model, x, target, step, last, check)
    for stage in local.values():
        stage.zero_grad(set_to_none=True)
    del model
    m = spec.microbatches
    mb = x.chunk(m, 0)[0]
    gy = torch.randn_like(mb)

    def pipeline_loop(k):
        for _ in range(k):
            step()
            for stage in local.values():
                stage.zero_grad(set_to_none=True)

    def compute_loop(k):  # every local stage, forward and backward, one microbatch, no communication
        for _ in range(k):
            for stage in local.values():
                stage(mb.detach().requires_grad_()).backward(gy)
                stage.zero_grad(set_to_none=True)

    def finish(k, times):
        t_step, t_compute = times
        return PipelineResult(iters=k, round_ns=t_step, compute_ns=t_compute, **check.record(), stages=sorted(local),
                              peak_memory_bytes=backend.device.peak_memory_bytes(),
                              params_local=sum(p.numel() for s in local.values() for p in s.parameters()))
    return [pipeline_loop, compute_loop], finish


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
