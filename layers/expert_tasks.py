"""Runs the expert-parallel bench on one rank (layers.expert): checked once against the same seeded
layer on one rank (layers.check), then timed as the others (collectives.timing). What each figure
is: docs/layers.md (`test_expert`, What a rank returns). The spec is duck-typed."""
from __future__ import annotations

import functools

import torch
import torch.distributed as dist
from torch import nn

from collectives import timing
from collectives.backends.hccl import hccl_product
from layers import expert, fused_moe
from layers.check import Check, dtype_name, grad_of
from layers.mesh import Axis, ParallelDims
from layers.rank_tasks import _reduce_length, groups_for, rank_record, torch_loops
from layers.tp import CommTimer
from schema.wire import ExpertResult, ExpertSpec

UNEVEN_ALLGATHER = ("routing uneven: the all-gather dispatcher gathers equal shapes (Megatron's pads or splits them): "
                    "use alltoallv")
DISPATCHERS = {"alltoallv": expert.AllToAllV, "allgather": expert.AllGather, "fused": expert.Fused}


def _validate(spec: ExpertSpec, world: int) -> None:
    """Refuse, alike on every rank and before any collective, a spec the layer cannot run."""
    if spec.impl not in DISPATCHERS:
        raise ValueError(f"unknown impl {spec.impl!r}: one of {', '.join(DISPATCHERS)}")
    if spec.routing not in expert.ROUTINGS:
        raise ValueError(f"unknown routing {spec.routing!r}: one of {', '.join(expert.ROUTINGS)}")
    if spec.ep < 1 or world % spec.ep:
        raise ValueError(f"ep {spec.ep} does not divide the world size {world}")
    if spec.experts % spec.ep:
        raise ValueError(f"experts {spec.experts} are not divisible by ep {spec.ep}")
    if not 1 <= spec.topk <= 8:
        raise ValueError(f"topk must be 1-8, got {spec.topk}")
    if _drop(spec)[0] not in expert.DROP_POLICIES:
        raise ValueError(f"unknown drop policy {_drop(spec)[0]!r}: one of {', '.join(expert.DROP_POLICIES)}")
    if spec.routing == "uneven" and spec.impl == "allgather":
        raise ValueError(UNEVEN_ALLGATHER)


