"""Expert parallelism: a top-k routed mixture-of-experts layer over an ep group, its token dispatchers
(alltoallv, allgather, fused: forward only) and the same layer on one rank as the reference. The model,
routing, capacity and each dispatcher: docs/layers.md (`test_expert`, The model)."""
from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from layers.tp import MLP, NO_TIMER, CommTimer, _all_gather, _Comm, f, g

ROUTINGS = ("uniform", "skewed", "random", "hotrank", "masked", "uneven", "file")
DROP_POLICIES = ("group", "probs", "position")
FUSED_OPS = ("npu_moe_distribute_dispatch", "npu_moe_distribute_combine")


class MoE(nn.Module):
    """The full layer's parameters, built alike on every rank from the same seed."""

    def __init__(self, hidden: int, ffn: int, experts: int):
        super().__init__()
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList(MLP(hidden, ffn) for _ in range(experts))


def generator(seed: int, rank: int = 0) -> torch.Generator:
    """A CPU generator per (seed, rank): every rank can make any rank's draws (devices' generators differ)."""
    return torch.Generator().manual_seed(seed * 65537 + rank)


def choices(routing: str, tokens: int, topk: int, experts: int, rank: int, seed: int, hot_share: float = 0.0,
            expert_ids: Sequence[int] = (), hot_experts: int = 0) -> torch.Tensor:
    """Rank `rank`'s expert ids, (tokens, topk) int64, the same on every rank that asks; what each
    routing deals: docs/layers.md (`--routing`)."""
    n = tokens * topk
    first = rank * n   # this rank's first slot in the group's order
    if routing == "uniform":
        perm = torch.randperm(experts, generator=generator(seed))
        ids = perm[(torch.arange(n) + first) % experts]
    elif routing == "skewed":
        if not 0.0 <= hot_share <= 1.0:
            raise ValueError(f"hot_share must be in [0, 1], got {hot_share}")
        hot = n if experts == 1 else round(hot_share * n)
        rest = 1 + (torch.arange(n - hot) + rank * (n - hot)) % max(1, experts - 1)
        ids = torch.cat([torch.zeros(hot, dtype=torch.long), rest])
        ids = ids[torch.randperm(n, generator=generator(seed, rank))]
    elif routing == "masked":
        if not 0.0 < hot_share < 1.0:
            raise ValueError(f"masked needs a fraction in (0, 1), got {hot_share}")
        ids = choices("random", tokens, topk, experts, rank, seed).reshape(-1)
        ids[torch.rand(n, generator=generator(seed + 3, rank)) < hot_share] = -1
    elif routing in ("random", "hotrank", "uneven"):
        if topk > experts:
            raise ValueError(f"routing {routing} draws {topk} distinct experts of {experts}")
        weight = torch.ones(experts, dtype=torch.float64)
        if routing == "hotrank":   # (uneven: random choices; its tokens per rank differ, tokens_of)
            if not 0.0 < hot_share < 1.0 or not 0 < hot_experts < experts:
                raise ValueError(f"hotrank needs 0 < hot_share < 1 and 0 < hot experts < {experts}")
            weight[:hot_experts] = hot_share / hot_experts
            weight[hot_experts:] = (1 - hot_share) / (experts - hot_experts)
        ids = torch.multinomial(weight.expand(tokens, experts), topk, replacement=False,
                                generator=generator(seed, rank)).reshape(-1)
    elif routing == "file":
        trace = torch.tensor(list(expert_ids), dtype=torch.long)
        if trace.numel() == 0 or int(trace.min()) < 0 or int(trace.max()) >= experts:
            raise ValueError(f"routing 'file' needs expert ids in [0, {experts}), got {len(trace)} ids"
                             + (f" from {int(trace.min())} to {int(trace.max())}" if trace.numel() else ""))
        ids = trace[(torch.arange(n) + first) % trace.numel()]
    else:
        raise ValueError(f"unknown routing {routing!r}: one of {', '.join(ROUTINGS)}")
    return ids.view(tokens, topk)


def distinct_rows(ids: torch.Tensor) -> bool:
    """Whether no token (row) names one expert twice."""
    ordered = ids.sort(dim=1).values
    return bool((ordered[:, 1:] != ordered[:, :-1]).all())


