"""Pipeline steps with torch.distributed.pipelining: stages built by hand, schedules chosen by name.
Losses are summed and ``scale_grads=False``, so a pipelined step's gradients equal the
single-process gradients of the summed loss (docs/method.md, Device and library facts)."""
from __future__ import annotations

import inspect
import time

import torch
from torch import nn

from layers.schedules import SCHEDULES, chunks


def summed_mse(output, target):
    return ((output - target) ** 2).sum()


class OwnedOutput(nn.Module):
    """Returns a copy of its input. The zero-bubble schedules' input-gradient step detaches each
    stage output in place, which fails when the output is a view ("Can't detach views in-place",
    pytorch/pytorch#142229, open in torch 2.13), and nn.Linear on a 3-D input returns one."""

    def forward(self, x):
        return x.clone() if x._is_view() else x


def build_schedule(schedule: str, modules: dict[int, nn.Module], pp: int, microbatches: int, group, device,
                   v: int | None = None):
    """PipelineStage per local stage index, wrapped in the named schedule (v: the interleaved ones' chunks per rank)."""
    from torch.distributed import pipelining
    cls_name = SCHEDULES[schedule][0]
    v = chunks(schedule, v)
    if "ZeroBubble" in cls_name:
        modules = {idx: nn.Sequential(mod, OwnedOutput()) for idx, mod in modules.items()}
    stages = [pipelining.PipelineStage(mod, idx, pp * v, device, group=group) for idx, mod in modules.items()]
    cls = getattr(pipelining.schedules, cls_name)
    # scale_grads came with torch 2.7 (pytorch#144352); before it schedules never scaled, the same as False
    unscaled = {"scale_grads": False} if "scale_grads" in inspect.signature(cls.__init__).parameters else {}
    return cls(stages[0] if v == 1 else stages, n_microbatches=microbatches, loss_fn=summed_mse, **unscaled)


def run_step(sched, x, target, first: bool, last: bool) -> list:
    """One step of `sched` from this rank: the input where it holds the first stage, the target and
    the losses (returned) where it holds the last."""
    losses: list = []
    kwargs = {"target": target, "losses": losses} if last else {}
    sched.step(x, **kwargs) if first else sched.step(**kwargs)
    return losses


class _Sleep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, fwd_s, bwd_s):
        ctx.bwd_s = bwd_s
        time.sleep(fwd_s)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.bwd_s)
        return grad, None, None


class SleepLayer(nn.Module):
    """A layer whose forward and backward take known times: makes bubbles measurable on any machine."""

    def __init__(self, hidden: int, fwd_s: float, bwd_s: float):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(hidden))
        self.fwd_s, self.bwd_s = fwd_s, bwd_s

    def forward(self, x):
        return _Sleep.apply(x * self.scale, self.fwd_s, self.bwd_s)
