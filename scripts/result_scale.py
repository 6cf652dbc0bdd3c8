"""Result files at 1,024 and 4,096 ranks: size, load time, `hccl-bench compare` time, the report.

SYNTHETIC DATA: this machine has 2 cores, so no real run of 1,024 ranks happens here. This plans
past it: the per-rank round times are made up (a latency + size / bandwidth model, 2% noise per
rank and round, a few ranks slower), everything else is the real code. The sweep is the default
`--benchmark` one (kinds.collective.build: every op, sizes 8:32M:4, float32, sum, 20 rounds), each
case's row made by the real row builder (kinds/collective.py's row, which keeps the whole
matrix up to schema.stats.FULL_MATRIX_RANKS ranks and summarises past it), each entry by
schema.results.bench_entry, the file by result_file written as the session writes results.json
(json indent=1, harness/session/plugin.py). Two runs per rank count, B with one op 10% slower, then
`hccl-bench compare A B` and `hccl-bench report A B` in their own processes, timed; the report
must name the slow ranks. --full also writes today's form (the whole matrix) for its size.

    python scripts/result_scale.py [--ranks 1024 4096] [--out DIR] [--full]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collectives.ops import OPS  # noqa: E402
from collectives.sizes import parse_sizes  # noqa: E402
from harness import files  # noqa: E402
from harness.session.options import BENCH_SIZES  # noqa: E402
from kinds import collective  # noqa: E402
from kinds.base import Ran  # noqa: E402
from kinds.options import Options  # noqa: E402
from reports.result_files import load  # noqa: E402
from schema.results import bench_entry, result_file  # noqa: E402
from schema.stats import FULL_MATRIX_RANKS, per_op_seconds, rank_rounds  # noqa: E402

RANKS_PER_HOST = 16
SLOW = {77: 1.30, 1000: 1.15}        # rank -> how much slower than the others (every case, every round)
ROUND_NS = 20e6                      # the default round target (collectives.timing.Plan.round_time_s)


def model_seconds(op: str, nbytes: int, nranks: int) -> float:
    """A made-up per-op time: 20 us x log2(N) latency plus the bus bytes at 20 GB/s."""
    return 20e-6 * np.log2(nranks) + nbytes * OPS[op].bus_factor(nranks) / 20e9


def synthetic_results(case, rounds: int, rng: np.random.Generator, scale: float) -> list[dict]:
    """What the ranks would return: per rank, K and its round times (ns)."""
    t = model_seconds(case.op, case.nbytes, case.nranks) * scale
    k = max(1, int(ROUND_NS / 1e9 / t))
    slow = np.ones(case.nranks)
    for rank, factor in SLOW.items():
        if rank < case.nranks:
            slow[rank] = factor
    noise = rng.lognormal(0.0, 0.02, size=(case.nranks, rounds))
    matrix = np.rint(t * k * 1e9 * slow[:, None] * noise).astype(np.int64)
    return [{"iters": k, "round_ns": row.tolist(), "wrong": 0, "calibration": {"iters": k}} for row in matrix]


def write_run(path: Path, nranks: int, seed: int, slower_op: str | None, full: bool) -> dict:
    """One synthetic run of the default sweep at `nranks`, written as results.json is."""
    opts = Options(benchmark=True, backends=["mpi"], nproc=nranks, sizes=parse_sizes(BENCH_SIZES))
    hosts = {f"node{h:03d}": RANKS_PER_HOST for h in range(nranks // RANKS_PER_HOST)}
    places = {r: (f"node{r // RANKS_PER_HOST:03d}", r % RANKS_PER_HOST) for r in range(nranks)}
    rng = np.random.default_rng(seed)
    entries = []
    t0 = time.perf_counter()
    for case in collective.build(opts):
        results = synthetic_results(case, opts.rounds, rng, 1.10 if case.op == slower_op else 1.0)
        row = collective.KIND.row(case, opts, Ran(results, hosts, places))
        if full:   # today's form: the whole matrix, whatever the rank count
            from dataclasses import replace
            row = replace(row, kept_ranks=[], rank_summary={},
                          **rank_rounds([r["round_ns"] for r in results], places, full_up_to=1 << 30))
        entries.append(bench_entry(f"test_collective[{case.id}]", row,
                                   per_op_seconds(row.round_ns_per_rank, row.iters_per_round).tolist(), case.op))
    built = time.perf_counter() - t0
    meta = {"groups": {"g0": {"hosts": hosts, "devices": ["cpu"]}}, "options": {"nproc": nranks, "synthetic": True},
            "complete": True}
    files.write_atomic(path, json.dumps(result_file(entries, meta), indent=1, default=str))
    return {"cases": len(entries), "build_s": built, "bytes": path.stat().st_size}


def cli(*args: str) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True)
    return time.perf_counter() - t0, done.returncode, (done.stdout + done.stderr).strip()


def measure(nranks: int, out: Path, full: bool) -> dict:
    a, b = out / f"r{nranks}-A.json", out / f"r{nranks}-B.json"
    made = write_run(a, nranks, 1, None, False)
    write_run(b, nranks, 2, "all_gather", False)
    t0 = time.perf_counter()
    run = load(a)
    load_s = time.perf_counter() - t0
    forms = {c.row.per_rank for c in run.cells.values()}
    compare_s, compare_rc, compare_out = cli("compare", str(a), str(b))
    report_s, report_rc, report_out = cli("report", str(a), str(b), "-o", str(out / f"report-{nranks}"))
    html = (out / f"report-{nranks}" / "report.html").read_text() if report_rc == 0 else ""
    named = all(f"<td>{rank}</td><td class=l>node{rank // RANKS_PER_HOST:03d}</td>" in html
                for rank in SLOW if rank < nranks)
    result = {"nranks": nranks, **made, "forms": sorted(forms), "load_s": load_s, "compare_s": compare_s,
              "compare_rc": compare_rc, "compare_last": compare_out.splitlines()[-1] if compare_out else "",
              "report_s": report_s, "report_rc": report_rc, "report_names_slow_ranks": named,
              "report_html_bytes": len(html)}
    if full:
        whole = out / f"r{nranks}-full.json"
        result["full_bytes"] = write_run(whole, nranks, 1, None, True)["bytes"]
        t0 = time.perf_counter()
        load(whole)
        result["full_load_s"] = time.perf_counter() - t0
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--out", help="folder for the files (default: a temporary one, removed)")
    parser.add_argument("--full", action="store_true", help="also write and load the whole-matrix form (today's)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        print(f"# synthetic default sweep (mpi, every op, {BENCH_SIZES}, float32, 20 rounds); whole matrix up to "
              f"{FULL_MATRIX_RANKS} ranks, summarised past it")
        print(f"#{'ranks':>6} {'cases':>6} {'MB':>8} {'build s':>8} {'load s':>7} {'compare s':>10} {'rc':>3} "
              f"{'report s':>9} {'rc':>3} {'names slow':>10} {'full MB':>8} {'full load s':>11}")
        ok = True
        for n in args.ranks:
            r = measure(n, out, args.full)
            full_mb = f"{r['full_bytes'] / 1e6:.1f}" if "full_bytes" in r else "-"
            full_load = f"{r['full_load_s']:.2f}" if "full_load_s" in r else "-"
            print(f" {n:>6} {r['cases']:>6} {r['bytes'] / 1e6:>8.1f} {r['build_s']:>8.1f} {r['load_s']:>7.2f} "
                  f"{r['compare_s']:>10.2f} {r['compare_rc']:>3} {r['report_s']:>9.1f} {r['report_rc']:>3} "
                  f"{str(r['report_names_slow_ranks']):>10} {full_mb:>8} {full_load:>11}", flush=True)
            print(f"#   compare: {r['compare_last']}")
            ok &= r["report_rc"] == 0 and r["report_names_slow_ranks"] and r["compare_rc"] in (0, 1, 6)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
