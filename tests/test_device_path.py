"""Device-path choices that decide whether a GPU/NPU run works at all, checked where no device is
needed: --graph cases skipped at collection for settings that fail every capture, and the doctor's
point-to-point exchanges kept on the group's own communicator (real gloo ranks)."""
import multiprocessing

import pytest

pytest.importorskip("torch", reason="the doctor exchange runs real gloo ranks and the capture skips read torch: they need torch")
from collectives.capabilities import DeviceFacts
from collectives.device import graph_env_unsupported, graph_unsupported
from kinds.collective import build
from kinds.options import Options

A2 = DeviceFacts("hccl", name="Ascend910B3", devices=8)
H200 = DeviceFacts("nccl", name="NVIDIA H200", devices=8, version=(2, 21, 5), capability=(9, 0))


@pytest.mark.parametrize("kind, env, reason", [
    ("npu", {"TASK_QUEUE_ENABLE": "2"}, "TASK_QUEUE_ENABLE=2: torch_npu refuses to capture an NPU graph"),
    ("npu", {"HCCL_BLOCKING_WAIT": "1"}, "HCCL_BLOCKING_WAIT=1: wait() would spin in the capture"),
    ("npu", {"TORCH_HCCL_BLOCKING_WAIT": "true"}, "TORCH_HCCL_BLOCKING_WAIT=1: wait() would spin"),
    ("cuda", {"TORCH_NCCL_BLOCKING_WAIT": "1"}, "TORCH_NCCL_BLOCKING_WAIT=1: wait() would spin"),
    ("cuda", {"NCCL_BLOCKING_WAIT": "1"}, "NCCL_BLOCKING_WAIT=1: wait() would spin"),
])
def test_settings_that_fail_every_capture_are_the_skip_reason(kind, env, reason):
    """torch_npu's NPUGraph::capture_begin raises under TASK_QUEUE_ENABLE=2; a blocking wait polls a
    captured collective that runs only at replay. Read from the environment, before any device import."""
    assert graph_unsupported(kind, env).startswith(reason) and "\n" not in graph_unsupported(kind, env)


@pytest.mark.parametrize("kind, env", [
    ("npu", {"TASK_QUEUE_ENABLE": "1"}), ("npu", {"TASK_QUEUE_ENABLE": "2", "ASCEND_LAUNCH_BLOCKING": "1"}),
    ("npu", {"HCCL_BLOCKING_WAIT": "0"}), ("cuda", {"TASK_QUEUE_ENABLE": "2"}), ("cuda", {"HCCL_BLOCKING_WAIT": "1"}),
])
def test_other_settings_leave_capture_alone(kind, env):
    assert graph_env_unsupported(kind, env) == ""


@pytest.mark.parametrize("facts, var, reason", [
    (A2, "TASK_QUEUE_ENABLE", "TASK_QUEUE_ENABLE=2: "), (H200, "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT=1: ")])
def test_captured_cases_are_skipped_at_collection_under_those_settings(facts, var, reason, monkeypatch):
    monkeypatch.setenv(var, "2" if var == "TASK_QUEUE_ENABLE" else "1")
    opts = Options(backends=[facts.backend], nproc=8, sizes=[1 << 20], ops=["all_reduce"], dtypes=["float32"],
                   redops=["sum"], graph=(False, True))
    built = build(opts, [facts])
    assert [c.skip.startswith(reason) for c in built if c.graph] == [True]
    assert [c.skip for c in built if not c.graph] == [""]


def test_a_groups_own_setting_and_an_in_place_case_at_one_rank_skip_the_capture():
    """--knobs sets a variable in the groups of its values only: the captured cases of the value that
    fails every capture are skipped for it, the others are not (here they skip for this machine's lack of
    a GPU); at one rank an in-place collective captures nothing (NCCL enqueues no work)."""
    from kinds.collective import ONE_RANK_IN_PLACE
    opts = Options(backends=["nccl"], nproc=8, sizes=[1 << 20], ops=["all_reduce"], dtypes=["float32"],
                   redops=["sum"], graph=(True,), knobs={"TORCH_NCCL_BLOCKING_WAIT": ["0", "1"]})
    skips = {c.knobs["TORCH_NCCL_BLOCKING_WAIT"]: c.skip for c in build(opts, [H200])}
    assert skips["1"].startswith("TORCH_NCCL_BLOCKING_WAIT=1: ") and not skips["0"].startswith("TORCH_NCCL_BLOCKING_WAIT")
    ab = Options(backends=["nccl"], nproc=8, sizes=[1 << 20], ops=["all_reduce"], dtypes=["float32"], redops=["sum"],
                 graph=(True,), ab_env={"TORCH_NCCL_BLOCKING_WAIT": "1"})
    pair = build(ab, [H200])   # side B's setting skips the pair: both sides' captured cases or neither
    assert len(pair) == 2 and all(c.skip.startswith("TORCH_NCCL_BLOCKING_WAIT=1: ") for c in pair), [c.skip for c in pair]
    one = Options(backends=["nccl"], nproc=1, sizes=[1 << 20], ops=["all_reduce", "all_gather"], dtypes=["float32"],
                  redops=["sum"], graph=(True,), inplace=("out", "in"))
    got = {(c.op, c.inplace): c.skip for c in build(one, [H200])}
    assert got[("all_reduce", True)] == ONE_RANK_IN_PLACE and got[("all_gather", False)] == ""


