"""A rank process: ``python -m harness.engine.worker``, started by the harness or a cluster launcher.

Rank 0 takes case specs from the driver and fans them out over the side channel; results are
gathered back to rank 0. Every case arms a faulthandler dump: a hang leaves each stuck rank's stack in its log.
"""
from __future__ import annotations

import ctypes
import faulthandler
import importlib
import os
import socket
import sys
import time
import traceback
from dataclasses import replace

from kinds import KINDS
from schema import wire
from schema.exit_codes import ExitCode
from schema.wire import Spec

CASE_ERROR = "hccl-bench: this rank's case raised"
RANK_VARS = (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
             ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
             ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
             ("PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK"),
             ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))


def launcher_rank(env=os.environ) -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun/local, Open MPI, MPICH/Hydra, PMIx or Slurm: the first
    launcher whose rank is set names the rank, the next that sets them its size and local rank (`srun
    --mpi=pmi2` sets PMI_RANK but no MPI_LOCALRANKID; without SLURM_LOCALID every rank took device 0)."""
    def first(names) -> str | None:
        return next((env[n] for n in names if env.get(n)), None)
    at = next((i for i, (rank_var, _, _) in enumerate(RANK_VARS) if rank_var in env), None)
    if at is None:
        return 0, 1, 0
    order = [RANK_VARS[at], *RANK_VARS[:at], *RANK_VARS[at + 1:]]
    size, local = first(v[1] for v in order), first(v[2] for v in order)
    return int(env[RANK_VARS[at][0]]), int(size or 1), int(local or 0)


def _redirect_output(log_dir: str, rank: int) -> None:
    """Send this rank's stdout/stderr (Python, C libraries, faulthandler) to rank<R>.log."""
    os.makedirs(log_dir, exist_ok=True)
    fd = os.open(os.path.join(log_dir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


FAULT_MODES = ("hang", "die", "corrupt", "slow")


def _slow_factor(fault: str, parts: list[str]) -> float:
    """FACTOR of slow:RANK:NAME:FACTOR, a finite number >= 1; else one ValueError line."""
    try:
        factor = float(parts[3]) if len(parts) == 4 and parts[1].isdigit() else float("nan")
    except ValueError:
        factor = float("nan")
    if not (1.0 <= factor < float("inf")):
        raise ValueError(f"HCCL_BENCH_FAULT={fault!r}: want slow:RANK:NAME:FACTOR with FACTOR a number >= 1 (e.g. 1.05)")
    return factor


def _inject_fault(spec: Spec, rank: int) -> Spec:
    """Test hook, the only reader of HCCL_BENCH_FAULT='MODE:RANK:NAME' (docs/faults.md): on that rank,
    for a case NAME names (Spec.fault_names: its op, bench or TP block), hang, die, or the spec with corrupt=True or,
    for slow, the factor in its plan (the doctor's arrival test: its `slow`). Other cases: the spec."""
    fault = os.environ.get("HCCL_BENCH_FAULT", "")
    if not fault:
        return spec
    parts = fault.split(":")
    factor = _slow_factor(fault, parts) if parts[0] == "slow" else 1.0
    if parts[0] == "slow":
        parts = parts[:3]
    if len(parts) != 3 or parts[0] not in FAULT_MODES or not parts[1].isdigit():
        raise ValueError(f"HCCL_BENCH_FAULT={fault!r}: want MODE:RANK:NAME with MODE one of {', '.join(FAULT_MODES)} "
                         "(slow:RANK:NAME:FACTOR)")
    mode, fault_rank, name = parts
    if int(fault_rank) != rank or name not in spec.fault_names():
        return spec
    if mode == "hang":
        print(f"rank {rank}: HCCL_BENCH_FAULT asked this rank to hang in {name}", flush=True)   # tests wait for this line
        while True:
            time.sleep(1)
    if mode == "die":
        print(f"rank {rank}: HCCL_BENCH_FAULT asked this rank to die", flush=True)
        os._exit(3)
    if mode == "slow":
        if isinstance(spec, wire.DoctorSkewSpec):   # the doctor's arrival test: this rank's work before the collective
            print(f"rank {rank}: HCCL_BENCH_FAULT asked this rank's {name} work to take {factor:g}x as long", flush=True)
            return replace(spec, slow=factor)
        plan = getattr(spec, "plan", None)
        if not plan:
            return spec
        print(f"rank {rank}: HCCL_BENCH_FAULT asked this rank's timed {name} rounds to take {factor:g}x as long", flush=True)
        return replace(spec, plan={**plan, "slow": factor})  # type: ignore[call-arg]
    print(f"rank {rank}: HCCL_BENCH_FAULT asked this rank to corrupt one element of its {name} result", flush=True)
    return replace(spec, corrupt=True)


def _rank_halves() -> dict[type[Spec], tuple[str, str]]:
    """The rank half of each spec type (kinds.KINDS', the A/B steps', the doctor's) as (module, class),
    imported when its first spec arrives. A second rank half for one spec type would silently take
    over the first's specs, so it is an error here."""
    halves: dict[type[Spec], tuple[str, str]] = {wire.Step: ("collectives.timing", "StepRank"),
                                                 wire.DoctorSpec: ("collectives.doctor_tasks", "DoctorRank"),
                                                 wire.DoctorSkewSpec: ("collectives.doctor_tasks", "DoctorRank")}
    for kind in KINDS:
        for spec in kind.spec_types:
            if halves.setdefault(spec, kind.rank) != kind.rank:
                raise TypeError(f"{spec.__name__} has two rank halves: {halves[spec]} and {kind.name}'s {kind.rank}")
    return halves


RANK_BENCHES = _rank_halves()


def run_case(backend, spec: Spec) -> dict:
    """The spec's bench run (or begun, for an A/B pair) on this rank; its result as a JSON object."""
    module, name = RANK_BENCHES[type(spec)]
    bench = getattr(importlib.import_module(module), name)
    out = bench.begin(backend, spec) if spec.begins else bench.run(backend, spec)
    return wire.to_json(out) if isinstance(out, wire.Timed) else (out or {})


_LIBC = ctypes.CDLL(None)


def _timed_between(backend, spec: Spec, cores, served: int) -> dict:
    """run_case, with ranks 0 and 1's cores' round trip (`cores`, a placement.CorePair) before and after a
    collective case; the probes' ids come from `served` (the messages this group served, on every rank)."""
    if cores is None or spec.begins or not any(k.sized and isinstance(spec, k.spec_types) for k in KINDS):
        return run_case(backend, spec)
    before = cores.round_trip_ns(2 * served)
    result = run_case(backend, spec)
    after = cores.round_trip_ns(2 * served + 1)
    if before is not None and after is not None and "error" not in result:
        result["cores_rt_ns"] = [round(before, 1), round(after, 1)]
    return result


def _serve_one(backend, msg: object, cores=None, served: int = 0) -> dict:
    """This rank's answer to one message: its result, or an error the driver fails the case with."""
    try:   # every rank reads the same message, so a refused one fails the case on all of them alike
        spec = wire.spec_from_json(msg)
    except wire.WireError as exc:
        return {"error": f"WireError: {exc}"}
    if spec.timeout_s > 0:
        faulthandler.dump_traceback_later(spec.timeout_s, exit=False)
    try:
        return _timed_between(backend, _inject_fault(spec, backend.rank), cores, served)
    except Exception as exc:  # reported to the driver, which fails the case with it
        local = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        # also in the log: if other ranks now wait forever, the hang report can still say why
        print(f"{CASE_ERROR} {local['error']}\n{local['traceback']}", file=sys.stderr, flush=True)
        return local
    finally:
        faulthandler.cancel_dump_traceback_later()
        _LIBC.fflush(None)   # C libraries' buffered log lines (NCCL_DEBUG) into the log before the driver reads it


def serve(backend, chan, cores=None) -> None:
    served = 0
    while True:
        msg = backend.bcast_json(chan.recv() if backend.rank == 0 else None)
        if msg == wire.EXIT:
            return
        results = backend.gather_json(_serve_one(backend, msg, cores, served))
        served += 1
        if backend.rank == 0:
            chan.send({"results": results})


def main() -> ExitCode:
    rank, world, local_rank = launcher_rank()
    launch = wire.RankLaunch.from_env(os.environ)
    if launch.log_dir:
        _redirect_output(launch.log_dir, rank)
    faulthandler.enable()
    from collectives import backends
    from harness.provenance import adapter_env
    backend = backends.create(launch.backend, rank, world, local_rank)
    from harness.engine import control, shm
    info = {"rank": backend.rank, "host": socket.gethostname(), "node": control.node_key(), "pid": os.getpid(),
            "local_rank": local_rank, "device": backend.device.name(),
            "versions": {**backend.versions(), "python": f"{sys.version.split()[0]} {sys.executable}"},
            "env": adapter_env()}
    # every rank is watched (a host leader by the driver, a follower by its leader: harness/engine/control.py)
    # before rank 0 says hello: the gather orders them
    driver = (launch.driver_host, launch.driver_port, launch.token)
    post = control.open_post(driver[2], backend.rank)   # listening before anyone learns who leads this node
    peers = backend.bcast_json(backend.gather_json(control.whoami()))
    shm.release_attached()   # every rank is past MPI_Init and a collective (harness/engine/shm.py)
    watch = control.join_watch(post, driver, backend.rank, peers, log=lambda line: print(line, file=sys.stderr, flush=True))
    from collectives import placement
    cores = placement.open_pair(backend, [p["node"] for p in peers], [p["machine"] for p in peers])
    ranks = backend.gather_json(info)
    chan = control.connect(*driver, {"world": backend.world, "ranks": ranks}) if backend.rank == 0 else None
    serve(backend, chan, cores)
    if cores is not None:
        cores.close()
    backend.close()
    watch.release()
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