@functools.cache
def fused_group(ep: int, world: int, rank: int):
    """The ep group the fused ops use alone (op-plugin: no other operator on their EP group), made once
    per ep size on every rank in the same order (why apart from the mesh groups: docs/tuning.md)."""
    made = [dist.new_group(list(range(first, first + ep))) for first in range(0, world, ep)]
    return made[rank // ep]


def fused_refusal(spec: ExpertSpec, chip: str, ranks: list[int]) -> str:
    """Why the fused ops cannot run this spec on `chip` (layers.fused_moe, op-plugin's documented limits),
    judged on the ids every rank of the group will send (a token must not name one expert twice)."""
    ids = [_choices(spec, r) for r in ranks]
    distinct, masked = all(expert.distinct_rows(i) for i in ids), any(bool((i < 0).any()) for i in ids)
    return fused_moe.refusal(chip, ep=spec.ep, experts=spec.experts, topk=spec.topk, hidden=spec.hidden,
                             tokens=max(len(i) for i in ids), dtype=spec.dtype, distinct=distinct, masked=masked,
                             capacity_factor=spec.capacity_factor, buffsize=fused_moe.buffsize_mb())


def _choices(spec: ExpertSpec, rank: int) -> torch.Tensor:
    """Rank `rank`'s expert ids (no tokens made: the fused limits are judged on every rank's ids)."""
    t = expert.tokens_of(spec.routing, spec.tokens, spec.hot_share, rank % spec.ep, spec.ep)
    return expert.choices(spec.routing, t, spec.topk, spec.experts, rank, spec.seed, spec.hot_share, spec.expert_ids,
                          spec.experts // spec.ep)


def _inputs(spec: ExpertSpec, rank: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rank `rank`'s tokens, expert choices and output gradient: any rank can make any rank's."""
    t, h = expert.tokens_of(spec.routing, spec.tokens, spec.hot_share, rank % spec.ep, spec.ep), spec.hidden
    x = torch.randn(t, h, generator=expert.generator(spec.seed + 1, rank)).to(device, dtype)
    gy = torch.randn(t, h, generator=expert.generator(spec.seed + 2, rank)).to(device, dtype)
    return x, _choices(spec, rank).to(device), gy


def _compare(spec: ExpertSpec, model: expert.MoE, layer: expert.ExpertParallel, ranks: list[int], ep_rank: int,
             device, dtype, check: Check) -> None:
    """One forward and backward of this rank's part against the reference on the whole group's
    tokens: the output, the input gradient, the gate's gradient from this rank's tokens and every
    local expert's gradients go into `check` (the fused path: its forward only, the ops have no backward)."""
    inputs = [_inputs(spec, r, device, dtype) for r in ranks]
    x_all = torch.cat([x for x, _, _ in inputs]).requires_grad_()
    gy_all = torch.cat([gy for _, _, gy in inputs])
    ref = expert.reference(model, x_all, torch.cat([ids for _, ids, _ in inputs]), _cap(spec), _drop(spec),
                           [len(x) for x, _, _ in inputs])
    first = sum(len(x) for x, _, _ in inputs[:ep_rank])
    mine = slice(first, first + len(inputs[ep_rank][0]))
    forward_only = spec.impl == "fused"
    if not forward_only:
        (ref_gate,) = torch.autograd.grad((ref[mine] * gy_all[mine]).sum(), model.gate.weight, retain_graph=True)
        (ref * gy_all).sum().backward()
    x, ids, gy = inputs[ep_rank]
    x = x.clone().requires_grad_(not forward_only)
    with torch.inference_mode(forward_only):
        out = layer(x, ids)
    if not forward_only:
        out.backward(gy)
    n = _reduce_length(nn.ModuleList([model.gate, model.experts[0]]), len(x_all) * spec.topk,
                       spec.topk + spec.experts)
    check.compare(out, ref[mine], n)
    if forward_only:
        return
    check.compare(grad_of(x), grad_of(x_all)[mine], n)
    check.compare(grad_of(layer.gate.weight), ref_gate, n)
    first = ep_rank * len(layer.experts)
    for i, local in enumerate(layer.experts):
        ref_params = dict(model.experts[first + i].named_parameters())
        for name, p in local.named_parameters():
            check.compare(grad_of(p), grad_of(ref_params[name]), n)


def _cap(spec: ExpertSpec) -> int:
    """The group's capacity (policy group); a per-rank policy drops on each rank before dispatch (_drop)."""
    group = _drop(spec)[0] == "group"
    return expert.capacity(spec.capacity_factor, spec.tokens, spec.ep, spec.topk, spec.experts) if group else 0


def _drop(spec: ExpertSpec) -> tuple[str, float]:
    return getattr(spec, "drop_policy", "group"), spec.capacity_factor


def expert_loops(backend, spec: ExpertSpec):
    """The step and the forward's three parts as timed loops, and how to finish them (collectives.timing)."""
    _validate(spec, backend.world)
    group = groups_for(ParallelDims.fit(spec.ep, 1, backend.world), backend.rank)[Axis.TP]   # ep consecutive ranks
    ep_rank = dist.get_rank(group)
    ranks = list(range(backend.rank - ep_rank, backend.rank - ep_rank + spec.ep))
    device, dtype = backend.device.torch_device, getattr(torch, spec.dtype)
    timer = CommTimer(backend.device.synchronize, on=False)   # on only in finish's extra run
    kwargs: dict = {}
    moved_on = group
    if spec.impl == "fused":   # refused alike on every rank, before any collective, outside the documented limits
        if why := expert.fused_missing():
            raise RuntimeError(why)
        chip = hccl_product(backend.device.name())
        if why := fused_refusal(spec, chip, ranks):
            raise ValueError(why)
        moved_on = fused_group(spec.ep, backend.world, backend.rank)
        most = max(expert.tokens_of(spec.routing, spec.tokens, spec.hot_share, r, spec.ep) for r in range(spec.ep))
        # global_bs: 0 where every rank sends the same BS, else max BS x ep (op-plugin)
        kwargs = {"global_rank": backend.rank, "chip": chip, "global_bs": 0 if spec.routing != "uneven" else most * spec.ep}
    dispatcher = DISPATCHERS[spec.impl](moved_on, spec.experts, _cap(spec), timer, **kwargs)
    torch.manual_seed(spec.seed)
    model = expert.MoE(spec.hidden, spec.ffn, spec.experts).to(device=device, dtype=dtype)
    layer = expert.ExpertParallel(model, spec.ep, ep_rank, dispatcher, _drop(spec))
    check = Check(dtype_name(dtype), corrupt=spec.corrupt)   # once, before any timing
    _compare(spec, model, layer, ranks, ep_rank, device, dtype, check)
    layer.zero_grad(set_to_none=True)
    del model
    x, ids, gy = _inputs(spec, backend.rank, device, dtype)
    with torch.inference_mode():
        routed, w = expert.route(layer.gate, x, ids, _drop(spec))
    counts = expert.traffic(group, ids.reshape(-1), spec.experts, _cap(spec))
    if routed is not ids:   # a per-rank policy: routed before its drops, sent after them
        counts = expert.Traffic(counts.routed, expert.traffic(group, routed.reshape(-1), spec.experts, 0).sent)
    forward_only = spec.impl == "fused"
    x.requires_grad_(not forward_only)

    def step(k):
        for _ in range(k):
            if forward_only:
                with torch.inference_mode():
                    layer(x, ids)
            else:
                layer(x, ids).backward(gy)

    with torch.inference_mode():
        h, sizes, ctx = dispatcher.dispatch(x, routed, w)
        y = expert.run_experts(layer.experts, h, sizes)

    def alone(call):
        def loop(k):
            with torch.inference_mode():
                for _ in range(k):
                    call()
        return loop

    rows, local = counts.received_rows(spec.impl, ep_rank, len(x))
    row_bytes = spec.hidden * x.element_size()

    def finish(k, times):
        t_step, t_dispatch, t_experts, t_combine = times
        comm_share = timer.share(step, k, backend.device.timer()) or 0.0
        return ExpertResult(
            iters=k, round_ns=t_step, dispatch_ns=t_dispatch, expert_ns=t_experts, combine_ns=t_combine,
            **rank_record(backend, check, layer.parameters()), tokens_per_expert=counts.routed.sum(0).tolist(),
            tokens_per_rank=counts.tokens_per_rank(), dropped=int(counts.routed[ep_rank].sum() - counts.sent[ep_rank].sum()),
            sent_bytes=counts.sent_bytes(spec.impl, ep_rank, len(x), spec.topk, spec.hidden, x.element_size()),
            recv_bytes=rows * row_bytes, local_bytes=local * row_bytes, masked=int((ids < 0).sum()), comm_share=comm_share)
    loops = [step, alone(lambda: dispatcher.dispatch(x, routed, w)),
             alone(lambda: expert.run_experts(layer.experts, h, sizes)), alone(lambda: dispatcher.combine(y, ctx))]
    return loops, finish


# the rank half of the expert-parallel bench; the driver half (kinds/expert.py) sends the spec and makes the row
ExpertRank = timing.LoopRank(torch_loops(expert_loops))
