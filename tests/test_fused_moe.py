"""The fused MoE path's documented limits (layers/fused_moe.py) against op-plugin's own text
(tests/data/op_plugin/moe_distribute_limits.txt), each limit as a skip with its reason in the
driver (kinds/expert.py) or a refusal on the ranks (layers/expert_tasks.py), the EP group the fused
ops use alone, the selectable dtype, and the table's forward-only header. No torch_npu here: what
needs the device is scripts/device_check.sh's."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from layers import fused_moe
from layers.fused_moe import refusal

DOC = dict(line.split(": ", 1) for line in (Path(__file__).parent / "data" / "op_plugin" / "moe_distribute_limits.txt")
           .read_text(encoding="utf-8").splitlines() if line and not line.startswith("#"))
OK = {"ep": 16, "experts": 32, "topk": 2, "hidden": 7168, "tokens": 64, "dtype": "bfloat16", "distinct": True,
      "capacity_factor": 0.0, "buffsize": 4096.0}


def _numbers(key: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", DOC[key].split("：")[-1])]


def test_the_limits_are_the_documented_ones():
    """Every number layers/fused_moe.py holds, read back from op-plugin's text."""
    assert tuple(_numbers("ep_a2")) == fused_moe.EP_SIZES["A2"]
    assert tuple(_numbers("ep_a3")) == fused_moe.EP_SIZES["A3"]
    assert f"≤{fused_moe.MAX_TOKENS['A2']}" in DOC["tokens_a2"] and f"≤{fused_moe.MAX_TOKENS['A3']}" in DOC["tokens_a3"]
    assert f"K≤{fused_moe.MAX_TOPK['A2']}" in DOC["topk_a2"] and f"K≤{fused_moe.MAX_TOPK['A3']}" in DOC["topk_a3"]
    assert f"仅支持 {fused_moe.A3_HIDDEN}" in DOC["hidden_a3"] and f"(0,{fused_moe.A3_HIDDEN}]" in DOC["hidden_a2"]
    assert f"[1, {fused_moe.MAX_EXPERTS}]" in DOC["experts"]
    assert f"<= {fused_moe.A2_MAX_LOCAL_EXPERTS}" in DOC["experts_a2"]
    assert all(d in DOC["dtype"] for d in fused_moe.DTYPES) and "float32" not in DOC["dtype"]
    assert f"默认为{fused_moe.DEFAULT_BUFFSIZE_MB:g}MB" in DOC["buffsize"]
    assert "不能重复" in DOC["distinct"] and "不允许有其他算子" in DOC["group"]


def test_a_case_inside_the_limits_runs_on_both_chips():
    assert refusal("A2", **OK) == "" and refusal("A3", **OK) == "" and refusal("", **OK) == ""


@pytest.mark.parametrize("chip, change, reason", [
    ("", {"dtype": "float32"}, "bfloat16 or float16 tokens, not float32"),
    ("", {"distinct": False}, "one expert twice"),
    ("", {"masked": True}, "no masked selection"),
    ("", {"capacity_factor": 1.25}, "no expert capacity"),
    ("A2", {"ep": 8, "experts": 8}, "not 8"),               # an 8-NPU A2 node at --ep = world size
    ("", {"ep": 4, "experts": 8}, "not 4"),                 # neither chip takes 4
    ("A3", {"hidden": 256}, "hidden size 7168 only"),
    ("A2", {"hidden": 100}, "multiple of 32"),
    ("A2", {"tokens": 300}, "1-256 tokens"),
    ("A3", {"tokens": 600}, "1-512 tokens"),
    ("A3", {"topk": 9}, "top-k 1-8"),
    ("A2", {"experts": 16 * 25}, "at most 24 experts a rank"),
    ("", {"experts": 1024}, "1-512 experts"),
    ("Ascend950", {}, "Atlas A2 and A3 only"),
])
def test_each_documented_limit_refuses_with_its_reason(chip, change, reason):
    assert reason in refusal(chip, **{**OK, **change})


def test_each_chip_takes_what_the_other_refuses():
    assert refusal("A3", **{**OK, "ep": 8, "experts": 8}) == ""        # A3 takes ep 8, A2 does not
    assert refusal("A2", **{**OK, "hidden": 4096}) == ""               # A2 takes any multiple of 32 up to 7168
    assert refusal("A3", **{**OK, "tokens": 300}) == ""
    assert refusal("A2", **{**OK, "topk": 9}) == ""


