"""The doctor's readers of the field's own traces, on real public files (tests/data/traces/SOURCES.md):
NCCL Kineto traces from HolisticTraceAnalysis's tests/data, msprof-analyze's cluster_analyse output
from its test resources, torch_npu's per-rank layout re-nested from that same file; partial jobs and
bad input. In process (harness.doctor.main), fast."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from harness.doctor import main
from reports.traces import ascend, formats, job, kineto, msprof_cluster
from schema.results import ResultError
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data" / "traces"
CLUSTER = DATA / "msprof-cluster" / "cluster_analysis_output" / "cluster_communication.json"


def doctor(capsys, tmp_path: Path, folder: Path) -> tuple[int, str, str, dict | None]:
    out = tmp_path / "doctor.json"
    code = main(["--traces", str(folder), "--json", str(out)])
    got = capsys.readouterr()
    return int(code), got.out, got.err, json.loads(out.read_text()) if out.exists() else None


def refused(capsys, folder: Path, *words: str) -> str:
    code = main(["--traces", str(folder)])
    got = capsys.readouterr()
    line = got.err.strip()
    assert code == 2 and got.out == "" and len(line.splitlines()) == 1 and len(line) < 200, got.err
    for w in words:
        assert w in line, line
    return line


def kernels(path: Path) -> list[dict]:
    """The file's NCCL kernels in start order, read straight from the JSON (not through the reader)."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return sorted((e for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_")),
                  key=lambda e: e["ts"])


def test_an_nccl_trace_gives_its_kernels_on_the_device_clock_with_their_cpu_side():
    """nccl_data.json.gz (HTA nccl_parser_config, torch with pg_config, NCCL 2.17.1): 21 kernels, 15
    all_reduce and 6 broadcast, each with record_param_comms' element counts and dtype; group '0' of
    ranks [0, 1] from distributedInfo."""
    path = DATA / "nccl-two-jobs" / "nccl_data.json.gz"
    t = kineto.read(path)
    raw = kernels(path)
    assert (t.rank, t.world, t.backend, t.groups) == (0, 2, "nccl", {"0": [0, 1]})
    assert [c.dur_us for c in t.collectives] == [k["dur"] for k in raw]
    assert [c.op for c in t.collectives].count("all_reduce") == 15 and [c.op for c in t.collectives].count("broadcast") == 6
    first_ar = next(c for c in t.collectives if c.op == "all_reduce")
    assert first_ar.shape == "2049000->2049000 Float" and first_ar.group == "0"
    assert [c.seq for c in t.collectives] == list(range(21))


