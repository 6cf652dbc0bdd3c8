"""MPI through mpi4py on numpy buffers: the rank side and the library detection every MPI build's
backend shares (mpich.py declares "mpi", openmpi.py "openmpi"). A rank gets its declaration from the
one that starts it, never from the registry above it."""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time

import numpy as np

from collectives.backends.base import BackendInfo, encode, family_call, page_aligned
from collectives.device import Device, DeviceUnavailable, unstarted_mpi

SPEC_TAG = 4242
DTYPES = ("float32", "float64", "int32", "int64", "int8", "uint8")


# UCX's business card overflows the 1,024-byte PMI-1 reads of Slurm's pmi2 plugin; OFI's fits
# (docs/clusters.md, How a sweep runs on a cluster)
SLURM_PMI1_NETMOD = "ofi"


def slurm_pmi1_netmod(env=os.environ) -> str:
    """The netmod an MPICH rank must use ("" = its own choice): OFI when it is a PMI-1 client of Slurm's
    pmi2 plugin (hydra sets no PMI_JOBID) and nobody chose a netmod or another PMI version."""
    under_slurm_pmi2 = env.get("SLURM_MPI_TYPE") == "pmi2" and "PMI_FD" in env and "PMI_JOBID" in env
    chosen = "MPIR_CVAR_CH4_NETMOD" in env or env.get("MPIR_CVAR_PMI_VERSION", "1") != "1"
    return SLURM_PMI1_NETMOD if under_slurm_pmi2 and not chosen else ""