def test_hccl_buffsize_below_the_documented_minimum_is_refused():
    """A3: 1024^2 x (B - 2) / 2 >= BS x 2 x (H + 128) x (ep x local + K + 1); A2: 2 x (BS x ep x min(local, K) x H x 2 + 2 MB)."""
    shape = {**OK, "tokens": 256, "ep": 16, "experts": 64, "topk": 8}
    a3 = fused_moe.buffsize_needed_mb("A3", 256, 16, 4, 8, 7168)
    assert a3 == pytest.approx(2 + 2 * 256 * 2 * 7296 * (16 * 4 + 9) / 2 ** 20) and a3 > fused_moe.DEFAULT_BUFFSIZE_MB
    assert "HCCL_BUFFSIZE >= 522 MB" in refusal("A3", **{**shape, "buffsize": 200.0})
    assert refusal("A3", **{**shape, "buffsize": 523.0}) == ""
    a2 = fused_moe.buffsize_needed_mb("A2", 256, 16, 4, 8, 7168)
    assert a2 == pytest.approx(2 * (256 * 16 * 4 * 7168 * 2 / 2 ** 20 + 2))
    assert "HCCL_BUFFSIZE" in refusal("A2", **{**shape, "buffsize": a2 - 1}) and refusal("A2", **{**shape, "buffsize": a2}) == ""
    assert refusal("", **{**shape, "buffsize": 1.0}) == ""           # the chip not known: the ranks judge it
    assert fused_moe.buffsize_mb({}) == 200.0 and fused_moe.buffsize_mb({"HCCL_BUFFSIZE": "512"}) == 512.0


# ---- the driver: cases, skips, the table -------------------------------------------------------------
def _cases(**given):
    from dataclasses import replace

    from kinds.expert import ExpertSettings, _build_launch
    from kinds.options import Options
    opts = Options(backends=["hccl"], nproc=8)
    opts.settings = [replace(ExpertSettings.defaults(), moe_impl=["fused"], routing=["uniform"], **given)]
    return list(_build_launch(opts))


def test_the_fused_case_is_bfloat16_unless_told_and_float32_is_skipped_with_the_reason():
    (auto,) = _cases()
    assert auto.dtype == "bfloat16" and "bfloat16" in auto.id
    f32, f16 = _cases(moe_dtype=["float32", "float16"])
    assert "bfloat16 or float16 tokens, not float32" in f32.skip and f16.dtype == "float16"
    from kinds.expert import KIND
    from kinds.options import Options
    assert KIND.spec(f16, Options()).dtype == "float16"   # the dtype travels to the ranks


def test_the_driver_skips_by_the_chip_it_reads():
    from kinds.expert import ExpertCase, _skip
    case = ExpertCase(backend="hccl", nranks=8, ep=8, experts=8, topk=2, routing="uniform", capacity_factor=0.0,
                      impl="fused", tokens=64, hidden=7168, dtype="bfloat16")
    assert "not 8" in _skip(case, "hccl", "A2") and _skip(case, "hccl", "A3") == ""
    skewed = ExpertCase(**{**case.__dict__, "routing": "skewed:0.5", "skip": ""})
    assert "one expert twice" in _skip(skewed, "hccl", "A3")
    small = ExpertCase(**{**case.__dict__, "hidden": 256, "skip": ""})
    assert "7168 only" in _skip(small, "hccl", "A3")
    big = ExpertCase(**{**case.__dict__, "tokens": 512, "experts": 64, "skip": ""})
    assert "HCCL_BUFFSIZE" in _skip(big, "hccl", "A3")
    big.knobs = {"HCCL_BUFFSIZE": "2048"}   # --knobs HCCL_BUFFSIZE=2048: the group's environment
    assert _skip(big, "hccl", "A3") == ""


def _row(impl: str):
    from kinds.expert import ExpertRow
    return ExpertRow(backend="hccl", bench="expert", nranks=16, ep=16, experts=32, topk=2, routing="uniform",
                     capacity_factor=0.0, impl=impl, tokens=64, hidden=7168, dtype="bfloat16", wrong=0, step_us=10.0)


def test_the_table_says_the_fused_step_is_forward_only():
    from kinds.expert import KIND
    both = KIND.table([_row("alltoallv"), _row("fused")])
    assert "fused: forward only" in both and "bfloat16" in both
    assert "forward only" not in KIND.table([_row("alltoallv")])


# ---- the ranks: the group and the ids --------------------------------------------------------------
def test_the_fused_ops_get_a_group_of_their_own(tmp_path):
    """Not the mesh group the other benches and the counts' all_gather use: made once per ep size."""
    pytest.importorskip("torch")
    import torch.distributed as dist

    from layers import expert_tasks
    from layers.mesh import Axis, ParallelDims
    from layers.rank_tasks import groups_for
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        shared = groups_for(ParallelDims.fit(1, 1, 1), 0)[Axis.TP]
        own = expert_tasks.fused_group(1, 1, 0)
        assert own is not shared and dist.get_world_size(own) == 1
        assert expert_tasks.fused_group(1, 1, 0) is own
    finally:
        expert_tasks.fused_group.cache_clear()
        groups_for.cache_clear()
        dist.destroy_process_group()


def test_the_ranks_refuse_replayed_ids_that_repeat_an_expert_in_a_token():
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from layers import expert_tasks
    spec = SimpleNamespace(ep=16, experts=32, topk=2, hidden=7168, tokens=4, routing="file", hot_share=0.0,
                           expert_ids=[0, 1, 2, 3], capacity_factor=0.0, seed=1, dtype="bfloat16")
    assert expert_tasks.fused_refusal(spec, "A3", list(range(16))) == ""
    spec.expert_ids = [0, 1, 2, 2, 5, 6]   # rank 0's second token names expert 2 twice
    assert "one expert twice" in expert_tasks.fused_refusal(spec, "A3", list(range(16)))