def tokens_of(routing: str, tokens: int, spread: float, ep_rank: int, ep: int) -> int:
    """Tokens rank `ep_rank` sends: `tokens`, or under routing uneven tokens x (1 + spread x (2 r / (ep - 1) - 1)),
    rounded: from (1 - spread) x to (1 + spread) x tokens over the group, the group's total kept (ep x tokens)."""
    if routing != "uneven" or ep < 2:
        return tokens
    return max(1, tokens + round(spread * tokens * (2 * ep_rank / (ep - 1) - 1)))


def weights(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The gate's weight for each chosen expert (module docstring): softmax at the choices, over the k;
    a masked choice (id -1) weighs 0 and the others are renormalised without it."""
    valid = ids >= 0
    w = torch.softmax(logits, dim=-1).gather(1, ids.clamp(min=0)) * valid
    return w / w.sum(dim=-1, keepdim=True).clamp(min=torch.finfo(w.dtype).tiny) if ids.shape[1] > 1 else w


def capacity(capacity_factor: float, tokens: int, ep: int, topk: int, experts: int) -> int:
    """Slots an expert keeps per ep group; 0: no limit."""
    return math.ceil(capacity_factor * tokens * ep * topk / experts) if capacity_factor > 0 else 0


def _exclusive(counts: torch.Tensor) -> torch.Tensor:
    """Exclusive prefix sums along dim 0: what comes before each entry."""
    return counts.cumsum(0) - counts


def kept(ids: torch.Tensor, before: torch.Tensor, cap: int) -> torch.Tensor:
    """Which slots (flat ids, in order) an expert keeps: its position among the group's slots for it,
    `before` (per expert) coming from earlier ranks, under `cap` (0: all); a masked slot (id -1) never."""
    valid = ids >= 0
    if cap <= 0:
        return valid
    safe = torch.where(valid, ids, before.numel())   # masked slots sort after every expert's
    order = torch.argsort(safe, stable=True)
    counts = torch.bincount(safe, minlength=before.numel() + 1)
    pos = torch.empty_like(ids)
    pos[order] = torch.arange(ids.numel(), device=ids.device) - _exclusive(counts)[safe[order]]
    return valid & (torch.cat([before, before.new_zeros(1)])[safe] + pos < cap)


def after_drops(routed: torch.Tensor, cap: int) -> torch.Tensor:
    """(ep, E) slots each rank sends each expert once capacity drops the latecomers (`routed`: before)."""
    if cap <= 0:
        return routed
    return (cap - _exclusive(routed)).clamp(min=0).minimum(routed)


def run_experts(experts: Iterable[nn.Module], h: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """Each expert on its consecutive rows of h."""
    return torch.cat([e(part) for e, part in zip(experts, h.split(list(sizes)))]) if len(h) else h


def rank_capacity(capacity_factor: float, tokens: int, topk: int, experts: int) -> int:
    """Megatron's per-rank capacity (moe_utils.get_capacity on this rank's tokens x topk): ceil(cf x tokens x topk / E)."""
    return math.ceil(capacity_factor * tokens * topk / experts)


def rank_drops(ids: torch.Tensor, probs: torch.Tensor, cap: int, policy: str) -> torch.Tensor:
    """Megatron's token dropping on one rank before dispatch (moe_utils.apply_router_token_dropping): each
    expert keeps at most `cap` of this rank's selections, its highest `probs` (the softmax over every
    expert) under policy probs, its first under position; a dropped selection becomes -1 (masked)."""
    flat = ids.reshape(-1)
    none_before = flat.new_zeros(probs.shape[1])
    if policy == "position":
        keep = kept(flat, none_before, cap)
    elif policy == "probs":
        p = probs.gather(1, ids.clamp(min=0)).reshape(-1)
        order = torch.argsort(-p, stable=True)   # highest first, then by position
        keep = torch.empty_like(flat, dtype=torch.bool)
        keep[order] = kept(flat[order], none_before, cap)
    else:
        raise ValueError(f"unknown drop policy {policy!r}: one of {', '.join(DROP_POLICIES[1:])}")
    return torch.where(keep, flat, -1).view_as(ids)


def route(gate: nn.Module, x: torch.Tensor, ids: torch.Tensor, drop: tuple[str, float]) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids after a per-rank drop policy, the gate's weights): `drop` = (policy, capacity factor);
    policy group (or factor 0) drops nothing here (the group's capacity is the dispatcher's)."""
    logits = gate(x)
    w = weights(logits, ids)
    policy, factor = drop
    if policy == "group" or not factor:
        return ids, w
    cap = rank_capacity(factor, len(ids), ids.shape[1], logits.shape[1])
    return rank_drops(ids, torch.softmax(logits.detach(), dim=-1), cap, policy), w


