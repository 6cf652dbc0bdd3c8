"""The doctor's judgement of what a late rank costs its peers (reports/traces/judge.py), and the
flight recorder on published dumps (reports/traces/flight_recorder.py, hang.py).

late-step and steps-healthy are gloo jobs made here by scripts/make_traces.py (4 ranks, 40 steps, 3
gradient all_reduces a step back to back; in late-step rank 2 does 5 ms more work before each
step's first one). fr-gpu_error_1st and fr-lock_gil_2nd are nvidia-resiliency-ext's published
flight-recorder folders (tests/data/traces/SOURCES.md), each with its reference answer."""
from __future__ import annotations

import gzip
import json
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

DATA = ROOT / "tests" / "data" / "traces"


def doctor(tmp_path: Path, *args) -> tuple[subprocess.CompletedProcess, dict | None]:
    out = tmp_path / "doctor.json"
    proc = run_cli("doctor", *args, "--json", out)
    return proc, json.loads(out.read_text()) if out.exists() else None


def test_a_rank_late_once_a_step_is_named_by_what_it_costs_its_peers(tmp_path):
    proc, data = doctor(tmp_path, "--traces", DATA / "late-step")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (suspect,) = data["suspects"]
    assert (suspect["kind"], suspect["ranks"]) == ("rank", [2])
    # what the median over all collectives says: on time (the rule before this one named nobody)
    assert abs(data["ranks"][2]["late_us"]) < 1000 and data["ranks"][2]["collectives"] == 120
    by = float(re.search(r"late by ~([\d.]+) ms at the first collective of each step", suspect["evidence"]).group(1))
    assert 4.0 < by < 6.5, suspect["evidence"]                       # the job's 5 ms
    assert 3000 < suspect["cost_step_us"] < 7000 and data["ranks"][2]["units"] == 40
    assert "ranks [0, 1, 3] wait for it" in suspect["evidence"]
    assert all(r["p_cost"] > 0.05 for r in data["ranks"] if r["rank"] != 2)
    assert "late by ~" in proc.stdout and "costing its peers" in proc.stdout


def test_the_same_job_with_no_rank_late_names_nobody(tmp_path):
    proc, data = doctor(tmp_path, "--traces", DATA / "steps-healthy")
    assert proc.returncode == 0 and data["suspects"] == [], proc.stdout + proc.stderr
    assert data["matched"] == 120 and all(r["units"] == 40 for r in data["ranks"])


def test_without_step_marks_the_cost_is_read_per_collective(tmp_path):
    """A trace without ProfilerStep marks: the same rank named, its cost a collective, where it is
    late said as a count of collectives."""
    folder = tmp_path / "nosteps"
    folder.mkdir()
    for path in sorted((DATA / "late-step").glob("*.json.gz")):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        trace["traceEvents"] = [e for e in trace["traceEvents"] if not e.get("name", "").startswith("ProfilerStep#")]
        (folder / path.name[:-3]).write_text(json.dumps(trace))
    proc, data = doctor(tmp_path, "--traces", folder)
    assert proc.returncode == 1 and [s["ranks"] for s in data["suspects"]] == [[2]], proc.stdout + proc.stderr
    assert re.search(r"late by ~[\d.]+ ms in \d+ of its 120 collectives", data["suspects"][0]["evidence"])
    assert data["ranks"][2]["unit"] == "collective"


def test_a_rank_late_in_most_collectives_keeps_the_per_collective_view(tmp_path):
    proc, data = doctor(tmp_path, "--traces", DATA / "late-rank")
    assert proc.returncode == 1 and [s["ranks"] for s in data["suspects"]] == [[2]]
    assert "after its peers (median)" in data["suspects"][0]["evidence"]


def _fr(tmp_path, name):
    return doctor(tmp_path, "--flight-recorder", DATA / name)


def _suspect_lines(stdout: str) -> tuple[int, list[str]]:
    lines = stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("SUSPECTS ("))
    return int(re.search(r"\((\d+)\)", lines[at]).group(1)), [line for line in lines[at + 1:] if line.startswith("  ")]


