"""The world the ranks will form, as `prepare` asks this machine: which backends --backend auto means,
their device probes, the default --nproc, and the layer benches' degrees against the world size."""
from __future__ import annotations

import importlib.util
import os

from collectives.backends import info, oversubscribed
from collectives.device import DeviceUnavailable, device_count
from harness.provenance import numpy_torch_problem
from harness.session.option_error import OptionError
from kinds.options import Options
from layers import schedules


def auto_backends() -> list[str]:
    """hccl where torch_npu is installed, nccl where an NVIDIA driver is, else gloo (+ mpi if installed)."""
    if importlib.util.find_spec("torch_npu") is not None:
        return ["hccl"]
    if os.path.exists("/proc/driver/nvidia/version"):
        return ["nccl"]
    return ["gloo"] + (["mpi"] if importlib.util.find_spec("mpi4py") is not None else [])


def settle(o: Options) -> None:
    """Resolve --backend auto and the default --nproc, probe each device and check the world; OptionError if not."""
    resolved_world = not o.nproc
    o.backends = o.backends or auto_backends()
    if any(info(b).family == "torch" for b in o.backends) and (abi := numpy_torch_problem()):
        raise OptionError(abi)
    for name in o.backends:
        try:
            info(name).probe()
        except DeviceUnavailable as exc:
            raise OptionError(str(exc)) from None
    o.nproc = o.nproc or next((max(1, device_count(info(b).device_kind)) for b in o.backends   # one rank per device
                               if info(b).one_rank_per_device), 2)
    for name in (b for b in o.backends if info(b).one_rank_per_device):   # one line here, not NCCL's duplicate-GPU error
        if crowded := oversubscribed(name, o.nproc, device_count(info(name).device_kind), o.launcher):
            raise OptionError(crowded)
    if resolved_world:
        check_world(o)


def check_world(o: Options) -> None:
    """The layer benches' degrees and shapes against the world size --nproc, before any rank starts."""
    valid = [(t, p) for t in o.tp for p in o.pp if o.nproc % (t * p) == 0]
    if not valid:
        raise OptionError(f"no tp x pp x dp equals the world size {o.nproc}: tp in {o.tp}, pp in {o.pp} "
                          f"(tp x pp must divide --nproc)")
    for t in {t for t, _ in valid}:
        if o.hidden % t:
            raise OptionError(f"--hidden {o.hidden} is not divisible by tp {t}")
        if o.seq % t:
            raise OptionError(f"--seq {o.seq} is not divisible by tp {t} (sequence parallelism shards it)")
    for m in o.microbatches:
        if o.batch % m:
            raise OptionError(f"--batch {o.batch} does not split into {m} microbatches")
        for p in {p for _, p in valid if p > 1}:
            for schedule in o.schedules:
                if err := schedules.validate(schedule, p, m, o.layers):
                    raise OptionError(f"pp {p}: {err}")