def reference(model: MoE, x: torch.Tensor, ids: torch.Tensor, cap: int, drop: tuple[str, float] = ("group", 0.0),
              segments: Sequence[int] = ()) -> torch.Tensor:
    """The layer on one rank: every token of the group (x, ids in rank order), every expert, no
    communication; a per-rank drop policy applied to each rank's `segments` of the tokens."""
    w = weights(model.gate(x), ids).reshape(-1)
    if drop[0] != "group" and drop[1]:
        ids = torch.cat([route(model.gate, xs, i, drop)[0] for xs, i in zip(x.split(list(segments)), ids.split(list(segments)))])
    flat = ids.reshape(-1)
    keep = kept(flat, flat.new_zeros(len(model.experts)), cap)
    token = torch.arange(len(x), device=x.device).repeat_interleave(ids.shape[1])
    out = torch.zeros_like(x)
    for e, expert in enumerate(model.experts):
        sel = (flat == e) & keep
        out = out.index_add(0, token[sel], expert(x[token[sel]]) * w[sel, None])
    return out


def _a2a(out_splits: list[int], in_splits: list[int]):
    """all_to_all_single with these splits, as a layers.tp._Comm direction."""
    def call(x, group, timer):
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        timer.run(lambda: dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group))
        return out
    return call


@dataclass
class Traffic:
    """The ep group's routing: slots per (source rank, expert) before (`routed`) and after capacity drops (`sent`)."""
    routed: torch.Tensor    # (ep, E)
    sent: torch.Tensor      # (ep, E)

    def tokens_per_rank(self) -> list[int]:
        """Slots each ep rank's experts take in."""
        return self.sent.sum(0).view(len(self.sent), -1).sum(1).tolist()

    def received_rows(self, impl: str, rank: int, tokens: int) -> tuple[int, int]:
        """(rows, of them this rank's own) dispatch hands this rank (and combine sends back), as DeepEP
        counts its bytes: the kept slots routed to its experts (allgather: every token of the group)."""
        ep, experts = self.sent.shape
        if impl == "allgather":
            return ep * tokens, tokens
        per = experts // ep
        mine = self.sent[:, rank * per:(rank + 1) * per]
        return int(mine.sum()), int(mine[rank].sum())

    def sent_bytes(self, impl: str, rank: int, tokens: int, topk: int, hidden: int, itemsize: int) -> int:
        """Bytes this rank sends other ranks in one forward's dispatch and combine (docs/tuning.md)."""
        ep, experts = self.sent.shape
        if impl == "allgather":
            return (ep - 1) * tokens * (2 * hidden * itemsize + topk * (itemsize + 8))
        per = experts // ep
        out = self.sent[rank].view(ep, per).sum(1)
        back = self.sent[:, rank * per:(rank + 1) * per].sum(1)
        counts = (ep - 1) * experts * 8 if impl == "alltoallv" else 0
        return counts + int(out.sum() - out[rank] + back.sum() - back[rank]) * hidden * itemsize


def traffic(group, flat_ids: torch.Tensor, experts: int, cap: int, timer: CommTimer = NO_TIMER) -> Traffic:
    """Every rank's per-expert counts, all-gathered over the ep group (Megatron's alltoall dispatcher
    gathers them too), and what capacity leaves of them."""
    routed = _all_gather(torch.bincount(flat_ids[flat_ids >= 0], minlength=experts).view(1, -1), group, timer)
    return Traffic(routed, after_drops(routed, cap))


