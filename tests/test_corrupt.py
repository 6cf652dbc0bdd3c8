"""HCCL_BENCH_FAULT=corrupt:RANK:NAME: one rank changes one element of its result before the check,
and the check must see it (#wrong > 0, the case fails). This is how the checks are shown to be
able to fail: collectives (exact), layer benches (single-rank reference), tuning benches."""
import dataclasses
import json

import numpy as np
import pytest

from collectives.rank_tasks import corrupt_one
from harness.engine.worker import _inject_fault
from schema.wire import CollectiveSpec, LinearSpec, PipelineSpec, Step, TuningSpec

LAYER_SPEC = LinearSpec(layer="mlp", impl="manual", tp=2, hidden=16, seq=8, batch=2)
ALL_REDUCE = CollectiveSpec(op="all_reduce", dtype="float32", redop="sum", inplace=True, count=2, plan={})


def test_names_a_fault_may_give_a_case():
    assert ALL_REDUCE.fault_names() == {"all_reduce"}
    assert LAYER_SPEC.fault_names() == {"linear", "mlp"}
    assert PipelineSpec(schedule="1f1b", tp=1, pp=2, hidden=16, seq=8, batch=2).fault_names() == {"pipeline"}
    assert TuningSpec(bench="overlap", op="all_gather", hidden=16, layers=2, plan={}).fault_names() == {"overlap", "all_gather"}
    assert Step(kind="round").fault_names() == set()


def test_corrupt_marks_only_the_named_case_on_the_named_rank(monkeypatch):
    monkeypatch.setenv("HCCL_BENCH_FAULT", "corrupt:1:mlp")
    assert _inject_fault(LAYER_SPEC, 1) == dataclasses.replace(LAYER_SPEC, corrupt=True)
    assert _inject_fault(LAYER_SPEC, 0) is LAYER_SPEC
    assert _inject_fault(ALL_REDUCE, 1) is ALL_REDUCE
    monkeypatch.delenv("HCCL_BENCH_FAULT")
    assert _inject_fault(LAYER_SPEC, 1) is LAYER_SPEC


@pytest.mark.parametrize("value", ["corrupt:1", "explode:1:linear", "corrupt:one:linear"])
def test_a_malformed_fault_is_one_clear_error(monkeypatch, value):
    monkeypatch.setenv("HCCL_BENCH_FAULT", value)
    with pytest.raises(ValueError, match="want MODE:RANK:NAME with MODE one of hang, die, corrupt"):
        _inject_fault(LAYER_SPEC, 1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32", "int8", "uint8"])
def test_corrupt_one_changes_the_first_element_of_a_copy(dtype):
    info = np.finfo(dtype) if np.issubdtype(dtype, np.floating) else np.iinfo(dtype)
    a = np.array([info.max, 1, 2], dtype=dtype)[::-1]        # not contiguous; the top value last
    out = corrupt_one(a)
    assert out[0] != a[0] and (out[1:] == a[1:]).all()
    assert a.tolist() == np.array([info.max, 1, 2], dtype=dtype)[::-1].tolist()   # the result itself is untouched


SMALL = ("--backend", "gloo", "--nproc", "2")
LAYERS = ("--hidden", "64", "--seq", "16", "--batch", "2", "--layers", "4", "--pp", "1,2",
          "--microbatches", "2", "--schedules", "1f1b")
RUNS = {  # NAME: (the bench file, options, -k): one case each
    "linear": ("benches/test_layers.py", SMALL + LAYERS + ("--tp", "2"), "linear-tp2-mlp-manual"),
    "pipeline": ("benches/test_layers.py", SMALL + LAYERS + ("--tp", "1"), "pipeline"),
    "all_reduce": ("benches/test_collectives.py", SMALL + ("--ops", "all_reduce", "--sizes", "1K", "--algos", "default"),
                   "float32"),
    "bucket": ("benches/test_tuning.py", SMALL + LAYERS + ("--tp", "1", "--buckets", "0"), "bucket"),
}


@pytest.mark.slow  # a child pytest with two gloo ranks per NAME
@pytest.mark.parametrize("name", list(RUNS))
def test_a_corrupted_rank_fails_its_case_with_wrong_elements(bench_run, name):
    target, options, select = RUNS[name]
    proc = bench_run(*options, "-k", select, target=target, env={"HCCL_BENCH_FAULT": f"corrupt:1:{name}"})
    assert proc.returncode == 1, proc.output[-3000:]
    assert "wrong elements" in proc.output or "gradient elements differ" in proc.output, proc.output[-3000:]
    rows = [json.loads(line) for line in next(bench_run.results.glob("*/cases.jsonl")).read_text().splitlines()]
    measured = [r for r in rows if "wrong" in r]
    assert measured and all(r["wrong"] > 0 for r in measured), measured
    assert all(r["wrong_per_rank"] == [0, 1] for r in measured if "wrong_per_rank" in r)
    assert "asked this rank to corrupt one element" in next(bench_run.results.glob("*/logs/*/rank1.log")).read_text()
    assert bench_run.leftovers() == []
