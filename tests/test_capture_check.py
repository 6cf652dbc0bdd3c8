"""Captured rounds (--graph) are checked: one captured call replayed on refilled buffers and checked
like the eager call, rounds faster than their bytes allow refused, torch's empty-graph warning an
error. The graphs themselves need a GPU (scripts/device_check.sh runs them there); here a real gloo
rank with a stand-in for the device graph exercises the rank code around them."""
import warnings

import pytest

pytest.importorskip("torch", reason="the captured-round checks run a real gloo rank: they need torch")
from collectives import rank_tasks, timing
from collectives.device import Device, EmptyGraph, refusing_empty_graph
from collectives.ops import OPS
from schema.wire import CollectiveSpec

# torch aten/src/ATen/cuda/CUDAGraph.cpp, CUDAGraph::capture_end, when cudaGraphGetNodes counts 0 nodes
TORCH_EMPTY = ("The CUDA Graph is empty. This usually means that the graph was attempted to be captured on wrong device "
               "or stream.")


def test_the_floor_is_what_the_bytes_allow():
    k, gib = 1000, 1 << 30
    assert timing.floor_ns(gib) == pytest.approx(107_374, rel=1e-3)   # 1 GiB at 10 TB/s
    assert "did not hold its 1000 calls" in timing.below_floor([k * 200_000, k * 50_000], k, gib)   # 21 TB/s: impossible
    assert timing.below_floor([k * 200_000, k * 120_000], k, gib) == ""
    assert timing.below_floor([k * 5], k, 8) != ""            # 8 B: the latency floor, 5 ns a call
    assert timing.below_floor([k * 2_000], k, 8) == ""        # 2 us a call: an NCCL call's order
    assert timing.below_floor([], k, gib) == ""


def test_torchs_empty_graph_warning_is_an_error():
    for text in (TORCH_EMPTY, TORCH_EMPTY + " (Triggered internally at CUDAGraph.cpp:208.)", "The NPU Graph is empty."):
        with pytest.raises(EmptyGraph, match="the captured graph is empty") as raised:
            refusing_empty_graph(lambda text=text: warnings.warn(text, UserWarning, stacklevel=1))
        assert "\n" not in str(raised.value)


def test_other_warnings_of_a_capture_pass_on_unchanged():
    with pytest.warns(UserWarning, match="something else"):
        refusing_empty_graph(lambda: warnings.warn("something else", UserWarning, stacklevel=1))
    ran = []
    refusing_empty_graph(lambda: ran.append(1))
    assert ran == [1]


class StandInGraph(Device):
    """The CPU device with a stand-in for a device graph (capturing needs a GPU): its replay runs the
    captured loop, or, `empty`, nothing (a capture that recorded no work and no warning either)."""
    def __init__(self, empty: bool):
        super().__init__("cpu")
        self.empty, self.captured = empty, []

    def capture(self, loop, k):
        self.captured.append(k)
        return (lambda: None) if self.empty else (lambda: loop(k))


@pytest.fixture
def gloo_alone(tmp_path, monkeypatch):
    """A real gloo TorchBackend in this process, a world of one."""
    import torch.distributed as dist

    from collectives.backends import TorchBackend
    monkeypatch.delenv("HCCL_BENCH_TCP_STORE", raising=False)
    monkeypatch.setenv("HCCL_BENCH_STORE", str(tmp_path / "store"))
    backend = TorchBackend("gloo", 0, 1, 0)
    yield backend
    dist.destroy_process_group()


def spec(op: str, inplace: bool, count: int = 8, corrupt: bool = False) -> CollectiveSpec:
    return CollectiveSpec(op=op, dtype="float32", redop="sum", inplace=inplace, count=count, corrupt=corrupt,
                          plan={"warmup": 1, "rounds": 2, "round_time_s": 0.002, "graph": True})


@pytest.mark.parametrize("op, inplace", [(op, place) for op in OPS if OPS[op].min_ranks == 1
                                         for place in sorted(OPS[op].forms["torch"])])
def test_a_captured_case_is_checked_after_one_replay(gloo_alone, op, inplace):
    """Every op and buffer form: one call captured, the buffers refilled, the replay checked (#wrong 0);
    the fault hook's corrupt counts in both checks, eager and captured."""
    gloo_alone.device = StandInGraph(empty=False)
    _, wrong = rank_tasks._checked_call(gloo_alone, spec(op, inplace))
    assert wrong == 0 and gloo_alone.device.captured == [1]
    _, wrong = rank_tasks._checked_call(gloo_alone, spec(op, inplace, corrupt=True))
    assert wrong == 2


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_to_all"])
def test_a_replay_that_does_nothing_is_wrong(gloo_alone, op):
    """The receive buffer is refilled with the sentinel before the replay: a replay that did nothing
    leaves it, where the eager call's result would have passed."""
    gloo_alone.device = StandInGraph(empty=True)
    count = 8
    _, wrong = rank_tasks._checked_call(gloo_alone, spec(op, False, count))
    assert wrong == OPS[op].buffer_counts(count, 1)[1]


def test_captured_rounds_faster_than_their_bytes_fail_the_case(gloo_alone):
    gloo_alone.device = StandInGraph(empty=True)
    with pytest.raises(RuntimeError, match="did not hold its"):
        rank_tasks.CollectiveRank.run(gloo_alone, spec("all_gather", False))
    gloo_alone.device = StandInGraph(empty=False)
    result = rank_tasks.CollectiveRank.run(gloo_alone, spec("all_gather", False))
    assert result.wrong == 0 and len(result.round_ns) == 2