def by_op(path: Path) -> dict[str, list[float]]:
    """Kernel durations per op, each op's in start order, read straight from the JSON: the kernel's
    correlation -> its launch -> the nccl:<op> CPU op around the launch on the same thread."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    launch = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    ops = [e for e in events if e["name"].startswith("nccl:")]
    out: dict[str, list[float]] = {}
    for k in kernels(path):
        x = launch[k["args"]["correlation"]]
        (op,) = [e["name"] for e in ops if e["tid"] == x["tid"] and e["ts"] <= x["ts"] <= e["ts"] + e["dur"]]
        out.setdefault(op, []).append(k["dur"])
    return out


def test_two_ranks_of_a_128_rank_nccl_job_are_judged_against_each_other_and_nobody_named(capsys, tmp_path):
    """HTA's trace_filter: ranks 0 and 1 of 128, 10 NCCL kernels each (old torch: no args on the
    kernel and no group name; op from nccl:<op> around the launch; rank 1 issued one all_reduce
    before an all_to_all that rank 0 issued after it, so each op is matched in its own order). Read
    from the data: matched op by op, rank 1's kernel is the shorter in 7 of the 10 (by duration it
    arrived later in 7: even that, one-sided sign test, is p 0.17), and by the doctor's gaps each
    rank is last in 5: nothing to name; the 126 missing ranks (where a late one would be) cannot be
    judged. (HTA's get_potential_stragglers returns its num_candidates: [0, 1] by default, [1] for
    one.)"""
    a, b = (by_op(DATA / "nccl-2-of-128" / f"sampled_rank-{r}.json.gz") for r in (0, 1))
    assert sorted(a) == ["nccl:_all_gather_base", "nccl:all_reduce", "nccl:all_to_all"]
    assert sum(y < x for op in a for x, y in zip(a[op], b[op])) == 7
    code, out, err, data = doctor(capsys, tmp_path, DATA / "nccl-2-of-128")
    assert code == 0, out + err
    assert data["suspects"] == [] and [(s["rank"], s["last"]) for s in data["ranks"]] == [(0, 5), (1, 5)]
    assert data["matched"] == 10 and data["mismatched"] == []
    assert "ranks 2-127 of 128: no trace; judged ranks 0-1" in out
    assert max(len(line) for line in out.splitlines()) < 400          # no line listing 126 ranks
    t = kineto.read(DATA / "nccl-2-of-128" / "sampled_rank-1.json.gz")
    assert [c.op for c in t.collectives[:4]] == ["all_to_all", "all_to_all", "all_reduce", "all_reduce"]
    assert {c.group for c in t.collectives} == {"? all_to_all", "? all_reduce", "? all_gather"}


def test_a_one_rank_nccl_job_names_nobody_and_says_why(capsys, tmp_path):
    """HTA's ns_resolution_trace: world size 1 (NCCL 2.17.1, record_param_comms but no kernel)."""
    code, out, err, data = doctor(capsys, tmp_path, DATA / "nccl-one-rank")
    assert code == 0 and data["suspects"] == [] and data["world"] == 1
    assert "one-rank job (world size 1): no peer waits for it" in out
    assert main(["--traces", str(DATA / "nccl-one-rank"), "-o", str(tmp_path / "page")]) == 0     # the page too
    assert "one-rank job" in (tmp_path / "page" / "doctor.md").read_text() + (tmp_path / "page" / "doctor.html").read_text()


def test_traces_of_two_nccl_jobs_or_two_worlds_are_refused_in_one_line(capsys):
    refused(capsys, DATA / "nccl-two-jobs", "do not overlap the other ranks' in time")      # rank 0 and 1 of two 2-rank jobs
    refused(capsys, DATA / "nccl-two-worlds", "world size 2, but", "says 8")


def test_one_trace_of_300_ranks_is_refused_with_a_range_not_a_list(capsys, tmp_path):
    trace = json.loads(gzip.decompress((DATA / "nccl-2-of-128" / "sampled_rank-0.json.gz").read_bytes()))
    trace["distributedInfo"]["world_size"] = 300
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "rank0.json").write_text(json.dumps(trace))
    refused(capsys, tmp_path / "one", "only rank 0 of 300 has a trace (ranks 1-299 missing)")


def test_a_partial_gloo_job_is_judged_over_the_ranks_present(capsys, tmp_path):
    """late-rank (make_traces.py: rank 2 late by 2 ms in 70% of 40 collectives) without rank 3's file:
    ranks 0-2 still show rank 2 arriving last."""
    folder = tmp_path / "partial"
    folder.mkdir()
    for r in range(3):
        shutil.copy(DATA / "late-rank" / f"rank{r}.trace.json", folder)
    code, out, err, data = doctor(capsys, tmp_path, folder)
    assert "rank 3 of 4: no trace; judged ranks 0-2" in out
    assert code == 1 and [s["rank"] for s in data["suspects"]] == [2], out + err


