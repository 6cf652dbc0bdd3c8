"""Worker groups as the driver sees them: start, send a case, collect, detect hangs and deaths, kill.

One group = N rank processes for one GroupKey, reused across cases with that key; a group that hung
or lost a rank is killed and the next case gets a fresh one. Only processes the harness started are signalled.
"""
from __future__ import annotations

import ctypes
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path

from collectives.backends import for_python
from collectives.backends import info as backend_info
from harness.engine import launchers
from harness.engine.control import Channel, ChannelClosed, accept_group, node_key, running
from harness.engine.shm import segment_files, shm_mapped, still_mapped
from harness.engine.worker import CASE_ERROR
from schema import wire
from schema.group_key import GroupKey
from schema.wire import Spec

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 120.0
STARTUP_PER_RANK_S = 0.25     # an interpreter per rank costs ~0.2 s of CPU (docs/clusters.md, "What ranks are given")
HANG_GRACE_S = 3.0
_TIMEOUT_MARK = re.compile(r"^Timeout \([0-9:.]+\)!", re.M)
# glibc's steady state and no BLAS threads from the start (docs/clusters.md, "What ranks are given"); a user's wins
RANK_ENV_DEFAULTS = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(128 << 20),
                     "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


class CaseFailure(RuntimeError):
    """A case could not produce a result; the message names what happened and where."""


class RankHang(CaseFailure):
    pass


class RankDied(CaseFailure):
    pass


try:  # resolved here, not in the forked child: dlopen after fork can deadlock on a lock another
    _PRCTL: Callable | None = ctypes.CDLL("libc.so.6").prctl  # driver thread held, and the driver then waited forever
except (OSError, AttributeError):
    _PRCTL = None


def _die_with_parent() -> None:
    """Child side of fork: get SIGKILL if the driver dies, so no rank outlives the session."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 30) -> str:
    with suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _serve_store(host: str):
    """A TCPStore the driver serves on `host` (which every rank reaches) for a launcher's torch group:
    mpiexec and srun set no MASTER_ADDR, and rank 0's host is not known before the ranks start."""
    import datetime

    import torch.distributed as dist
    return dist.TCPStore(host, 0, None, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(minutes=5))


