"""A rank process: ``python -m harness.worker``. Started by the harness or a cluster launcher.

Reads its rank from whichever launcher started it, joins the backend's communicator, and serves
case specs: rank 0 takes them from the driver and fans them out over the side channel; results
are gathered back to rank 0. Every case arms a faulthandler dump so a hang leaves each stuck
rank's Python stack in its log.
"""
from __future__ import annotations

import ctypes
import faulthandler
import os
import socket
import sys
import time
import traceback

CASE_ERROR = "hccl-bench: this rank's case raised"
RANK_VARS = (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
             ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
             ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
             ("PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK"),
             ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))


def launcher_rank(env=os.environ) -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun/local, Open MPI, MPICH/Hydra, PMIx or Slurm."""
    for rank_var, size_var, local_var in RANK_VARS:
        if rank_var in env:
            rank = int(env[rank_var])
            size = int(env.get(size_var) or env.get("WORLD_SIZE") or 1)
            return rank, size, int(env.get(local_var) or env.get("LOCAL_RANK") or 0)
    return 0, 1, 0


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
BENCH_OF_TASK = {"tp_bench": "linear", "pp_bench": "pipeline"}   # layer specs' bench names (schema.results)


def fault_names(spec: dict) -> set[str]:
    """What NAME in HCCL_BENCH_FAULT may call a case: its op (all_reduce, ...), its bench (linear,
    pipeline, overlap, bucket, compress) or its TP block (linear, mlp)."""
    return {n for n in (spec.get("op"), spec.get("bench"), BENCH_OF_TASK.get(spec.get("task", "")), spec.get("layer")) if n}


def _slow_factor(fault: str, parts: list[str]) -> float:
    """FACTOR of slow:RANK:NAME:FACTOR, a finite number >= 1; else one ValueError line."""
    try:
        factor = float(parts[3]) if len(parts) == 4 and parts[1].isdigit() else float("nan")
    except ValueError:
        factor = float("nan")
    if not (1.0 <= factor < float("inf")):
        raise ValueError(f"HCCL_BENCH_FAULT={fault!r}: want slow:RANK:NAME:FACTOR with FACTOR a number >= 1 (e.g. 1.05)")
    return factor


def _inject_fault(spec: dict, rank: int) -> dict:
    """Test hook, the only reader of HCCL_BENCH_FAULT='MODE:RANK:NAME': on that rank, for a case
    NAME names (fault_names), hang makes it hang, die makes it exit, corrupt returns the spec with
    "corrupt": True, which makes the case's check change one element of this rank's result
    (collectives.rank_tasks.corrupt_one) so that it must report #wrong > 0. 'slow:RANK:NAME:FACTOR'
    returns the spec with plan["slow"] = FACTOR: the rank's timed rounds take FACTOR times as long
    (collectives.timing.slowed_round), a known effect for measuring power. Other cases: the spec."""
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
    if int(fault_rank) != rank or name not in fault_names(spec):
        return spec
    if mode == "hang":
        while True:
            time.sleep(1)
    if mode == "die":
        print(f"rank {rank}: HCCL_BENCH_FAULT asked this rank to die", flush=True)
        os._exit(3)
    if mode == "slow":
        if "plan" not in spec:
            return spec
        print(f"rank {rank}: HCCL_BENCH_FAULT asked this rank's timed {name} rounds to take {factor:g}x as long", flush=True)
        return {**spec, "plan": {**spec["plan"], "slow": factor}}
    print(f"rank {rank}: HCCL_BENCH_FAULT asked this rank to corrupt one element of its {name} result", flush=True)
    return {**spec, "corrupt": True}


def run_case(backend, spec: dict) -> dict:
    if spec["kind"] in ("round", "end"):  # an A/B pair's next round, or its result (collectives.timing.begin)
        from collectives import timing
        return {"round": timing.time_round, "end": timing.end}[spec["kind"]](backend)
    if spec["kind"].startswith("doctor"):
        from collectives import doctor_tasks
        return {"doctor_links": doctor_tasks.links, "doctor_rings": doctor_tasks.rings,
                "doctor_skew": doctor_tasks.skew}[spec["kind"]](backend, spec)
    if spec["kind"].startswith("layer"):  # imports torch layers only when a layer case arrives
        from layers import rank_tasks as layer_tasks
        return {"layer": layer_tasks.run, "layer_begin": layer_tasks.begin}[spec["kind"]](backend, spec)
    if spec["kind"].startswith("tuning"):
        from layers import tuning_tasks
        return {"tuning": tuning_tasks.run, "tuning_begin": tuning_tasks.begin}[spec["kind"]](backend, spec)
    from collectives import rank_tasks as collective_tasks
    return {"collective": collective_tasks.run_collective, "overhead": collective_tasks.run_overhead,
            "collective_begin": collective_tasks.begin_collective}[spec["kind"]](backend, spec)


_LIBC = ctypes.CDLL(None)


def serve(backend, chan) -> None:
    while True:
        msg = chan.recv() if backend.rank == 0 else None
        spec = backend.bcast_json(msg)
        if spec.get("cmd") == "exit":
            return
        faulthandler.dump_traceback_later(spec["timeout_s"], exit=False)
        try:
            local = run_case(backend, _inject_fault(spec, backend.rank))
        except Exception as exc:  # reported to the driver, which fails the case with it
            local = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            # also in the log: if other ranks now wait forever, the hang report can still say why
            print(f"{CASE_ERROR} {local['error']}\n{local['traceback']}", file=sys.stderr, flush=True)
        finally:
            faulthandler.cancel_dump_traceback_later()
            _LIBC.fflush(None)   # C libraries' buffered log lines (NCCL_DEBUG) into the log before the driver reads it
        results = backend.gather_json(local)
        if backend.rank == 0:
            chan.send({"results": results})


def main() -> int:
    rank, world, local_rank = launcher_rank()
    if os.environ.get("HCCL_BENCH_LOG_DIR"):
        _redirect_output(os.environ["HCCL_BENCH_LOG_DIR"], rank)
    faulthandler.enable()
    backend_name = os.environ["HCCL_BENCH_BACKEND"]
    from collectives import backends
    from harness.provenance import adapter_env
    backend = backends.create(backend_name, rank, world, local_rank)
    info = {"rank": backend.rank, "host": socket.gethostname(), "pid": os.getpid(),
            "local_rank": local_rank, "device": backend.device.name(),
            "versions": {**backend.versions(), "python": f"{sys.version.split()[0]} {sys.executable}"},
            "env": adapter_env()}
    # every rank is watched (a host leader by the driver, a follower by its leader: harness/control.py)
    # before rank 0 says hello: the gather orders them
    from harness import control
    driver = (os.environ["HCCL_BENCH_DRIVER_HOST"], int(os.environ["HCCL_BENCH_DRIVER_PORT"]), os.environ["HCCL_BENCH_TOKEN"])
    post = control.open_post(driver[2], backend.rank)   # listening before anyone learns who leads this node
    peers = backend.bcast_json(backend.gather_json(control.whoami()))
    watch = control.join_watch(post, driver, backend.rank, peers, log=lambda line: print(line, file=sys.stderr, flush=True))
    ranks = backend.gather_json(info)
    chan = None
    if backend.rank == 0:
        chan = control.connect(*driver, {"world": backend.world, "ranks": ranks})
    serve(backend, chan)
    backend.close()
    watch.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