def test_the_ranges_say_any_rank_list_in_a_few_characters():
    assert job.ranges([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
    assert job.ranges(list(range(2, 128))) == "2-127"
    assert len(job.short_ranges(list(range(0, 600, 2)))) < 70


def test_the_msprof_cluster_output_reads_hccls_times_and_two_collectives_name_nobody(capsys, tmp_path):
    """msprof-analyze's test resource: group (0, 1), two hcom_broadcast ops. Read from the data: rank
    1's Wait Time is near zero in both (0.00015 ms, 0.00001 ms) and its Elapse the shorter (20.8 / 17.4
    ms against rank 0's 121.7 / 27.1 ms, which waited 116.0 / 27.1 ms): rank 1 arrived last both times.
    Two collectives are too few for any test: nobody is named, and the output says so."""
    traces = msprof_cluster.read_dir(CLUSTER.parent.parent)
    assert [t.rank for t in traces] == [0, 1] and traces[0].world == 8        # cluster_step_trace_time.csv: ranks 0-7
    r0, r1 = (t.collectives for t in traces)
    assert [round(c.wait_us / 1e3, 2) for c in r0] == [115.96, 27.1] and all(c.wait_us < 1 for c in r1)
    assert all(b.dur_us < a.dur_us for a, b in zip(r0, r1)) and [c.op for c in r1] == ["broadcast", "broadcast"]
    assert traces[0].groups == {"(0, 1)": [0, 1]}
    code, out, err, data = doctor(capsys, tmp_path, CLUSTER.parent.parent)
    assert code == 0 and data["suspects"] == []
    assert "rank 1: 2 matched collectives, too few to judge" in out
    assert "HCCL's own Wait Time, median per rank: lowest rank 1 0.00 ms, rank 0 71.53 ms" in out   # (116.0 + 27.1) / 2
    assert "the wait printed are the doctor's" in out and "ranks 2-7 of 8: no trace" in out


def _rank_folders(tmp_path: Path) -> Path:
    """torch_npu's per-rank layout around the cluster file's own records: each rank's ops nested as
    torch_npu's CommunicationParser writes communication.json (step -> collective -> op -> times),
    in <name>_ascend_pt/ beside profiler_info_<rank>.json (read for its name only)."""
    cluster = json.loads(CLUSTER.read_text())
    job_dir = tmp_path / "prof"
    for group in cluster.values():
        for step, ops in group.items():
            for op, by_rank in ops.items():
                for r, info in by_rank.items():
                    folder = job_dir / f"node_{r}_ascend_pt"
                    out = folder / "ASCEND_PROFILER_OUTPUT" / "communication.json"
                    out.parent.mkdir(parents=True, exist_ok=True)
                    (folder / f"profiler_info_{r}.json").write_text("{}")
                    comm = json.loads(out.read_text()) if out.exists() else {step: {"collective": {}, "p2p": {}}}
                    comm[step]["collective"][op] = info
                    out.write_text(json.dumps(comm))
    return job_dir


def test_torch_npu_rank_folders_give_the_same_collectives_as_the_cluster_file(capsys, tmp_path):
    job_dir = _rank_folders(tmp_path)
    per_rank = formats.read_job(job_dir)
    cluster = msprof_cluster.read_dir(CLUSTER.parent.parent)
    assert [(c.seq, c.op, c.shape, c.start_us, c.dur_us, c.wait_us) for t in per_rank for c in t.collectives] == \
        [(c.seq, c.op, c.shape, c.start_us, c.dur_us, c.wait_us) for t in cluster for c in t.collectives]
    assert per_rank[0].groups == {"6297232067196334501": [0, 1]} and per_rank[0].world == 2
    one = job_dir / "node_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    assert [t.rank for t in formats.read_job(one)] == [1]          # one rank's output folder given: rank 1 alone
    code, out, err, data = doctor(capsys, tmp_path, job_dir)
    assert code == 0 and data["suspects"] == [] and "HCCL ops from communication.json" in out


def test_bad_ascend_files_are_one_line(capsys, tmp_path):
    job_dir = _rank_folders(tmp_path)
    comm = job_dir / "node_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    text = comm.read_text()
    comm.write_text(text[: len(text) // 2])
    refused(capsys, job_dir, "communication.json: truncated or not JSON")
    comm.unlink()
    refused(capsys, job_dir, "no ASCEND_PROFILER_OUTPUT/communication.json")
    bad = tmp_path / "cluster"
    bad.mkdir()
    (bad / "cluster_communication.json").write_text(json.dumps({"tp": {"step": {}}}))
    refused(capsys, bad, "group 'tp' names no ranks")
    times = json.loads(CLUSTER.read_text())
    op = next(iter(times["(0, 1)"]["step"].values()))
    del op["0"]["Communication Time Info"]["Elapse Time(ms)"]
    (bad / "cluster_communication.json").write_text(json.dumps(times))
    refused(capsys, bad, "no Start Timestamp(us) / Elapse Time(ms)")


def test_a_refusal_stays_under_200_characters_whatever_the_path(capsys, tmp_path):
    deep = tmp_path / ("d" * 120) / ("e" * 100)
    deep.mkdir(parents=True)
    (deep / "rank0.json").write_text("[1, 2")
    refused(capsys, deep, "hccl-bench doctor:")


def test_help_says_which_traces_are_read(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    words = " ".join(capsys.readouterr().out.split())
    for w in ("NCCL", "RCCL", "torch_npu", "msprof", "cluster_analysis_output", "gloo"):
        assert w in words


def test_the_readers_refuse_what_they_cannot_read_in_one_line(tmp_path):
    with pytest.raises(ResultError, match="no torch_npu rank folder"):
        ascend.read_dir(tmp_path)
    with pytest.raises(ResultError, match="no cluster_communication.json"):
        msprof_cluster.read_dir(tmp_path)


def test_torchs_own_seq_numbers_are_used_where_every_collective_of_a_group_has_a_distinct_one(tmp_path):
    """nccl_data.json.gz's record_param_comms carry no "Seq" (torch records one from 2.x, key "Seq" in
    torch/csrc/profiler/util.h): written into a copy, 100 + its order, the reader takes them; two
    collectives given one Seq (p2p ops count apart in torch) fall back to the order."""
    trace = json.loads(gzip.decompress((DATA / "nccl-two-jobs" / "nccl_data.json.gz").read_bytes()))
    comms = sorted((e for e in trace["traceEvents"] if e["name"] == "record_param_comms"), key=lambda e: e["ts"])
    for i, e in enumerate(comms):
        e["args"]["Seq"] = 100 + i
    (tmp_path / "seq.json").write_text(json.dumps(trace))
    seqs = [c.seq for c in kineto.read(tmp_path / "seq.json").collectives]
    assert len(seqs) == 21 and min(seqs) >= 100 and len(set(seqs)) == 21
    comms[1]["args"]["Seq"] = comms[0]["args"]["Seq"]
    (tmp_path / "seq.json").write_text(json.dumps(trace))
    assert [c.seq for c in kineto.read(tmp_path / "seq.json").collectives] == list(range(21))


def test_a_torch_npu_run_without_torch_distributed_is_a_one_rank_job(capsys, tmp_path):
    """profiler_info.json without a rank in its name: torch_npu's output of a run that never
    initialised torch.distributed (the folder's other files are not needed to say so)."""
    folder = tmp_path / "prof" / "node_1_ascend_pt"
    folder.mkdir(parents=True)
    (folder / "profiler_info.json").write_text("{}")
    code, out, err, data = doctor(capsys, tmp_path, tmp_path / "prof")
    assert code == 0 and data["suspects"] == [] and "one-rank job" in out


@pytest.mark.parametrize("args", [{"world_size": 4}, json.dumps({"rank": 0, "world_size": 4})])
def test_the_world_size_a_job_added_to_the_profiler_metadata_is_read(tmp_path, args):
    """A job that adds distributed_args (as MindSpeed does, an object or its JSON text): ranks 2-3 of 4
    have no folder here, and the judgement says so instead of taking 2 ranks for the world."""
    job_dir = _rank_folders(tmp_path)
    (job_dir / "node_0_ascend_pt" / "profiler_metadata.json").write_text(json.dumps({"distributed_args": args}))
    traces = formats.read_job(job_dir)
    assert [t.world for t in traces] == [4, 4] and job.missing(traces) == [2, 3]


def test_the_json_is_the_same_whatever_pythons_hash_seed(tmp_path):
    """Two runs on one folder write the same bytes: no set's order (it follows PYTHONHASHSEED) reaches
    the JSON. The per-group floors of a two-group job once came out in either order."""
    import os
    import subprocess
    import sys
    written = []
    for seed in ("1", "2", "3"):
        out = tmp_path / f"doctor-{seed}.json"
        subprocess.run([sys.executable, "-m", "harness.cli", "doctor", "--traces", str(DATA / "slow-group"), "--json",
                        str(out)], cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, check=False)
        written.append(out.read_bytes())
    assert json.loads(written[0])["group_floor_us"] and written[0] == written[1] == written[2]