class _Dispatcher:
    """dispatch(x, ids, w) -> (rows for the local experts, expert-major; rows per expert; context),
    combine(y, context) -> (tokens, H)."""

    def __init__(self, group, experts: int, cap: int, timer: CommTimer = NO_TIMER):
        self.group, self.experts, self.cap, self.timer = group, experts, cap, timer
        self.ep, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.per = experts // self.ep

    def dispatch(self, x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, list[int], tuple]:
        raise NotImplementedError

    def combine(self, y: torch.Tensor, ctx: tuple) -> torch.Tensor:
        raise NotImplementedError


class AllToAllV(_Dispatcher):
    def dispatch(self, x, ids, w):
        ep, k = self.ep, ids.shape[1]
        flat = ids.reshape(-1)
        counts = traffic(self.group, flat, self.experts, self.cap, self.timer)
        keep = kept(flat, _exclusive(counts.routed)[self.rank], self.cap)
        order = torch.argsort(torch.where(keep, flat, self.experts), stable=True)[:int(keep.sum())]
        mine = counts.sent[:, self.rank * self.per:(self.rank + 1) * self.per]      # (source rank, local expert)
        in_splits = counts.sent[self.rank].view(ep, self.per).sum(1).tolist()
        out_splits = mine.sum(1).tolist()
        recv = _Comm.apply(x[order // k], _a2a(out_splits, in_splits), _a2a(in_splits, out_splits), self.group, self.timer)
        # received by source rank, then expert; the experts take them by expert, then source rank
        sizes = mine.t().reshape(-1)
        starts = _exclusive(mine.reshape(-1)).view(ep, self.per).t().reshape(-1)
        idx = torch.repeat_interleave(starts - _exclusive(sizes), sizes) + torch.arange(int(sizes.sum()), device=x.device)
        return recv[idx], mine.sum(0).tolist(), (order, idx, in_splits, out_splits, w, len(x))

    def combine(self, y, ctx):
        order, idx, in_splits, out_splits, w, tokens = ctx
        inverse = torch.empty_like(idx)
        inverse[idx] = torch.arange(len(idx), device=idx.device)
        back = _Comm.apply(y[inverse], _a2a(in_splits, out_splits), _a2a(out_splits, in_splits), self.group, self.timer)
        return back.new_zeros((tokens, back.shape[1])).index_add(0, order // w.shape[1], back * w.reshape(-1)[order, None])


class AllGather(_Dispatcher):
    def dispatch(self, x, ids, w):
        xs = f(x, self.group, self.timer, True)    # all-gather forward, reduce-scatter backward
        ws = f(w, self.group, self.timer, True)
        flat = _all_gather(ids, self.group, self.timer).reshape(-1)
        keep = kept(flat, flat.new_zeros(self.experts), self.cap)
        lo = self.rank * self.per
        local = keep & (flat >= lo) & (flat < lo + self.per)
        order = torch.argsort(torch.where(local, flat, self.experts), stable=True)[:int(local.sum())]
        sizes = torch.bincount(flat[order] - lo, minlength=self.per).tolist()
        return xs[order // ids.shape[1]], sizes, (order, ws, len(xs))

    def combine(self, y, ctx):
        order, ws, rows = ctx
        partial = y.new_zeros((rows, y.shape[1])).index_add(0, order // ws.shape[1], y * ws.reshape(-1)[order, None])
        return g(partial, self.group, self.timer, True)   # reduce-scatter forward, all-gather backward


class ExpertParallel(nn.Module):
    """This ep rank's part of the layer: the gate (replicated), its experts, a dispatcher between them."""

    def __init__(self, model: MoE, ep: int, ep_rank: int, dispatcher, drop: tuple[str, float] = ("group", 0.0)):
        super().__init__()
        self.gate = copy.deepcopy(model.gate)
        per = len(model.experts) // ep
        self.experts = copy.deepcopy(model.experts[ep_rank * per:(ep_rank + 1) * per])
        self.dispatcher, self.drop = dispatcher, drop

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        ids, w = route(self.gate, x, ids, self.drop)
        h, sizes, ctx = self.dispatcher.dispatch(x, ids, w)
        return self.dispatcher.combine(run_experts(self.experts, h, sizes), ctx)


def fused_missing() -> str:
    """Why this process cannot run the fused dispatcher ('' when torch_npu has both ops)."""
    try:
        import torch_npu
    except (ImportError, OSError) as exc:
        return f"impl fused needs torch_npu's {' and '.join(FUSED_OPS)} (Ascend): torch_npu does not load ({exc})"
    lacking = [op for op in FUSED_OPS if not hasattr(torch_npu, op)]
    return f"torch_npu {getattr(torch_npu, '__version__', '?')} has no {', '.join(lacking)}" if lacking else ""


class Fused(_Dispatcher):
    """torch_npu's fused EP AlltoAllV (op-plugin's documented signatures): forward only, on `group` alone
    (layers.expert_tasks.fused_group); the call follows the chip (A2 or A3: dispatch_args)."""

    def __init__(self, group, experts: int, cap: int, timer: CommTimer = NO_TIMER, global_rank: int = 0,
                 chip: str = "", global_bs: int = 0):
        super().__init__(group, experts, cap, timer)
        if why := fused_missing():
            raise RuntimeError(why)
        if cap:
            raise ValueError("impl fused has no capacity limit: use capacity_factor 0")
        import torch_npu
        self.npu, self.chip, self.global_bs = torch_npu, chip, global_bs
        self.name = group._get_backend(torch.device("npu")).get_hccl_comm_name(global_rank)

    def dispatch(self, x, ids, w):
        if x.dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"impl fused takes bfloat16 or float16 tokens, not {x.dtype}")
        ids32 = ids.to(torch.int32)
        scales = w.float()
        expand_x, _, expand_idx, token_nums, ep_recv_counts, tp_recv_counts, expand_scales = self.timer.run(
            lambda: self.npu.npu_moe_distribute_dispatch(**dispatch_args(self.chip, x, ids32, self.name, self.ep,
                                                                         self.rank, self.experts, scales, self.global_bs)))
        sizes = token_nums.tolist()   # rows per local expert, in expert order from the first row
        return expand_x[:sum(sizes)], sizes, (expand_x, ids32, expand_idx, ep_recv_counts, tp_recv_counts, expand_scales,
                                              scales)

    def combine(self, y, ctx):
        expand_x, ids32, expand_idx, ep_recv_counts, tp_recv_counts, expand_scales, scales = ctx
        full = torch.cat([y, expand_x.new_zeros((len(expand_x) - len(y), y.shape[1]))])   # the rows dispatch gave
        return self.timer.run(lambda: self.npu.npu_moe_distribute_combine(**combine_args(
            self.chip, full, ids32, expand_idx, ep_recv_counts, scales, self.name, self.ep, self.rank, self.experts,
            tp_recv_counts, expand_scales, self.global_bs)))


def dispatch_args(chip: str, x, ids32, group: str, ep: int, ep_rank: int, experts: int, expert_scales,
                  global_bs: int = 0) -> dict:
    """npu_moe_distribute_dispatch's arguments by their documented names (tests/data/op_plugin; its
    outputs and why A2 alone takes expert_scales: docs/tuning.md)."""
    args = {"x": x, "expert_ids": ids32, "group_ep": group, "ep_world_size": ep, "ep_rank_id": ep_rank,
            "moe_expert_num": experts, "expert_token_nums_type": 1, "global_bs": global_bs}
    return {**args, "expert_scales": expert_scales} if chip == "A2" else args


def combine_args(chip: str, expand_x, ids32, expand_idx, ep_recv_counts, expert_scales, group: str, ep: int,
                 ep_rank: int, experts: int, tp_recv_counts, expand_scales, global_bs: int = 0) -> dict:
    """npu_moe_distribute_combine's arguments by their documented names: dispatch's counts passed back
    as they came; A2 takes expand_scales, A3 tp_send_counts (docs/tuning.md)."""
    args = {"expand_x": expand_x, "expert_ids": ids32, "expand_idx": expand_idx, "ep_send_counts": ep_recv_counts,
            "expert_scales": expert_scales, "group_ep": group, "ep_world_size": ep, "ep_rank_id": ep_rank,
            "moe_expert_num": experts, "global_bs": global_bs}
    return {**args, **({"expand_scales": expand_scales} if chip == "A2" else {"tp_send_counts": tp_recv_counts})}
