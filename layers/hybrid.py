"""The hybrid step's parts that are not in layers.tp or layers.pipeline: DDP's bucketed gradient
all_reduce overlapped with backward, and a tp timer that can leave the collectives out.

GradBuckets does what torch DDP's Reducer does, on any group and without wrapping the model (a
pipeline stage must stay a plain module for torch.distributed.pipelining): the parameters in
buckets filled in reverse order up to a cap (layers.memory.bucket_plan), a post-accumulate-grad
hook on each, and once every parameter of a bucket has its gradient for the step (the last
microbatch's backward: gradients of earlier microbatches accumulate locally, as under DDP's
no_sync) the bucket is copied into one flat buffer and its all_reduce started (async_op=True) while
backward goes on. Buckets start in plan order, so every replica issues them in the same order.
`finish` waits for them all and writes the averages (sum / dp) back into the gradients.
"""
from __future__ import annotations

import functools

import torch
import torch.distributed as dist

from layers.memory import bucket_plan
from layers.tp import CommTimer


class SkippableTimer(CommTimer):
    """layers.tp's CommTimer that can also leave the collective out (`skip`): the compute-alone loop
    runs the same sharded blocks without their tp communication (values then differ; times are what count)."""
    skip = False

    def run(self, fn):
        return None if self.skip else super().run(fn)


class GradBuckets:
    """The dp group's overlapped, bucketed gradient reduction of `params` (module docstring);
    `accumulations`: how many backward passes a step adds into each gradient (its microbatches)."""

    def __init__(self, params: list[torch.nn.Parameter], group, cap_bytes: int, accumulations: int):
        self.params, self.group, self.accumulations = list(params), group, accumulations
        self.size = dist.get_world_size(group)
        self.plan = bucket_plan([p.numel() * p.element_size() for p in self.params], cap_bytes)
        self.flats = [self.params[m[0]].new_empty(sum(self.params[i].numel() for i in m)) for m in self.plan]
        self.bucket_of = {i: b for b, members in enumerate(self.plan) for i in members}
        self.on = True   # off: the hooks do nothing (the step without dp reduction, the compute-alone loop)
        self._reset()
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(functools.partial(self._accumulated, i))

    @property
    def nbytes(self) -> int:
        return sum(f.numel() * f.element_size() for f in self.flats)

    def _reset(self) -> None:
        self.seen = [0] * len(self.params)
        self.left = [len(m) for m in self.plan]
        self.started: list = []   # the started buckets' Work handles, in plan order

    def _accumulated(self, i: int, _param) -> None:
        if not self.on:
            return
        self.seen[i] += 1
        if self.seen[i] != self.accumulations:
            return
        self.left[self.bucket_of[i]] -= 1
        while len(self.started) < len(self.plan) and self.left[len(self.started)] == 0:
            self._start(len(self.started))

    def _views(self, b: int):
        offset = 0
        for i in self.plan[b]:
            n = self.params[i].numel()
            yield self.params[i], self.flats[b][offset:offset + n]
            offset += n

    def _start(self, b: int) -> None:
        for p, view in self._views(b):
            view.copy_(p.grad.reshape(-1))
        self.started.append(dist.all_reduce(self.flats[b], group=self.group, async_op=True))

    def finish(self) -> None:
        """Wait for every bucket and write the averages back (a step whose backward left one unstarted is a bug)."""
        if len(self.started) != len(self.plan):
            raise RuntimeError(f"{len(self.plan) - len(self.started)} of {len(self.plan)} gradient buckets never "
                               "became ready: a parameter got fewer gradients than the step's microbatches")
        for b, work in enumerate(self.started):
            work.wait()
            self.flats[b].div_(self.size)
            for p, view in self._views(b):
                p.grad.copy_(view.view_as(p.grad))
        self._reset()
