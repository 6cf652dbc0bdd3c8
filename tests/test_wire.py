"""The typed wire (schema/wire.py): every spec and result type goes to JSON and back unchanged, the
driver's bench classes make the specs the ranks read, and a malformed spec is refused in one line,
on the rank side too (a live group answers it with a failed case and keeps serving)."""
import dataclasses
import json
from pathlib import Path

import pytest

import kinds
from harness.engine import worker
from harness.engine.groups import CaseFailure, GroupKey, GroupPool
from kinds.base import Ran
from kinds.collective import CollectiveCase
from kinds.compress import CompressCase
from kinds.options import Options
from kinds.overhead import OverheadCase
from kinds.pipeline import PipelineCase
from schema import wire

SPECS = [
    wire.Step(kind="round"), wire.Step(kind="end"),
    wire.CollectiveSpec(op="all_reduce", dtype="float32", redop="sum", inplace=False, count=8, plan={"rounds": 3}),
    wire.OverheadSpec(count=2, plan={"rounds": 40}),
    wire.LinearSpec(check=True, tp=2, impl="dtensor", sp=True, hidden=16, seq=8, batch=2, corrupt=True),
    wire.PipelineSpec(kind="pipeline_begin", tp=1, pp=2, schedule="1f1b", microbatches=4, hidden=16, seq=8, batch=2),
    wire.TuningSpec(kind="tuning_begin", bench="bucket", hidden=64, layers=4, plan={}, bucket_bytes=1 << 20),
    wire.DoctorSpec(kind="doctor_rings", rounds=[[[0, 1]]], bytes=1024, reps=5, small_reps=20),
    wire.DoctorSkewSpec(rounds=9, work=48, matrix=160),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.kind)
def test_every_spec_goes_to_json_and_back(spec):
    text = json.dumps(wire.to_json(spec))
    assert wire.spec_from_json(json.loads(text)) == spec
    assert worker.RANK_BENCHES[type(spec)]     # every spec type has its rank half


def test_every_spec_kind_has_one_type_and_every_type_a_rank_half():
    assert set(worker.RANK_BENCHES) == set(wire.SPECS.values())
    assert wire.spec_from_json({"kind": "collective_begin", **{k: v for k, v in wire.to_json(SPECS[2]).items()
                                                              if k != "kind"}}).begins


def test_a_spec_type_two_kinds_give_different_rank_halves_is_an_error(monkeypatch):
    """linear and pipeline have a spec type each, so neither takes over the other's specs; a kind that
    declared another's spec type with its own rank half would, so the worker refuses it at start."""
    assert worker.RANK_BENCHES[wire.LinearSpec] != worker.RANK_BENCHES[wire.PipelineSpec]
    clash = dataclasses.make_dataclass("Clash", [("name", str, "clash"), ("spec_types", tuple, (wire.LinearSpec,)),
                                                 ("rank", tuple, ("layers.rank_tasks", "PipelineRank"))])()
    monkeypatch.setattr(worker, "KINDS", (*kinds.KINDS, clash))
    with pytest.raises(TypeError, match="LinearSpec has two rank halves"):
        worker._rank_halves()


def test_results_are_typed_and_a_missing_field_is_named():
    raw = {"wrong": 0, "iters": 3, "round_ns": [10, 11], "plain_round_ns": [9, 9]}
    got = wire.result_from_json(wire.OverheadResult, raw)
    assert got.plain_round_ns == [9, 9] and got.calibration == {}
    with pytest.raises(wire.WireError, match=r"^rank 1's result: field plain_round_ns is missing$"):
        kinds.overhead.KIND.row(OverheadCase(backend="gloo", nranks=2, size=8), Options(),
                                Ran([raw, {"wrong": 0, "iters": 3, "round_ns": [1]}], {}))