def test_an_in_place_case_at_one_rank_on_nccl_is_not_timed_as_a_transfer():
    """On one H200 every in-place case at one rank took 14-16 us from 8 B to 128 MiB (NCCL enqueues
    nothing): a broadcast's 9389 GB/s was no transfer. Timed eagerly too (--benchmark), it is skipped
    with the reason; the smoke run still checks the call, and an out-of-place case (a copy), two ranks,
    or a CPU backend's one rank still run."""
    from kinds.collective import ONE_RANK_IN_PLACE
    shape = dict(sizes=[1 << 20], dtypes=["float32"], redops=["sum"], benchmark=True)
    one = Options(backends=["nccl"], nproc=1, ops=["all_reduce", "all_gather", "broadcast"], graph=(False,),
                  inplace=("out", "in"), **shape)
    got = {(c.op, c.inplace): c.skip for c in build(one, [H200])}
    assert got[("all_reduce", True)] == got[("broadcast", True)] == ONE_RANK_IN_PLACE
    assert got[("all_gather", False)] == ""
    smoke = Options(backends=["nccl"], nproc=1, ops=["broadcast"], **{**shape, "benchmark": False})
    assert ONE_RANK_IN_PLACE not in {c.skip for c in build(smoke, [H200])}
    two = Options(backends=["nccl"], nproc=2, ops=["broadcast"], **shape)
    assert {c.skip for c in build(two, [H200])} == {""}
    cpu = Options(backends=["gloo"], nproc=1, ops=["broadcast"], **shape)
    assert ONE_RANK_IN_PLACE not in {c.skip for c in build(cpu)}


def test_one_ranks_peak_says_busbw_is_zero_and_names_the_algbw_peak():
    """busbw's factor is 0 at one rank for most ops: the peak line names the algbw peak, not '0 GB/s at 8 B'."""
    from kinds.collective import peak_lines
    from schema.results import CollectiveRow
    rows = [CollectiveRow(backend="nccl", algo="default", op="all_gather", nranks=1, bytes=size, count=size // 4,
                          time_us=t, algbw_gbps=size / t / 1e3, busbw_gbps=0.0) for size, t in ((8, 29.8), (1 << 27, 66.2))]
    assert peak_lines(rows) == ["# peak busbw all_gather: nccl 0 at 1 rank (algbw 2027.458 GB/s at 128MiB)"]


def _doctor_rank(rank: int, store: str, out) -> None:
    """One gloo rank of the doctor's pair exchange, with the unbatched calls made to fail."""
    import os

    import torch.distributed as dist

    from collectives import doctor_tasks
    from collectives.backends import TorchBackend
    from schema.wire import DoctorSpec
    os.environ.pop("HCCL_BENCH_TCP_STORE", None)
    os.environ["HCCL_BENCH_STORE"] = store
    backend = TorchBackend("gloo", rank, 2, rank)

    def unbatched(*args, **kwargs):
        raise AssertionError("an unbatched send/recv: NCCL and HCCL make a 2-rank communicator for it")
    dist.send = dist.recv = unbatched
    try:
        got = doctor_tasks.links(backend, DoctorSpec(kind="doctor_links", rounds=[[[0, 1]]], bytes=64, reps=2, small_reps=2))
        out.put((rank, got["rounds"][0]["peer"]))
    except AssertionError as exc:
        out.put((rank, str(exc)))
    finally:
        dist.destroy_process_group()


def test_the_doctors_pairs_stay_on_the_groups_own_communicator(tmp_path):
    """torch's ProcessGroupNCCL::pointToPoint keys a bare send/recv by the rank pair (a new 2-rank
    communicator each, with its init and buffers); torch_npu does the same while P2P_HCCL_BUFFSIZE != 0.
    A batch (batch_isend_irecv) runs on the group's communicator: every doctor exchange is one."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    ranks = [ctx.Process(target=_doctor_rank, args=(r, str(tmp_path / "store"), out)) for r in range(2)]
    for p in ranks:
        p.start()
    try:
        got = dict(out.get(timeout=120) for _ in ranks)
    finally:
        for p in ranks:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert got == {0: 1, 1: 0}