def test_published_gpu_error_dumps_name_the_reference_ranks(tmp_path):
    """gpu_error_1st: its reference names ranks 12 and 14 (fault_injection.log: GPU errors on 12 and
    14). Rank 12 never enqueued the all_to_all its group waits in; rank 14 enqueued everything its
    peers did (group 42: #42826 on ranks 14 and 15) but completed only #42805 where rank 15 completed
    #42818 (pg_status): stuck on its device. The log beside the dumps is skipped and named."""
    proc, data = _fr(tmp_path, "fr-gpu_error_1st")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert sorted(s["rank"] for s in data["suspects"]) == [12, 14]
    assert "skipped (1): fault_injection.log" in proc.stdout and data["skipped"] == ["fault_injection.log"]
    count, lines = _suspect_lines(proc.stdout)
    assert count == len(lines) == 2
    fourteen = next(s for s in data["suspects"] if s["rank"] == 14)
    assert fourteen["device"] and any(g["group"] == "42" for g in fourteen["groups"])
    assert data["mismatches"] == []


def test_uneven_all_to_all_is_no_mismatch(tmp_path):
    """The same dumps hold MoE all_to_alls whose input sizes differ by rank at one sequence number
    (read from the data here); torch's analyser does not compare them, nor does the doctor."""
    sizes = {}
    for r in range(16):
        for e in pickle.loads((DATA / "fr-gpu_error_1st" / f"_dump_{r}").read_bytes())["entries"]:
            if e["profiling_name"] == "nccl:all_to_all":
                sizes.setdefault((e["process_group"][0], e["collective_seq_id"]), set()).add(str(e["input_sizes"]))
    assert any(len(s) > 1 for s in sizes.values())
    proc, data = _fr(tmp_path, "fr-gpu_error_1st")
    assert data["mismatches"] == [] and "mismatch" not in proc.stdout


def test_a_real_mismatch_is_still_reported(tmp_path):
    folder = tmp_path / "fr"
    shutil.copytree(DATA / "hang", folder)
    dump = pickle.loads((folder / "nccl_trace_rank_1").read_bytes())
    dump["entries"][3]["input_sizes"] = [[7]]
    (folder / "nccl_trace_rank_1").write_bytes(pickle.dumps(dump))
    proc, data = doctor(tmp_path, "--flight-recorder", folder)
    assert proc.returncode == 1 and len(data["mismatches"]) == 1 and "rank 1 gloo:all_reduce sizes [[7]]" in \
        data["mismatches"][0], proc.stdout


def test_dumps_without_entries_are_said_and_their_ranks_named(tmp_path):
    """lock_gil_2nd: ranks 10 and 15 held the GIL; their dumps hold no entry (read here); the
    reference names 10 and 15."""
    empty = [r for r in range(16) if not pickle.loads((DATA / "fr-lock_gil_2nd" / f"_dump_{r}").read_bytes())["entries"]]
    assert empty == [10, 15]
    proc, data = _fr(tmp_path, "fr-lock_gil_2nd")
    assert proc.returncode == 1 and sorted(s["rank"] for s in data["suspects"]) == [10, 15], proc.stdout
    assert "rank 10, 15: a dump without entries" in proc.stdout
    count, lines = _suspect_lines(proc.stdout)
    assert count == len(lines) == 2


def test_a_folder_without_dumps_is_one_line(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "README").write_text("x")
    proc = run_cli("doctor", "--flight-recorder", folder)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and len(proc.stderr) < 200
    assert "no flight-recorder dumps" in proc.stderr


@pytest.mark.slow
def test_a_freshly_made_late_once_a_step_job_names_that_rank(tmp_path):
    """scripts/make_traces.py end to end: 4 real gloo ranks under torch.profiler, rank 2 doing 20 ms
    more work before each step's first all_reduce (four times the 5 ms of the tally: a margin a busy
    machine cannot erase)."""
    proc = subprocess.run([sys.executable, "scripts/make_traces.py", str(tmp_path), "--jobs", "late-step", "--trim",
                           "--judge", "--late-step-ms", "20"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "late-step: right in 1 of 1 runs" in proc.stdout, proc.stdout + proc.stderr