@pytest.mark.parametrize("message, error", [
    ([1, 2], "a spec must be a JSON object with a string kind, got [1, 2]"),
    ({"kind": 3}, "a spec must be a JSON object with a string kind, got {'kind': 3}"),
    ({"kind": "pickle"}, "unknown spec kind 'pickle' (known: round, end, collective, "),
    ({"kind": "round", "exec": "x"}, "round spec: unknown field 'exec'"),
    ({"kind": "overhead", "plan": {}}, "overhead spec: field count is missing"),
    ({"kind": "collective_begin", "op": "all_reduce", "dtype": "float32", "redop": "sum", "inplace": False, "plan": {}},
     "collective_begin spec: field count is missing"),
    ({"kind": "overhead", "count": True, "plan": {}}, "overhead spec: field count must be int, got True"),
    ({"kind": "doctor_links", "rounds": [[["0", 1]]], "bytes": 8, "reps": 1},
     "doctor_links spec: field rounds must be list[list[list[int]]], got [[['0', 1]]]"),
])
def test_a_malformed_spec_is_one_line(message, error):
    with pytest.raises(wire.WireError) as info:
        wire.spec_from_json(message)
    assert str(info.value).startswith(error) and "\n" not in str(info.value)


def test_the_driver_halves_make_the_specs_of_today():
    """Field names are the JSON keys the ranks read: a case's spec has its kind and every value it had."""
    opts = Options()
    case = CollectiveCase(backend="gloo", algo="default", op="all_reduce", dtype="float32", redop="sum", inplace=True,
                          size=64, nranks=2, count=16, graph=True)
    assert wire.to_json(kinds.collective.KIND.spec(case, opts)) == {
        "kind": "collective", "timeout_s": 0.0, "corrupt": False, "op": "all_reduce", "dtype": "float32", "redop": "sum",
        "inplace": True, "count": 16, "plan": {**opts.plan(), "graph": True}}
    layer = kinds.pipeline.KIND.spec(PipelineCase(backend="gloo", tp=1, pp=2, nranks=2, schedule="1f1b", microbatches=4), opts)
    assert (layer.kind, layer.schedule, layer.microbatches, layer.layers, layer.plan["warmup"]) == \
           ("pipeline", "1f1b", 4, opts.layers, max(1, min(opts.warmup, 2)))
    tuning = kinds.compress.KIND.spec(CompressCase(backend="gloo", nranks=2, gradient_bytes=4096, comm_dtype="bfloat16"), opts)
    assert (tuning.kind, tuning.bucket_bytes, tuning.comm_dtype, tuning.op) == ("tuning", 4096, "bfloat16", "")
    compress = CompressCase(backend="gloo", nranks=2, gradient_bytes=1, comm_dtype="float32")
    assert (kinds.of_case(case).name, kinds.of_case(compress).name) == ("collective", "compress")
    assert compress.id == "gloo-compress-float32"


@pytest.mark.slow  # two real gloo ranks
def test_a_live_group_refuses_a_malformed_spec_in_one_line_and_serves_the_next(tmp_path):
    pool = GroupPool(Path(tmp_path) / "logs")
    key = GroupKey("gloo", 2)
    good = wire.CollectiveSpec(op="all_reduce", dtype="float32", redop="sum", inplace=True, count=8,
                               plan={"warmup": 1, "rounds": 2, "iters": 1})
    try:
        with pytest.raises(CaseFailure) as info:
            pool.run(key, dataclasses.replace(good, count="8"), 30)   # dataclasses do not check: the ranks must
        assert str(info.value).strip() == "rank 0 raised WireError: collective spec: field count must be int, got '8'"
        results, _ = pool.run(key, good, 30)
        assert [r["wrong"] for r in results] == [0, 0] and all(len(r["round_ns"]) == 2 for r in results)
    finally:
        pool.close_all()


def test_a_ranks_launch_travels_as_its_environment_and_a_missing_variable_is_one_line():
    launch = wire.RankLaunch(backend="gloo", driver_host="10.0.0.1", driver_port=4242, token="t0k", log_dir="/tmp/x")
    assert wire.RankLaunch.from_env(launch.to_env()) == launch
    assert set(launch.to_env()) == set(wire.RankLaunch.ENV.values())
    env = {k: v for k, v in launch.to_env().items() if k != "HCCL_BENCH_TOKEN"}
    with pytest.raises(wire.WireError, match=r"^HCCL_BENCH_TOKEN is not set: a rank is started by hccl-bench's driver"):
        wire.RankLaunch.from_env(env)
    with pytest.raises(wire.WireError, match=r"^HCCL_BENCH_DRIVER_PORT='http' is not a port number$"):
        wire.RankLaunch.from_env({**launch.to_env(), "HCCL_BENCH_DRIVER_PORT": "http"})