@dataclass
class WorkerGroup:
    key: GroupKey
    log_dir: Path
    driver_host: str = "127.0.0.1"
    procs: list[subprocess.Popen] = field(default_factory=list)
    ranks: list[dict] = field(default_factory=list)
    chan: Channel | None = None
    watches: list[socket.socket] = field(default_factory=list)   # one per host leader: closing them ends the ranks
    local_env: dict[str, str] = field(default_factory=dict)      # what the harness set to keep a local group on loopback
    store: object = None          # a launcher's torch group: the TCPStore the driver serves (ranks may be anywhere)
    log_offsets: dict[str, int] = field(default_factory=dict)   # where each log ended (bytes) when this case began
    startup_s: float = 0.0        # from start() to the last watch connection and rank 0's hello
    driver_sockets: int = 0       # sockets the driver process held right after this group started
    segments: set[str] = field(default_factory=set)   # MPI shared-memory files its local ranks map (kill removes them)
    shm_before: set[str] | None = None   # the MPI files in /dev/shm before its ranks started (None: not started)

    def start(self) -> None:
        began = time.monotonic()
        self.shm_before = segment_files()
        token = secrets.token_hex(16)
        master_port = _free_port()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            if self.key.launcher:
                plan = launchers.from_template(self.key.launcher, self.key.nproc, self.key.python)
                if backend_info(self.key.backend).rendezvous_store:
                    self.store = _serve_store(self.driver_host)
            else:
                plan = launchers.local(self.key.backend, self.key.nproc, master_port, self.key.python, self.log_dir / "store")
                # what the libraries allow on one machine: UCX's TCP transport and gloo's sockets on loopback
                # (hydra's control port has no bind option); a user's setting wins
                self.local_env = {k: v for k, v in (("UCX_NET_DEVICES", "lo"), ("GLOO_SOCKET_IFNAME", "lo"))
                                  if k not in os.environ and k not in self.key.rank_env}
        except launchers.LauncherError as exc:
            raise CaseFailure(str(exc)) from None
        listener = socket.socket()
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.driver_host, 0))
            listener.listen(socket.SOMAXCONN)
            self._spawn(plan, self._rank_env(token, listener.getsockname()[1], master_port))
            self.chan = self._accept(listener, token)
        finally:
            listener.close()
        self.startup_s, self.driver_sockets = time.monotonic() - began, open_sockets()
        self.segments = shm_mapped(self._our_local_pids())
        with open(self.log_dir / "driver.log", "a") as log:
            log.write(self.startup_line() + "\n")

    def _our_local_pids(self) -> set[int]:
        """Our workers among the ranks whose pids mean something here: same kernel, network and pid
        namespace (a hostname alone is not: cloned machines, containers sharing the host's name)."""
        here = node_key()
        return {r["pid"] for r in self.ranks if r.get("node") == here and _is_our_worker(r["pid"])}

    @property
    def startup_limit_s(self) -> float:
        return STARTUP_TIMEOUT_S + STARTUP_PER_RANK_S * self.key.nproc

    def startup_line(self) -> str:
        """What `scripts/scale_check.py` and a reader quote: start-up time and the driver's descriptors."""
        hosts = len({r.get("host") for r in self.ranks})
        rss, peak = memory_mib()
        return (f"hccl-bench: group {self.log_dir.name}: {self.key.nproc} ranks on {hosts} host{'s' * (hosts != 1)} "
                f"started in {self.startup_s:.2f} s; watch connections {len(self.watches)}; "
                f"driver open sockets {self.driver_sockets}, RSS {rss:.0f} MiB (peak {peak:.0f} MiB)")

    def _rank_env(self, token: str, port: int, master_port: int) -> dict[str, str]:
        wanted: dict[str, str | None] = {**os.environ, **self.local_env, **self.key.rank_env}
        base = {k: v for k, v in wanted.items() if v is not None}   # None: what side B's --ab-source unsets
        base.pop("TORCHELASTIC_USE_AGENT_STORE", None)   # a driver under torchrun: its ranks are not torchrun's
        base.setdefault("MASTER_ADDR", "127.0.0.1")
        base.setdefault("MASTER_PORT", str(master_port))
        if self.store is not None:   # rank 0 of a launcher may be on any host: none of them serves the store
            base["HCCL_BENCH_TCP_STORE"] = f"{self.driver_host}:{self.store.port}"  # type: ignore[attr-defined]
        base.update(wire.RankLaunch(backend=self.key.backend, driver_host=self.driver_host, driver_port=port, token=token,
                                    log_dir=str(self.log_dir.absolute())).to_env())   # ranks start in the repository
        # the repository first, then the path this group's stack asks for (side B's --ab-source may set or unset it)
        base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), base.get("PYTHONPATH")]))
        for var, value in (*RANK_ENV_DEFAULTS.items(), *for_python(self.key.backend, self.key.python).rank_env):
            base.setdefault(var, value)
        return base

    def _spawn(self, plan: launchers.LaunchPlan, base: dict[str, str]) -> None:
        for i, (cmd, extra) in enumerate(zip(plan.commands, plan.per_rank_env)):
            with open(self.log_dir / f"launcher{i}.log", "ab") as out:
                try:
                    self.procs.append(subprocess.Popen(cmd, env={**base, **extra}, stdin=subprocess.DEVNULL,
                                                       stdout=out, stderr=subprocess.STDOUT, cwd=str(REPO_ROOT),
                                                       start_new_session=True, preexec_fn=_die_with_parent))
                except OSError as exc:  # a launcher that is not installed: the case fails, the session goes on
                    raise CaseFailure(f"cannot start {cmd[0]!r}: {exc.strerror or exc}") from None

    def _accept(self, listener: socket.socket, token: str) -> Channel:
        """Rank 0's control channel and the host leaders' watch connections, or CaseFailure."""
        try:
            chan, hello, self.watches = accept_group(listener, token, time.monotonic() + self.startup_limit_s,
                                                     lambda: self._raise_if_dead("while starting"))
        except TimeoutError as exc:
            self.kill()
            raise CaseFailure(f"{self.key.backend} group of {self.key.nproc} ranks did not start within "
                              f"{self.startup_limit_s:.0f}s ({exc})\n{self._logs()}") from None
        self.ranks = hello["ranks"]
        return chan

    # -- running
    def run(self, spec: Spec, timeout_s: float) -> list[dict]:
        """Send one case; return every rank's result or raise RankHang / RankDied / CaseFailure."""
        spec = replace(spec, timeout_s=timeout_s)
        assert self.chan is not None, "run() before start()"
        try:
            self.chan.send(wire.to_json(spec))
        except OSError:
            self._raise_if_dead("before the case started")
            raise
        deadline = time.monotonic() + timeout_s + HANG_GRACE_S
        while True:
            try:
                msg = self.chan.recv(timeout=0.2)
                break
            except socket.timeout:   # TimeoutError from 3.10 on; on 3.9 an OSError, not one
                pass
            except (ChannelClosed, OSError):
                time.sleep(0.5)
                self._raise_if_dead("during the case")
                logs = self._logs()
                self.kill()
                raise RankDied(f"rank 0 closed the control connection\n{logs}") from None
            self._raise_if_dead("during the case")
            if time.monotonic() > deadline:
                self._hang(spec)
        results = msg.get("results")
        if not (isinstance(results, list) and all(isinstance(r, dict) for r in results)):
            self.kill()
            raise CaseFailure(f"rank 0 sent a malformed reply (keys {sorted(msg)[:5]})")
        for rank, err in enumerate(results):
            if "error" in err:
                raise CaseFailure(f"rank {rank} raised {err['error']}\n{err.get('traceback', '')}")
        return results

    def _hang(self, spec: Spec) -> None:
        stuck = sorted(int(m.group(1)) for path in self.log_dir.glob("rank*.log")
                       if (m := re.match(r"rank(\d+)\.log$", path.name)) and _TIMEOUT_MARK.search(self.since_last_case(path)))
        logs = self._logs(stacks_only=True)
        raised = [p.stem for p in sorted(self.log_dir.glob("rank*.log")) if CASE_ERROR in self.since_last_case(p)]
        self.kill()
        cause = f"; {', '.join(raised)} raised first (see its log below)" if raised else ""
        raise RankHang(f"timed out after {spec.timeout_s:g}s; ranks that did not finish: "
                       f"{stuck or 'unknown (no stack dumps arrived)'}{cause}\n{logs}")

    def since_last_case(self, path: Path) -> str:
        """What `path` gained since mark_logs, read from that byte offset: a case costs what its own
        lines cost, never the whole log (NCCL_DEBUG=INFO adds megabytes a case)."""
        with suppress(OSError), open(path, "rb") as log:
            log.seek(self.log_offsets.get(path.name, 0))
            return log.read().decode(errors="replace")
        return ""

    def mark_logs(self) -> None:
        """Remember where each log ends (bytes), so a later dump is attributed to the current case only."""
        self.log_offsets = {p.name: p.stat().st_size for p in self.log_dir.glob("*.log")}

    def _raise_if_dead(self, when: str) -> None:
        if all(p.poll() is None for p in self.procs):
            return
        time.sleep(0.3)  # let the dying rank's last words reach its log
        # and list every rank that is gone by now: a peer that died of the first one's death (gloo's
        # "Connection closed by peer") may or may not have been caught by the first poll
        dead = [(i, p.returncode) for i, p in enumerate(self.procs) if p.poll() is not None]
        if not self.key.launcher and backend_info(self.key.backend).launcher == "spawn":   # ranks are our children
            what = "; ".join(f"rank {i} {_exit_text(code)}" for i, code in dead)
        else:
            gone = [r["rank"] for r in self.ranks if r.get("host") == socket.gethostname() and not _alive(r["pid"])]
            what = f"launcher {_exit_text(dead[0][1])}" + (f"; ranks gone: {gone}" if gone else "")
        logs = self._logs()
        self.kill()
        raise RankDied(f"{what} {when}\n{logs}")

    def _logs(self, stacks_only: bool = False) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("*.log")):
            text = self.since_last_case(path) if stacks_only else _tail(path)
            if stacks_only:
                m = _TIMEOUT_MARK.search(text) or re.search(re.escape(CASE_ERROR), text)
                text = text[m.start():] if m else ""
            if text.strip():
                parts.append(f"--- {path.name} ---\n{text.strip()[-4000:]}")
        return "\n".join(parts)

    # -- stopping
    def close(self, wait_s: float = 5.0) -> None:
        if self.chan is not None:
            with suppress(OSError):
                self.chan.send(wire.EXIT)
        deadline = time.monotonic() + wait_s
        for p in self.procs:
            with suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
        self.kill()

    def kill(self) -> None:
        """SIGKILL every process group this group started, and any of its local ranks still alive;
        then remove the MPI shared-memory segments the ranks' finalize would have removed."""
        local = self._our_local_pids()
        self.segments |= shm_mapped(local)   # before the ranks see their watch close and exit
        if self.chan is not None:
            self.chan.close()
            self.chan = None
        for sock in self.watches:
            sock.close()
        self.watches = []
        self.store = None
        for p in self.procs:
            if p.poll() is None:
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
        for pid in local:
            if _is_our_worker(pid):
                with suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        for p in self.procs:
            with suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        # ranks with no pid here (another network namespace, killed before they said hello) leave
        # theirs unseen: what appeared while the group lived and nobody maps now goes too
        if self.shm_before is not None:
            self.segments |= segment_files() - self.shm_before
        self._remove_segments(local)

    def _remove_segments(self, pids: set[int]) -> None:
        """Unlink the recorded segments that still exist once the ranks are gone (a zombie holds no
        memory) and that no live process maps: another job's use of a file is never cut."""
        left = {path for path in self.segments if os.path.exists(path)}
        if not left:
            return
        deadline = time.monotonic() + 5
        while any(running(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        for path in sorted(left - still_mapped(left)):
            try:
                os.unlink(path)
            except OSError as exc:
                with open(self.log_dir / "driver.log", "a") as log:
                    log.write(f"could not remove the ranks' shared-memory segment {path}: {exc.strerror or exc}\n")

    @property
    def alive(self) -> bool:
        return self.chan is not None and all(p.poll() is None for p in self.procs)


def open_sockets() -> int:
    """Sockets this process holds (/proc/self/fd entries that are sockets)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


def memory_mib() -> tuple[float, float]:
    """This process's resident memory and its peak, MiB (0 where /proc says nothing)."""
    found = {"VmRSS": 0.0, "VmHWM": 0.0}
    with suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in found:
                found[name] = int(value.split()[0]) / 1024
    return found["VmRSS"], found["VmHWM"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _is_our_worker(pid: int) -> bool:
    try:
        return b"harness.engine.worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class GroupPool:
    """Keeps few groups alive (ranks compete for the same cores) and reuses them by key: one
    normally, two for interleaved A/B so both sides of a case run back to back."""

    def __init__(self, log_root: Path, driver_host: str = "127.0.0.1", keep: int = 1):
        self.log_root = log_root
        self.driver_host = driver_host
        self.keep = keep
        self.alive: dict[GroupKey, WorkerGroup] = {}   # least recently used first
        self.current: WorkerGroup | None = None
        self.started = 0

    def get(self, key: GroupKey) -> WorkerGroup:
        group = self.alive.pop(key, None)
        if group is not None and not group.alive:
            group.close()
            group = None
        if group is None:
            while len(self.alive) >= self.keep:
                self.alive.pop(next(iter(self.alive))).close()
            self.started += 1
            group = WorkerGroup(key, self.log_root / f"group{self.started:03d}-{key.backend}-n{key.nproc}",
                                self.driver_host)
            self.alive[key] = group  # registered first so close_all() reaches a half-started group
            try:
                group.start()
            except BaseException:
                group.kill()
                self.alive.pop(key, None)
                raise
        self.alive[key] = group  # most recently used last
        self.current = group
        return group

    def run(self, key: GroupKey, spec: Spec, timeout_s: float) -> tuple[list[dict], WorkerGroup]:
        group = self.get(key)
        group.mark_logs()
        try:
            return group.run(spec, timeout_s), group
        except (RankHang, RankDied):
            self.alive.pop(key, None)  # already killed; the next case starts afresh
            self.current = None
            raise
        except KeyboardInterrupt:
            self.close_all()
            raise

    def close_all(self) -> None:
        while self.alive:
            self.alive.popitem()[1].close(wait_s=2.0)
        self.current = None