class MpiBackend:
    """One MPI rank of COMM_WORLD."""

    def __init__(self, info: BackendInfo, rank: int, world: int, local_rank: int):
        import mpi4py
        self.netmod_set = slurm_pmi1_netmod() if info.name == "mpi" else ""   # MPICH reads it in MPI_Init
        if self.netmod_set:
            os.environ["MPIR_CVAR_CH4_NETMOD"] = self.netmod_set
        # mpi4py asks for MPI_THREAD_MULTIPLE unless told otherwise; a plain C MPI_Init gets SINGLE, and
        # some libraries' small-message paths differ between the two (--mpi-thread-level)
        if level := os.environ.get("HCCL_BENCH_MPI_THREAD_LEVEL"):
            mpi4py.rc.thread_level = level
        from mpi4py import MPI
        self.info, self.MPI, self.comm = info, MPI, MPI.COMM_WORLD
        self.name, self.rank, self.world = info.name, self.comm.Get_rank(), self.comm.Get_size()
        if self.world != world:   # e.g. srun without --mpi=pmi2: every rank alone in a world of 1
            raise RuntimeError(f"MPI sees a world of {self.world} ranks but the launcher started {world}: the launcher "
                               "and the MPI library do not share a process manager (srun needs --mpi=pmi2 for "
                               "MPICH; or use the library's own mpiexec)")
        self.device = Device("cpu")
        self.redops = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}

    def from_numpy(self, values: np.ndarray, dtype: str):
        return self.full(values.size, values, dtype)

    def full(self, count: int, value: float | np.ndarray, dtype: str):
        buf = page_aligned(count * np.dtype(dtype).itemsize).view(dtype)
        buf[:] = value
        return buf

    def write(self, buf, values: np.ndarray) -> None:
        buf[:] = values

    def view(self, buf, start: int, stop: int):
        return buf[start:stop]

    def to_numpy(self, buf) -> np.ndarray:
        return buf.astype(np.float64)

    def call(self, op: str, send, recv, redop: str, inplace: bool, asynchronous: bool = False):
        """asynchronous: MPI's non-blocking form (Iallreduce, ...), returning a request to wait() on."""
        red = self.redops.get(redop, self.MPI.OP_NULL)   # OP_NULL: ops that do not reduce
        return family_call(self, op, send, recv, red, inplace, asynchronous)

    def copy(self, dst, src) -> None:
        dst[:] = src

    def scale(self, buf, factor: float) -> None:
        buf *= np.float32(factor)

    def exchange(self, peer: int, send, recv) -> None:
        self.comm.Sendrecv(send, peer, 7, recv, peer, 7)

    def send(self, peer: int, buf) -> None:
        self.comm.Send(buf, peer, 8)

    def recv(self, peer: int, buf) -> None:
        self.comm.Recv(buf, peer, 8)

    def plain_all_reduce_loop(self, buf, redop: str):
        allreduce, in_place, red = self.comm.Allreduce, self.MPI.IN_PLACE, self.redops[redop]

        def loop(k):
            for _ in range(k):
                allreduce(in_place, buf, red)
        return loop

    def barrier(self) -> None:
        self.comm.Barrier()

    def max_float(self, value: float) -> float:
        return self.comm.allreduce(float(value), op=self.MPI.MAX)

    def bcast_json(self, obj=None):
        """Idle ranks wait here between cases, polling a point-to-point Irecv with a growing nap
        instead of spinning a core in MPI_Bcast (an idle A/B partner group shares the cores)."""
        data = encode(obj) if self.rank == 0 else b""
        size = np.array([len(data)], dtype=np.int64)
        if self.rank == 0:
            self.MPI.Request.Waitall([self.comm.Isend(size, dest=r, tag=SPEC_TAG) for r in range(1, self.world)])
        else:
            req, nap = self.comm.Irecv(size, source=0, tag=SPEC_TAG), 0.0001
            while not req.Test():  # back off: an idle A/B partner group must not steal the cores
                time.sleep(nap)
                nap = min(nap * 2, 0.002)
        buf = np.frombuffer(data, dtype=np.uint8).copy() if self.rank == 0 else np.empty(int(size[0]), np.uint8)
        self.comm.Bcast(buf, root=0)
        return json.loads(buf.tobytes().decode())

    def gather_json(self, obj):
        data = np.frombuffer(encode(obj), dtype=np.uint8)
        sizes = np.array(self.comm.gather(int(data.size), root=0) or [], dtype=np.int64)
        if self.rank == 0:
            out = np.empty(int(sizes.sum()), np.uint8)
            self.comm.Gatherv(data, [out, sizes.tolist()], root=0)
            offsets = np.concatenate([[0], np.cumsum(sizes)])
            return [json.loads(out[offsets[i]:offsets[i + 1]].tobytes().decode()) for i in range(self.world)]
        self.comm.Gatherv(data, None, root=0)
        return None

    def versions(self) -> dict[str, str]:
        import mpi4py
        levels = {self.MPI.THREAD_SINGLE: "single", self.MPI.THREAD_FUNNELED: "funneled",
                  self.MPI.THREAD_SERIALIZED: "serialized", self.MPI.THREAD_MULTIPLE: "multiple"}
        library = self.MPI.Get_library_version().rstrip("\x00").strip()   # Open MPI's ends in a NUL
        return {"mpi4py": mpi4py.__version__, "mpi_library": library.splitlines()[0],
                "mpi_thread_level": levels.get(self.MPI.Query_thread(), str(self.MPI.Query_thread())),
                **({"mpich_netmod": f"{self.netmod_set} (hccl-bench: UCX's business card overflows Slurm's "
                                    "PMI-1 reads under srun --mpi=pmi2)"}
                   if self.netmod_set and "Open MPI" not in library else {})}

    def torch_world(self) -> None:
        """torch.distributed on COMM_WORLD for the layer benches (mpi_torch.py), made at the first layer
        case: a collectives-only run never imports torch."""
        from collectives.backends import mpi_torch
        mpi_torch.init_world(self.rank, self.world)

    def close(self) -> None:
        """Finalize now, with every rank, not at interpreter exit, where a host leader waits for its followers
        (harness.engine.control.Watch.release) while they wait for it in MPI_Finalize: a deadlock."""
        if "torch.distributed" in sys.modules:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()
        from mpi4py import MPI
        if not MPI.Is_finalized():
            MPI.Finalize()


def library_version(python: str = "") -> str:
    """The version string of the MPI library mpi4py loads under `python` ("" = this interpreter),
    read without initialising MPI; another interpreter (an A/B side) is asked in a child process."""
    if not python or os.path.abspath(python) == os.path.abspath(sys.executable):   # venvs share one real binary
        return unstarted_mpi().Get_library_version().rstrip("\x00").strip()
    code = "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print(MPI.Get_library_version())"
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    if proc.returncode:
        why = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise DeviceUnavailable(f"{python} cannot load mpi4py and an MPI library: {why}")
    return proc.stdout.rstrip("\x00\n").strip()


@functools.cache
def variant(python: str = "") -> str:
    """'mpich' or 'openmpi' as `python` loads it (probed before: a failure here is an error, not MPICH)."""
    return "openmpi" if "Open MPI" in library_version(python) else "mpich"


def declare(name: str, library: str, build: str, **declared) -> BackendInfo:
    """An MPI build's backend: what every one shares (this rank side, the library's mpiexec), and `declared`."""
    info = BackendInfo(name, family="mpi", device_kind="cpu", dtypes=DTYPES, library=library, api="mpi4py",
                       create=lambda _, *at: MpiBackend(info, *at), launcher="mpiexec", rendezvous_store=False,
                       numpy_buffers=True, variant=variant, build=build, packages=("mpi4py", build), **declared)
    return info
